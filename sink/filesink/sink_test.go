package filesink

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/parquet-go/parquet-go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/checkpoint/s3store"
	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/runtime"
)

// TestMain fails the package's tests when a goroutine outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

var ctx = context.Background()

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// files returns every file under root (relative, '/'-separated) with its
// content, hidden ones included.
func localFiles(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// split separates published files from hidden ones.
func split(files map[string]string) (published map[string]string, hidden []string) {
	published = map[string]string{}
	for k, v := range files {
		if strings.HasPrefix(path.Base(k), ".") {
			hidden = append(hidden, k)
		} else {
			published[k] = v
		}
	}
	slices.Sort(hidden)
	return published, hidden
}

func rec(v string) runtime.Record {
	return runtime.Record{Value: []byte(v), Timestamp: time.UnixMilli(1_700_000_000_000)}
}

// lines returns every line of the published files, sorted.
func lines(published map[string]string) []string {
	var out []string
	for _, v := range published {
		sc := bufio.NewScanner(strings.NewReader(v))
		for sc.Scan() {
			out = append(out, sc.Text())
		}
	}
	slices.Sort(out)
	return out
}

func newSink(t *testing.T, cfg Config) *Sink {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = discardLogger()
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// committables decodes the committables of a snapshot.
func committables(t *testing.T, fin runtime.SnapshotFinisher) []Committable {
	t.Helper()
	snap, err := fin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ts checkpoint.TaskState
	if err := json.Unmarshal(snap.State, &ts); err != nil {
		t.Fatal(err)
	}
	envs, err := checkpoint.DecodeCommittables(ts)
	if err != nil {
		t.Fatal(err)
	}
	if len(envs) == 0 {
		t.Fatal("a snapshot without a committables entry")
	}
	var out []Committable
	for _, e := range envs {
		if e.Sink != Type {
			t.Fatalf("envelope of sink type %q, want %q", e.Sink, Type)
		}
		if e.Data == nil {
			if len(envs) != 1 {
				t.Fatalf("an empty-epoch entry among %d", len(envs))
			}
			continue
		}
		c, err := UnmarshalCommittable(e.Data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

func TestSinkPublishesOnlyWhenTheCheckpointCompletes(t *testing.T) {
	dir := t.TempDir()
	bucket, err := NewExpressionBucketAssigner(`"k=" + string(k)`)
	if err != nil {
		t.Fatal(err)
	}
	out := prometheus.NewCounter(prometheus.CounterOpts{Name: "out"})
	s := newSink(t, Config{Name: "out", Subtask: 3, Storage: LocalStorage{Root: dir}, Bucket: bucket, RecordsOut: out})
	for i := range 6 {
		if err := s.ProcessRecord(ctx, 0, rec(fmt.Sprintf(`{"k":%d,"i":%d}`, i%2, i))); err != nil {
			t.Fatal(err)
		}
	}
	pub, hidden := split(localFiles(t, dir))
	if len(pub) != 0 || len(hidden) != 2 || !strings.HasSuffix(hidden[0], inProgressSuffix) {
		t.Fatalf("before the barrier: published %v, hidden %v; want none published, 2 in-progress", pub, hidden)
	}
	cs := committables(t, must(s.SnapshotState(ctx, &runtime.Barrier{CheckpointID: 1})))
	if len(cs) != 2 || cs[0].CheckpointID != 1 || cs[0].Records+cs[1].Records != 6 {
		t.Fatalf("committables %+v: want 2 of checkpoint 1 with 6 records", cs)
	}
	pub, hidden = split(localFiles(t, dir))
	if len(pub) != 0 || len(hidden) != 2 || !strings.HasSuffix(hidden[0], pendingSuffix) || !strings.HasSuffix(hidden[1], pendingSuffix) {
		t.Fatalf("after pre-commit: published %v, hidden %v; want 2 pending, none published", pub, hidden)
	}
	// Records after the barrier are not in checkpoint 1's parts.
	if err := s.ProcessRecord(ctx, 0, rec(`{"k":0,"i":6}`)); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(out); got != 0 {
		t.Fatalf("records out %v before the commit, want 0", got)
	}
	if err := s.NotifyCheckpointComplete(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(out); got != 6 {
		t.Fatalf("records out %v after the commit, want the 6 published", got)
	}
	pub, hidden = split(localFiles(t, dir))
	want := map[string][]string{"k=0": {`{"k":0,"i":0}`, `{"k":0,"i":2}`, `{"k":0,"i":4}`}, "k=1": {`{"k":1,"i":1}`, `{"k":1,"i":3}`, `{"k":1,"i":5}`}}
	if len(pub) != 2 {
		t.Fatalf("published %v, want one part per bucket", pub)
	}
	for name, content := range pub {
		b, base := path.Split(name)
		if !strings.HasPrefix(base, "part-") || !strings.Contains(base, "-3-") || !strings.HasSuffix(base, ".jsonl") {
			t.Errorf("part name %s: want part-<run>-3-<n>.jsonl", name)
		}
		if got := strings.Split(strings.TrimSuffix(content, "\n"), "\n"); !slices.Equal(got, want[strings.TrimSuffix(b, "/")]) {
			t.Errorf("%s holds %q, want %q", name, got, want[strings.TrimSuffix(b, "/")])
		}
	}
	if len(hidden) != 1 || !strings.HasPrefix(hidden[0], "k=0/.part-") || !strings.HasSuffix(hidden[0], inProgressSuffix) {
		t.Fatalf("hidden %v: want the in-progress part of record 6", hidden)
	}
	// EndInput drops the uncovered part.
	if err := s.EndInput(ctx); err != nil {
		t.Fatal(err)
	}
	if _, hidden = split(localFiles(t, dir)); len(hidden) != 0 {
		t.Fatalf("after EndInput hidden %v, want none", hidden)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestRollingPolicy(t *testing.T) {
	t.Run("size", func(t *testing.T) {
		dir := t.TempDir()
		s := newSink(t, Config{Name: "out", Storage: LocalStorage{Root: dir}, Rolling: RollingPolicy{MaxPartSize: 20}})
		for i := range 5 {
			// Each line is 12 bytes: two per part, the second reaches 24 >= 20.
			if err := s.ProcessRecord(ctx, 0, rec(fmt.Sprintf(`{"i":"%03d"}`, i))); err != nil {
				t.Fatal(err)
			}
		}
		_, hidden := split(localFiles(t, dir))
		pending := slices.DeleteFunc(slices.Clone(hidden), func(h string) bool { return !strings.HasSuffix(h, pendingSuffix) })
		if len(pending) != 2 || len(hidden) != 3 {
			t.Fatalf("hidden %v: want 2 rolled (pending) parts and 1 in-progress", hidden)
		}
		cs := committables(t, must(s.SnapshotState(ctx, &runtime.Barrier{CheckpointID: 4})))
		if len(cs) != 3 || cs[0].Records != 2 || cs[1].Records != 2 || cs[2].Records != 1 || cs[2].CheckpointID != 4 || cs[0].Size != 24 {
			t.Fatalf("committables %+v: want 2, 2 and 1 records of checkpoint 4, the first 24 bytes", cs)
		}
		if err := s.NotifyCheckpointComplete(ctx, 4); err != nil {
			t.Fatal(err)
		}
		pub, hidden := split(localFiles(t, dir))
		if len(pub) != 3 || len(hidden) != 0 || len(lines(pub)) != 5 {
			t.Fatalf("published %v hidden %v: want 3 parts with 5 lines", pub, hidden)
		}
	})
	t.Run("time", func(t *testing.T) {
		dir := t.TempDir()
		now := time.Unix(1000, 0)
		s := newSink(t, Config{Name: "out", Storage: LocalStorage{Root: dir}, Now: func() time.Time { return now },
			Bucket:  DateTimeBucketAssigner{Layout: "2006-01-02", ProcessingTime: true},
			Rolling: RollingPolicy{RolloverInterval: time.Minute, InactivityInterval: 10 * time.Second}})
		step := func(d time.Duration, v string) {
			now = now.Add(d)
			if err := s.ProcessRecord(ctx, 0, rec(v)); err != nil {
				t.Fatal(err)
			}
		}
		// The check runs after the write, so the part written is never
		// inactive; it rolls over once 60s after it was opened.
		step(0, `1`)
		step(5*time.Second, `2`)
		step(11*time.Second, `3`)
		step(15*time.Second, `4`)
		if _, hidden := split(localFiles(t, dir)); len(hidden) != 1 || !strings.HasSuffix(hidden[0], inProgressSuffix) {
			t.Fatalf("hidden %v at 31s: want one in-progress part", hidden)
		}
		step(45*time.Second, `5`) // opened 76s ago: rolls over with 5 records
		step(time.Second, `6`)
		cs := committables(t, must(s.SnapshotState(ctx, &runtime.Barrier{CheckpointID: 1})))
		if len(cs) != 2 || cs[0].Records != 5 || cs[1].Records != 1 {
			t.Fatalf("committables %+v: want a part of 5 records rolled at 60s, then one of 1", cs)
		}
		if !strings.HasPrefix(cs[0].Final, "1970-01-01/") {
			t.Fatalf("bucket of %s: want the processing date 1970-01-01", cs[0].Final)
		}
	})
	t.Run("inactivity", func(t *testing.T) {
		dir := t.TempDir()
		now := time.Unix(1000, 0)
		s := newSink(t, Config{Name: "out", Storage: LocalStorage{Root: dir}, Now: func() time.Time { return now },
			Bucket:  must(NewExpressionBucketAssigner(`string(value)`)),
			Rolling: RollingPolicy{InactivityInterval: 10 * time.Second}})
		for i, d := range []time.Duration{0, 2 * time.Second, 20 * time.Second} {
			now = now.Add(d)
			if err := s.ProcessRecord(ctx, 0, rec(fmt.Sprint(i%2))); err != nil {
				t.Fatal(err)
			}
		}
		// At 22s bucket "1" (last written at 2s) is idle 20s and rolls;
		// bucket "0" was just written.
		cs := committables(t, must(s.SnapshotState(ctx, &runtime.Barrier{CheckpointID: 1})))
		if len(cs) != 2 || !strings.HasPrefix(cs[0].Final, "1/") || cs[0].Records != 1 || !strings.HasPrefix(cs[1].Final, "0/") || cs[1].Records != 2 {
			t.Fatalf("committables %+v: want bucket 1 rolled by inactivity first, then bucket 0 (2 records) at the barrier", cs)
		}
	})
}

func TestRecoverPublishesTheCheckpointAndDeletesTheRest(t *testing.T) {
	dir := t.TempDir()
	st := LocalStorage{Root: dir}
	a := newSink(t, Config{Name: "out", Subtask: 0, Storage: st, Rolling: RollingPolicy{MaxPartSize: 8}})
	b := newSink(t, Config{Name: "out", Subtask: 1, Storage: st})
	write := func(s *Sink, vs ...string) {
		for _, v := range vs {
			if err := s.ProcessRecord(ctx, 0, rec(v)); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(a, `"a1"`, `"a2"`, `"a3"`)
	write(b, `"b1"`)
	c1 := append(committables(t, must(a.SnapshotState(ctx, &runtime.Barrier{CheckpointID: 1}))),
		committables(t, must(b.SnapshotState(ctx, &runtime.Barrier{CheckpointID: 1})))...)
	// Subtask 0 saw checkpoint 1 complete and published; subtask 1 was
	// killed before it did.
	if err := a.NotifyCheckpointComplete(ctx, 1); err != nil {
		t.Fatal(err)
	}
	write(a, `"a4"`)
	write(b, `"b2"`, `"b3"`)
	_ = must(a.SnapshotState(ctx, &runtime.Barrier{CheckpointID: 2})) // checkpoint 2 never completes
	write(a, `"a5"`)
	// kill -9: nothing is closed.
	res, err := Recover(ctx, RecoverConfig{Name: "out", Storage: st, Committables: c1, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Published != 1 || res.Already != 2 || len(res.Deleted) != 3 {
		t.Fatalf("result %+v: want 1 published (b's), 2 already (a's), 3 deleted (a4's pending, a5's and b2-3's in-progress)", res)
	}
	pub, hidden := split(localFiles(t, dir))
	if got, want := lines(pub), []string{`"a1"`, `"a2"`, `"a3"`, `"b1"`}; !slices.Equal(got, want) || len(hidden) != 0 {
		t.Fatalf("published lines %q hidden %v; want %q and nothing hidden", got, hidden, want)
	}
	// A second restore of the same checkpoint publishes nothing anew.
	res, err = Recover(ctx, RecoverConfig{Name: "out", Storage: st, Committables: c1, Logger: discardLogger()})
	if err != nil || res.Published != 0 || res.Already != 3 || len(res.Deleted) != 0 {
		t.Fatalf("second recover %+v, %v: want 3 already, nothing else", res, err)
	}
	// A committable whose part is gone is lost.
	lost := Committable{Version: 1, CheckpointID: 9, Final: "part-x-0-0.jsonl", Pending: PendingKey("part-x-0-0.jsonl")}
	if _, err := Recover(ctx, RecoverConfig{Name: "out", Storage: st, Committables: []Committable{lost}, Logger: discardLogger()}); !errors.Is(err, ErrLostPart) {
		t.Fatalf("recover of a lost part: %v, want ErrLostPart", err)
	}
}

func TestRecoverLeavesOtherPrefixesAlone(t *testing.T) {
	dir := t.TempDir()
	st := LocalStorage{Root: dir}
	other := newSink(t, Config{Name: "other", Storage: st, PartPrefix: "part-x"})
	if err := other.ProcessRecord(ctx, 0, rec(`1`)); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, ".hidden-by-someone-else"), []byte("x"), 0o644)
	res, err := Recover(ctx, RecoverConfig{Name: "out", Storage: st, Logger: discardLogger()})
	if err != nil || len(res.Deleted) != 0 {
		t.Fatalf("recover of prefix part: %+v %v; want nothing deleted", res, err)
	}
	if _, hidden := split(localFiles(t, dir)); len(hidden) != 2 {
		t.Fatalf("hidden %v: want the other sink's part and the foreign file kept", hidden)
	}
}

func TestCommittableEncoding(t *testing.T) {
	c := Committable{CheckpointID: 7, Final: "b/part-1-0-2.jsonl", Pending: "b/.part-1-0-2.jsonl.pending", Size: 12, Records: 3}
	b, err := MarshalCommittable(c)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"v":1,"checkpoint_id":7,"pending":"b/.part-1-0-2.jsonl.pending","final":"b/part-1-0-2.jsonl","size":12,"records":3}`; string(b) != want {
		t.Fatalf("encoded %s, want %s", b, want)
	}
	got, err := UnmarshalCommittable(b)
	c.Version = 1
	if err != nil || got != c {
		t.Fatalf("decoded %+v %v, want %+v", got, err, c)
	}
	for _, bad := range []string{`{"v":2,"pending":"b/.x.pending","final":"b/x"}`, `{"v":1,"pending":"b/.y.pending","final":"b/x"}`, `{"v":1}`, `[`} {
		if _, err := UnmarshalCommittable([]byte(bad)); err == nil {
			t.Errorf("UnmarshalCommittable(%s) succeeded, want an error", bad)
		}
	}
}

func TestBucketAssigners(t *testing.T) {
	r := runtime.Record{Key: []byte("k1"), Value: []byte(`{"region":"eu","n":3}`), Timestamp: time.Date(2026, 3, 4, 23, 30, 0, 0, time.UTC)}
	now := time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		a    BucketAssigner
		want string
	}{
		{"base path", BasePathBucketAssigner{}, ""},
		{"event time hourly", DateTimeBucketAssigner{Layout: "2006-01-02--15"}, "2026-03-04--23"},
		{"event time nested in a zone", DateTimeBucketAssigner{Layout: "2006/01/02", Location: berlin}, "2026/03/05"},
		{"processing time", DateTimeBucketAssigner{Layout: "2006-01-02", ProcessingTime: true}, "2027-01-02"},
		{"expression field", must(NewExpressionBucketAssigner(`region`)), "eu"},
		{"expression path", must(NewExpressionBucketAssigner(`"region=" + region + "/key=" + key`)), "region=eu/key=k1"},
		{"expression number", must(NewExpressionBucketAssigner(`n * 2`)), "6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.a.BucketID(r, now)
			if err != nil || got != tc.want {
				t.Fatalf("BucketID = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	for _, src := range []string{`".."`, `"a//b"`, `".hidden"`, `"/abs"`, `missing_field`, `[1]`} {
		_, err := must(NewExpressionBucketAssigner(src)).BucketID(r, now)
		var re *runtime.RecordError
		if !errors.As(err, &re) || re.Reason != runtime.ReasonEvalError {
			t.Errorf("bucket %s: %v, want a RecordError eval_error", src, err)
		}
	}
}

func TestJSONLinesValues(t *testing.T) {
	dir := t.TempDir()
	s := newSink(t, Config{Name: "out", Storage: LocalStorage{Root: dir}})
	for _, r := range []runtime.Record{
		{Value: []byte("{\n  \"a\": 1\n}")},
		{Value: []byte("plain \"text\"\n"), Format: runtime.FormatText},
		{Value: nil},
		{Value: []byte(`[1,2]`)},
	} {
		if err := s.ProcessRecord(ctx, 0, r); err != nil {
			t.Fatal(err)
		}
	}
	_ = must(s.SnapshotState(ctx, &runtime.Barrier{CheckpointID: 1}))
	if err := s.NotifyCheckpointComplete(ctx, 1); err != nil {
		t.Fatal(err)
	}
	pub, _ := split(localFiles(t, dir))
	for _, v := range pub {
		if want := "{\"a\":1}\n\"plain \\\"text\\\"\\n\"\nnull\n[1,2]\n"; v != want {
			t.Fatalf("part holds %q, want %q", v, want)
		}
	}
	if err := s.ProcessRecord(ctx, 0, runtime.Record{Value: []byte("{\n bad")}); err == nil {
		t.Fatal("a multi-line value that is no JSON was written")
	} else if re := new(runtime.RecordError); !errors.As(err, &re) || re.Reason != runtime.ReasonMalformedJSON {
		t.Fatalf("error %v, want a RecordError malformed_json", err)
	}
	s.Close()
}

func TestParquetParts(t *testing.T) {
	dir := t.TempDir()
	cols := []Column{
		{Name: "id", Type: ColumnInt64},
		{Name: "name", Type: ColumnString},
		{Name: "price", Type: ColumnDouble},
		{Name: "ok", Type: ColumnBoolean},
		{Name: "at", Type: ColumnTimestamp},
		{Name: "city", Type: ColumnString, Field: "address.city"},
		{Name: "tags", Type: ColumnJSON},
		{Name: "key", Type: ColumnString, Field: "$key"},
		{Name: "ts", Type: ColumnTimestamp, Field: "$timestamp"},
	}
	s := newSink(t, Config{Name: "out", Storage: LocalStorage{Root: dir}, Format: FormatParquet, Columns: cols})
	recs := []runtime.Record{
		{Key: []byte("a"), Timestamp: time.UnixMilli(5), Value: []byte(`{"id":1,"name":"x","price":2.5,"ok":true,"at":"2026-01-02T03:04:05.006Z","address":{"city":"Oslo"},"tags":["t",1]}`)},
		{Timestamp: time.UnixMilli(6), Value: []byte(`{"id":2,"name":7,"at":1000}`)},
	}
	for _, r := range recs {
		if err := s.ProcessRecord(ctx, 0, r); err != nil {
			t.Fatal(err)
		}
	}
	cs := committables(t, must(s.SnapshotState(ctx, &runtime.Barrier{CheckpointID: 1})))
	if err := s.NotifyCheckpointComplete(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 || !strings.HasSuffix(cs[0].Final, ".parquet") {
		t.Fatalf("committables %+v: want one .parquet part", cs)
	}
	// The file's schema holds the columns in the config's order, not
	// sorted by name.
	if names, want := parquetColumns(t, filepath.Join(dir, cs[0].Final)), []string{"id", "name", "price", "ok", "at", "city", "tags", "key", "ts"}; !slices.Equal(names, want) {
		t.Fatalf("the part's columns %v, want the config's order %v", names, want)
	}
	rows := readParquet(t, filepath.Join(dir, cs[0].Final))
	want := []map[string]any{
		{"id": int64(1), "name": "x", "price": 2.5, "ok": true, "at": time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC).UnixMilli(), "city": "Oslo", "tags": `["t",1]`, "key": "a", "ts": int64(5)},
		{"id": int64(2), "name": "7", "price": nil, "ok": nil, "at": int64(1000), "city": nil, "tags": nil, "key": nil, "ts": int64(6)},
	}
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Fatalf("rows\n%v\nwant\n%v", rows, want)
	}
	err := s.ProcessRecord(ctx, 0, runtime.Record{Value: []byte(`{"id":"seven"}`), Origin: runtime.Origin{Topic: "in", Partition: 2, Offset: 9}})
	if re := new(runtime.RecordError); !errors.As(err, &re) || re.Reason != runtime.ReasonWrongType || !strings.Contains(re.Detail, "column id (int64)") {
		t.Fatalf("wrong type: %v, want a RecordError wrong_type naming column id", err)
	}
	var bre *BadRecordError
	if !errors.As(err, &bre) || !bre.SuppressRestarts() || bre.Origin.Offset != 9 ||
		err.Error() != `filesink: sink out: the record from in/2@9 cannot be written: bad record: wrong_type: file sink: column id (int64): "seven" is no 64-bit integer` {
		t.Fatalf("wrong type: %q, want a BadRecordError suppressing restarts, naming the origin", err)
	}
	s.Close()
}

// parquetColumns returns the column names of the Parquet file at name, in
// the order of its schema as read back from the file's metadata.
func parquetColumns(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	f, err := parquet.OpenFile(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, path := range f.Schema().Columns() {
		out = append(out, strings.Join(path, "."))
	}
	return out
}

// readParquet reads every row of the Parquet file at name, column name to
// Go value (nil for null; int64, float64, bool or string).
func readParquet(t *testing.T, name string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	f, err := parquet.OpenFile(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
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
				name := cols[v.Column()][0]
				switch {
				case v.IsNull():
					m[name] = nil
				case v.Kind() == parquet.Int64:
					m[name] = v.Int64()
				case v.Kind() == parquet.Double:
					m[name] = v.Double()
				case v.Kind() == parquet.Boolean:
					m[name] = v.Boolean()
				default:
					m[name] = string(v.ByteArray())
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

// s3Storage returns an S3Storage on a fresh in-memory S3 server, and a
// client to read the bucket.
func s3Storage(t *testing.T) (*S3Storage, *minio.Client) {
	t.Helper()
	addr := testkit.S3Server(t, "out", true)
	st, err := NewS3Storage(S3Config{Config: s3store.Config{Endpoint: addr, Bucket: "out", Prefix: "jobs/", Region: "us-east-1", PathStyle: true,
		AccessKey: testkit.S3AccessKey, SecretKey: testkit.S3SecretKey}, SpoolDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := minio.New(addr, &minio.Options{Creds: credentials.NewStaticV4(testkit.S3AccessKey, testkit.S3SecretKey, ""), Region: "us-east-1", BucketLookup: minio.BucketLookupPath})
	if err != nil {
		t.Fatal(err)
	}
	return st, cl
}

// objects returns every object of the bucket "out" with its content.
func objects(t *testing.T, cl *minio.Client) map[string]string {
	t.Helper()
	out := map[string]string{}
	for o := range cl.ListObjects(ctx, "out", minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		obj, err := cl.GetObject(ctx, "out", o.Key, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(obj)
		obj.Close()
		if err != nil {
			t.Fatal(err)
		}
		out[o.Key] = string(b)
	}
	return out
}

func TestS3Storage(t *testing.T) {
	st, cl := s3Storage(t)
	s := newSink(t, Config{Name: "out", Subtask: 1, Storage: st, Bucket: DateTimeBucketAssigner{Layout: "2006-01-02"}})
	for i := range 3 {
		if err := s.ProcessRecord(ctx, 0, rec(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	if got := objects(t, cl); len(got) != 0 {
		t.Fatalf("objects before pre-commit %v: want none (in-progress parts are local)", got)
	}
	c1 := committables(t, must(s.SnapshotState(ctx, &runtime.Barrier{CheckpointID: 1})))
	pub, hidden := split(objects(t, cl))
	if len(pub) != 0 || len(hidden) != 1 || hidden[0] != "jobs/"+c1[0].Pending {
		t.Fatalf("after pre-commit published %v hidden %v: want only %s", pub, hidden, c1[0].Pending)
	}
	if err := s.ProcessRecord(ctx, 0, rec(`3`)); err != nil {
		t.Fatal(err)
	}
	_ = must(s.SnapshotState(ctx, &runtime.Barrier{CheckpointID: 2})) // never completes
	if err := s.ProcessRecord(ctx, 0, rec(`4`)); err != nil {
		t.Fatal(err)
	}
	// kill -9, then restore checkpoint 1.
	res, err := Recover(ctx, RecoverConfig{Name: "out", Storage: st, Committables: c1, Logger: discardLogger()})
	if err != nil || res.Published != 1 || len(res.Deleted) != 1 {
		t.Fatalf("recover %+v %v: want 1 published, 1 deleted (checkpoint 2's pending part)", res, err)
	}
	pub, hidden = split(objects(t, cl))
	if got := lines(pub); !slices.Equal(got, []string{"0", "1", "2"}) || len(hidden) != 0 {
		t.Fatalf("published %v (lines %q), hidden %v: want lines 0 1 2 under jobs/2023-11-14/ and nothing hidden", pub, got, hidden)
	}
	for k := range pub {
		if !strings.HasPrefix(k, "jobs/2023-11-14/part-") {
			t.Errorf("object %s: want it under jobs/2023-11-14/", k)
		}
	}
	if spool, _ := filepath.Glob(filepath.Join(st.cfg.SpoolDir, "*")); len(spool) != 0 {
		t.Fatalf("spool files %v left after the restore", spool)
	}
	if res, err = Recover(ctx, RecoverConfig{Name: "out", Storage: st, Committables: c1, Logger: discardLogger()}); err != nil || res.Already != 1 {
		t.Fatalf("second recover %+v %v: want 1 already", res, err)
	}
	lost := Committable{Version: 1, Final: "x/part-a-0-0.jsonl", Pending: PendingKey("x/part-a-0-0.jsonl")}
	if _, err := st.Publish(ctx, lost.Pending, lost.Final); !errors.Is(err, ErrLostPart) {
		t.Fatalf("publish of a lost part: %v, want ErrLostPart", err)
	}
}

// TestExactlyOnceUnderCrashes drives sink subtasks over a replayable input
// (records 0..n-1, each run resuming from the restored checkpoint's offset)
// through many kill -9s at random points (abandoned subtasks: nothing
// closed, checkpoints completed or not, notifications delivered to some
// subtasks only) with a parallelism drawn anew on every restart, on local
// and S3 storage: the published parts hold every record exactly once and
// nothing hidden is left after the last restore.
func TestExactlyOnceUnderCrashes(t *testing.T) {
	for _, kind := range []string{"local", "s3"} {
		t.Run(kind, func(t *testing.T) {
			var st Storage
			var read func() map[string]string
			if kind == "local" {
				dir := t.TempDir()
				st, read = LocalStorage{Root: dir}, func() map[string]string { return localFiles(t, dir) }
			} else {
				s3, cl := s3Storage(t)
				st, read = s3, func() map[string]string { return objects(t, cl) }
			}
			n := 3000
			if kind == "s3" {
				n = 600
			}
			crashRun(t, st, read, n, rand.New(rand.NewPCG(uint64(len(kind)), 7)))
		})
	}
}

func crashRun(t *testing.T, st Storage, read func() map[string]string, n int, rng *rand.Rand) {
	type completed struct {
		id     int64
		offset int
		cs     []Committable
	}
	var last completed // the latest completed checkpoint (id 0: none)
	nextID := int64(1)
	kills := 0
	for run := 0; ; run++ {
		res, err := Recover(ctx, RecoverConfig{Name: "out", Storage: st, Committables: last.cs, Logger: discardLogger()})
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		if _, hidden := split(read()); len(hidden) != 0 {
			t.Fatalf("run %d: hidden parts %v outlived the restore", run, hidden)
		}
		_ = res
		p := 1 + rng.IntN(4)
		sinks := make([]*Sink, p)
		for i := range sinks {
			sinks[i] = newSink(t, Config{Name: "out", Subtask: i, Storage: st,
				Bucket:  must(NewExpressionBucketAssigner(`string(value % 3)`)),
				Rolling: RollingPolicy{MaxPartSize: int64(20 + rng.IntN(200))}})
		}
		final := run >= 12
		killAt := last.offset + rng.IntN(n/4+1)
		for off := last.offset; ; off++ {
			if !final && (off >= killAt || off == n) {
				kills++
				break // kill -9: the sinks are abandoned as they are
			}
			if off == n {
				// The last run ends with a checkpoint that completes.
				id := nextID
				var cs []Committable
				for _, s := range sinks {
					cs = append(cs, committables(t, must(s.SnapshotState(ctx, &runtime.Barrier{CheckpointID: id})))...)
				}
				for _, s := range sinks {
					if err := s.NotifyCheckpointComplete(ctx, id); err != nil {
						t.Fatal(err)
					}
					if err := s.EndInput(ctx); err != nil {
						t.Fatal(err)
					}
					s.Close()
				}
				pub, hidden := split(read())
				got := lines(pub)
				if len(got) != n || len(hidden) != 0 {
					t.Fatalf("after %d kills: %d lines published (want %d), hidden %v", kills, len(got), n, hidden)
				}
				seen := make([]bool, n)
				for _, l := range got {
					var v int
					if _, err := fmt.Sscan(l, &v); err != nil || v < 0 || v >= n || seen[v] {
						t.Fatalf("line %q: a duplicate or a stranger", l)
					}
					seen[v] = true
				}
				t.Logf("%d kills, %d records published once, %d checkpoints", kills, n, nextID-1)
				if kills < 10 {
					t.Fatalf("only %d kills", kills)
				}
				return
			}
			if err := sinks[off%p].ProcessRecord(ctx, 0, runtime.Record{Value: fmt.Appendf(nil, "%d", off)}); err != nil {
				t.Fatal(err)
			}
			if rng.IntN(n/20) == 0 {
				// A checkpoint at offset off+1: every subtask pre-commits.
				id := nextID
				nextID++
				var cs []Committable
				for _, s := range sinks {
					cs = append(cs, committables(t, must(s.SnapshotState(ctx, &runtime.Barrier{CheckpointID: id})))...)
				}
				switch rng.IntN(3) {
				case 0: // the checkpoint fails: nobody hears of it
				case 1, 2: // it completes; some subtasks hear of it before the next kill
					last = completed{id: id, offset: off + 1, cs: cs}
					for _, s := range sinks {
						if rng.IntN(2) == 0 {
							if err := s.NotifyCheckpointComplete(ctx, id); err != nil {
								t.Fatal(err)
							}
						}
					}
				}
			}
		}
	}
}
