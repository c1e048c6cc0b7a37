package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/parquet-go/parquet-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// fileSinkConfig copies topic events into a file sink of type file (JSON
// lines, bucketed by n % 4, parts rolled at 16 KiB) whose output params
// (path or s3, indented for params) are output, exactly once, with
// checkpoints every 100 ms and parallelism p.
func fileSinkConfig(dir, output, broker, metrics string, p int) string {
	return jobHead("filesink", p, dir, brokersKafka(broker), metrics, "info") + `checkpoints:
  interval: 100ms
sources:
  - name: events
    topic: events
sinks:
  - name: files
    type: file
    input: events
    delivery: exactly-once
    params:
` + output + `      bucket:
        expression: '"r=" + string(int(n) % 4)'
      rolling:
        max_part_bytes: 16384
`
}

// fileOutput is where a file sink test's parts go: its params lines, the
// daemon's extra environment, and a listing of its published parts (by
// key, with their lines) and hidden ones.
type fileOutput struct {
	params string
	env    []string
	list   func(t *testing.T) (published map[string][]string, hidden []string)
}

// localOutput is the directory out.
func localOutput(out string) fileOutput {
	return fileOutput{params: "      path: " + out + "\n", list: func(t *testing.T) (map[string][]string, []string) { return outputFiles(t, out) }}
}

// s3Output is the bucket "lake" (prefix "files/") of an in-memory S3
// server in this process, which outlives the daemons a test kills.
func s3Output(t *testing.T) fileOutput {
	addr := testkit.S3Server(t, "lake", true)
	cl, err := minio.New(addr, &minio.Options{Creds: credentials.NewStaticV4(testkit.S3AccessKey, testkit.S3SecretKey, ""), Region: "us-east-1", BucketLookup: minio.BucketLookupPath})
	if err != nil {
		t.Fatal(err)
	}
	spool := t.TempDir()
	return fileOutput{
		params: fmt.Sprintf("      s3:\n        endpoint: %s\n        bucket: lake\n        prefix: files/\n        tls: false\n        spool_dir: %s\n", addr, spool),
		env:    []string{"AWS_ACCESS_KEY_ID=" + testkit.S3AccessKey, "AWS_SECRET_ACCESS_KEY=" + testkit.S3SecretKey},
		list: func(t *testing.T) (map[string][]string, []string) {
			t.Helper()
			published := map[string][]string{}
			var hidden []string
			ctx := t.Context()
			for o := range cl.ListObjects(ctx, "lake", minio.ListObjectsOptions{Prefix: "files/", Recursive: true}) {
				if o.Err != nil {
					t.Fatal(o.Err)
				}
				key := strings.TrimPrefix(o.Key, "files/")
				if strings.HasPrefix(filepath.Base(key), ".") {
					hidden = append(hidden, key)
					continue
				}
				obj, err := cl.GetObject(ctx, "lake", o.Key, minio.GetObjectOptions{})
				if err != nil {
					t.Fatal(err)
				}
				b, err := io.ReadAll(obj)
				obj.Close()
				if err != nil {
					t.Fatal(err)
				}
				published[key] = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
			}
			// The local spool holds the in-progress parts.
			local, _ := filepath.Glob(filepath.Join(spool, ".*"))
			for _, l := range local {
				hidden = append(hidden, "spool/"+filepath.Base(l))
			}
			return published, hidden
		},
	}
}

// outputFiles lists the files under out: the published ones (by path,
// with their lines) and the hidden ones (in-progress and pending parts).
func outputFiles(t *testing.T, out string) (published map[string][]string, hidden []string) {
	t.Helper()
	published = map[string][]string{}
	err := filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(out, p)
		if strings.HasPrefix(d.Name(), ".") {
			hidden = append(hidden, rel)
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		var lines []string
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		published[rel] = lines
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return published, hidden
}

// partRun returns the run id of a part name <prefix>-<run>-<subtask>-<n>...,
// hidden or not.
func partRun(name string) string {
	parts := strings.SplitN(strings.TrimPrefix(filepath.Base(name), "."), "-", 3)
	if len(parts) < 3 {
		return ""
	}
	return parts[1]
}

// waitRecovered waits until the daemon logged the file sink's recovery
// (before any of its subtasks started).
func waitRecovered(t *testing.T, d *proc) string {
	t.Helper()
	return waitLogged(t, d, "file sink recovered")
}

// waitLogged waits until the daemon logged a line holding text and
// returns it.
func waitLogged(t *testing.T, d *proc, text string) string {
	t.Helper()
	var line string
	if !testkit.Poll(30*time.Second, func() bool {
		for l := range strings.Lines(d.out.String()) {
			if strings.Contains(l, text) {
				line = strings.TrimSpace(l)
				return true
			}
		}
		return d.exited()
	}) || line == "" {
		t.Fatalf("no %q log line within 30s (exited %v):\n%s", text, d.exited(), d.out.String())
	}
	return line
}

// TestFileSinkExactlyOnceUnderKill9 is issue 24's file sink acceptance
// test: 50,000 records copied into a file sink in a local directory while
// the daemon is killed with SIGKILL 10 times at random points and restarted
// with a different parallelism each time (1 to 4). After each restore no
// in-progress or pending part of the killed run is left (the restore
// published or deleted each); in the end the published files hold every
// record exactly once, and after a clean stop and one more restore nothing
// hidden is left.
func TestFileSinkExactlyOnceUnderKill9(t *testing.T) {
	fileSinkKill9(t, localOutput(t.TempDir()), 50_000, 10)
}

// TestFileSinkS3ExactlyOnceUnderKill9 is the same on an S3-compatible
// bucket, smaller: 10,000 records, 4 kills.
func TestFileSinkS3ExactlyOnceUnderKill9(t *testing.T) {
	fileSinkKill9(t, s3Output(t), 10_000, 4)
}

func fileSinkKill9(t *testing.T, out fileOutput, records, kills int) {
	const batch = 500
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	t.Logf("seed %d", seed)
	_, broker := startKfake(t, []string{"events"})
	dir, metrics := t.TempDir(), testkit.FreeAddr(t)
	cl := newClient(t, broker, kgo.DefaultProduceTopic("events"))
	killed := map[string]bool{}
	d, prod := kill9Restarts{rng: rng, kills: kills, operator: "files",
		start: func(p int) *proc {
			d := startProcEnv(t, dir, fileSinkConfig(dir, out.params, broker, metrics, p), broker, metrics, out.env)
			waitRecovered(t, d)
			return d
		},
		produce: func() *pacedProducer {
			return producePaced(t, cl, records, batch, 100*time.Millisecond, func(i, j int) []*kgo.Record {
				recs := make([]*kgo.Record, 0, j-i)
				for n := i; n < j; n++ {
					recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "k%d", n%97), Value: fmt.Appendf(nil, `{"n":%d}`, n)})
				}
				return recs
			})
		},
		killed: func(k int) string {
			_, hidden := out.list(t)
			clear(killed)
			for _, h := range hidden {
				killed[partRun(h)] = true
			}
			return fmt.Sprintf("%d hidden parts left", len(hidden))
		},
		restarted: func(k int) {
			_, hidden := out.list(t)
			for _, h := range hidden {
				if killed[partRun(h)] {
					t.Fatalf("restart %d: %s of the killed run outlived the restore", k, h)
				}
			}
		},
	}.run(t, records)
	prod.wait(t, 60*time.Second)
	check := func(when string) {
		t.Helper()
		var count int
		var pub map[string][]string
		if !testkit.Poll(60*time.Second, func() bool {
			pub, _ = out.list(t)
			count = 0
			for _, ls := range pub {
				count += len(ls)
			}
			return count >= records || d.exited()
		}) {
			t.Fatalf("%s: %d lines published after 60s, want %d", when, count, records)
		}
		seen := make([]int, records)
		for name, ls := range pub {
			for _, l := range ls {
				var v struct{ N int }
				if err := json.Unmarshal([]byte(l), &v); err != nil || v.N < 0 || v.N >= records {
					t.Fatalf("%s: line %q of %s: not a record", when, l, name)
				}
				if want := fmt.Sprintf("r=%d", v.N%4); filepath.Dir(name) != want {
					t.Fatalf("%s: record %d in %s, want bucket %s", when, v.N, name, want)
				}
				seen[v.N]++
			}
		}
		bad := 0
		for n, c := range seen {
			if c != 1 {
				if bad++; bad <= 10 {
					t.Errorf("%s: record %d published %d times, want exactly once", when, n, c)
				}
			}
		}
		if bad > 0 {
			t.Fatalf("%s: %d records not published exactly once", when, bad)
		}
		t.Logf("%s: %d records in %d published parts, each exactly once", when, records, len(pub))
	}
	check("after the last restart")
	if code, _ := d.terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("exit status %d after SIGTERM:\n%s", code, d.out.String())
	}
	d = startProcEnv(t, dir, fileSinkConfig(dir, out.params, broker, metrics, 2), broker, metrics, out.env)
	waitRecovered(t, d)
	// No input is left: after the restore, no part is in progress or pending.
	if _, hidden := out.list(t); len(hidden) != 0 {
		t.Fatalf("hidden parts %v after the final restore", hidden)
	}
	check("after a clean stop and a restore")
}

// TestExampleFileSink runs configs/examples/file_sink.yaml: the orders
// with a positive amount are published as Parquet parts under
// region=<region>/, each exactly once with its columns; hidden parts are
// left only while a part is in progress.
func TestExampleFileSink(t *testing.T) {
	t.Parallel()
	_, broker := startKfake(t, []string{"orders"})
	dir, out, metrics := t.TempDir(), t.TempDir(), testkit.FreeAddr(t)
	cfg := exampleConfig(t, "file_sink.yaml", dir, broker, metrics)
	if !strings.Contains(cfg, "path: ./data/orders-archive") {
		t.Fatal("file_sink.yaml has no path: ./data/orders-archive line to replace")
	}
	cfg = strings.Replace(cfg, "path: ./data/orders-archive", "path: "+out, 1)
	d := startDaemon(t, dir, cfg, broker, metrics)
	var recs []*kgo.Record
	want := map[string][]string{}
	ts := time.UnixMilli(1_767_225_600_000) // 2026-01-01T00:00:00Z
	for i := range 40 {
		region := []string{"eu", "us", "apac"}[i%3]
		amount := float64(i%5) * 2.5 // every fifth is 0: filtered out
		recs = append(recs, &kgo.Record{Topic: "orders", Timestamp: ts.Add(time.Duration(i) * time.Second),
			Value: fmt.Appendf(nil, `{"id":%d,"region":%q,"amount":%g,"customer":"c%d"}`, i, region, amount, i%7)})
		if amount > 0 {
			want["region="+region] = append(want["region="+region],
				fmt.Sprintf("%d %s %g c%d %d", i, region, amount, i%7, ts.Add(time.Duration(i)*time.Second).UnixMilli()))
		}
	}
	produce(t, newClient(t, broker), recs...)
	testkit.WaitMetric(t, 30*time.Second, d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "archive"}, 32)
	got := map[string][]string{}
	err := filepath.WalkDir(out, func(p string, de fs.DirEntry, err error) error {
		if err != nil || de.IsDir() || strings.HasPrefix(de.Name(), ".") {
			return err
		}
		if !strings.HasSuffix(p, ".parquet") {
			t.Errorf("part %s: want a .parquet name", p)
		}
		rel, _ := filepath.Rel(out, filepath.Dir(p))
		for _, row := range readParquetRows(t, p) {
			got[rel] = append(got[rel], fmt.Sprintf("%v %v %v %v %v", row["id"], row["region"], row["amount"], row["customer"], row["ordered_at"]))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for k := range got {
		slices.SortFunc(got[k], func(a, b string) int { return cmpID(a) - cmpID(b) })
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("published rows by bucket\n%v\nwant\n%v", got, want)
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
}

// cmpID is the leading integer of a row string.
func cmpID(s string) int {
	n, _ := strconv.Atoi(strings.Fields(s)[0])
	return n
}

// readParquetRows reads every row of the Parquet file at name, column name
// to value (nil for null).
func readParquetRows(t *testing.T, name string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	f, err := parquet.OpenFile(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	cols := f.Schema().Columns()
	r := parquet.NewReader(f)
	defer r.Close()
	var out []map[string]any
	rows := make([]parquet.Row, 1)
	for {
		n, err := r.ReadRows(rows)
		if n == 1 {
			m := map[string]any{}
			for _, v := range rows[0] {
				c := cols[v.Column()][0]
				switch {
				case v.IsNull():
					m[c] = nil
				case v.Kind() == parquet.Int64:
					m[c] = v.Int64()
				case v.Kind() == parquet.Double:
					m[c] = v.Double()
				default:
					m[c] = string(v.ByteArray())
				}
			}
			out = append(out, m)
		}
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestFileSinkBadRecordFailsAtOnce: a record the file sink cannot write
// (a string in an int64 Parquet column) stops the job with exit status 1
// and a message naming the sink, the record's origin and the column,
// without restarts (a restart would meet the same record); nothing of it
// is published.
func TestFileSinkBadRecordFailsAtOnce(t *testing.T) {
	t.Parallel()
	_, broker := startKfake(t, []string{"events"})
	dir, out, metrics := t.TempDir(), t.TempDir(), testkit.FreeAddr(t)
	cfg := jobHead("filesinkbad", 1, dir, brokersKafka(broker), metrics, "info") + `checkpoints:
  interval: 100ms
sources:
  - name: events
    topic: events
sinks:
  - name: files
    type: file
    input: events
    delivery: exactly-once
    params:
      path: ` + out + `
      format: parquet
      columns:
        - {name: id, type: int64}
`
	d := startDaemon(t, dir, cfg, broker, metrics)
	produce(t, newClient(t, broker), &kgo.Record{Topic: "events", Key: []byte("k"), Value: []byte(`{"id":1}`)}, &kgo.Record{Topic: "events", Key: []byte("k"), Value: []byte(`{"id":"two"}`)})
	if code := d.waitExit(t, 30*time.Second); code != 1 {
		t.Fatalf("exit status %d, want 1:\n%s", code, d.out.String())
	}
	log := d.out.String()
	if !regexp.MustCompile(`the record from events/[0-3]@1 cannot be written`).MatchString(log) || !strings.Contains(log, `column id (int64): \"two\" is no 64-bit integer`) ||
		!strings.Contains(log, "not restarted (a restart cannot cure this failure)") {
		t.Fatalf("log does not name the record and column, or restarted:\n%s", log)
	}
	if pub, _ := localOutput(out).list(t); len(pub) != 0 {
		t.Fatalf("published %v, want nothing", pub)
	}
}
