package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// chainConfig is a job with two chains, exactly once: [source events
// (dead letters to events-dlq) -> keep (filter n % 10 != 3) -> shape (map)
// -> sink raw (topic raw)] and shape -hash(key)-> [counts (keyed_count) ->
// tagged (map) -> sink out (topic counts)]: the first chain runs source,
// operators and sink in one task. chaining is job.chaining; unchainShape
// sets chain: false on shape.
func chainConfig(dir, broker, metrics string, chaining, unchainShape bool) string {
	shapeChain := ""
	if unchainShape {
		shapeChain = "\n    chain: false"
	}
	head := jobHead("chained", 2, dir, brokersKafka(broker), metrics, "info")
	head = strings.Replace(head, "  parallelism: 2\n", fmt.Sprintf("  parallelism: 2\n  chaining: %t\n", chaining), 1)
	return head + fmt.Sprintf(`state:
  backend: pebble
checkpoints:
  interval: 100ms
sources:
  - name: events
    topic: events
    on_error: dead-letter
    dead_letter_topic: events-dlq
operators:
  - name: keep
    type: filter
    input: events
    params:
      condition: n %% 10 != 3
  - name: shape
    type: map
    input: keep%s
    params:
      value: '{"key": key, "n": n}'
  - name: counts
    type: keyed_count
    input: shape
    key_by: key
  - name: tagged
    type: map
    input: counts
    params:
      value: '{"key": key, "count": count, "tag": "c"}'
sinks:
  - name: out
    input: tagged
    topic: counts
    delivery: exactly-once
  - name: raw
    input: shape
    topic: raw
    delivery: exactly-once
`, shapeChain)
}

// chainRecords returns records i..j-1 of the chained job's input: key
// k<n mod keys>, value {"key":..., "n": n}; record bad (when in range) has
// a string n, which the filter fails on (a dead letter).
func chainRecords(keys, bad int) func(i, j int) []*kgo.Record {
	return func(i, j int) []*kgo.Record {
		recs := make([]*kgo.Record, 0, j-i)
		for n := i; n < j; n++ {
			k := fmt.Sprintf("k%03d", n%keys)
			v := fmt.Appendf(nil, `{"key":%q,"n":%d}`, k, n)
			if n == bad {
				v = fmt.Appendf(nil, `{"key":%q,"n":"x"}`, k)
			}
			recs = append(recs, &kgo.Record{Topic: "events", Key: []byte(k), Value: v})
		}
		return recs
	}
}

// chainWant is the exact output of the chained job over records 0..total-1:
// per key, {"count":c,"key":k,"tag":"c"} for c = 1..(records of the key
// the filter keeps), in order.
func chainWant(total, keys, bad int) map[string][]string {
	want := map[string][]string{}
	for n := range total {
		if n%10 == 3 || n == bad {
			continue
		}
		k := fmt.Sprintf("k%03d", n%keys)
		want[k] = append(want[k], fmt.Sprintf(`{"count":%d,"key":%q,"tag":"c"}`, len(want[k])+1, k))
	}
	return want
}

// rawWant is the exact output of the chained job's raw sink over records
// 0..total-1: per key, {"key":k,"n":n} for every record the filter keeps,
// in order.
func rawWant(total, keys, bad int) map[string][]string {
	want := map[string][]string{}
	for n := range total {
		if n%10 == 3 || n == bad {
			continue
		}
		k := fmt.Sprintf("k%03d", n%keys)
		want[k] = append(want[k], fmt.Sprintf(`{"key":%q,"n":%d}`, k, n))
	}
	return want
}

// readByKey reads topic (read_committed) until it holds n records or
// 30 s passed, and returns its values by key.
func readByKey(t *testing.T, broker, topic string, n int) map[string][]string {
	t.Helper()
	var out []*kgo.Record
	testkit.Poll(30*time.Second, func() bool {
		out = testkit.ReadTopic(t, []string{broker}, topic, 10*time.Second)
		return len(out) >= n
	})
	return byKey(t, out)
}

// count is the number of values in a by-key map.
func count(m map[string][]string) int {
	n := 0
	for _, vs := range m {
		n += len(vs)
	}
	return n
}

// byKey groups output values by record key, each key's in offset order
// (one key is one partition), after checking the record key is the value's.
func byKey(t *testing.T, recs []*kgo.Record) map[string][]string {
	t.Helper()
	got := map[string][]string{}
	for _, r := range recs {
		var v struct{ Key string }
		if err := json.Unmarshal(r.Value, &v); err != nil || v.Key != string(r.Key) {
			t.Fatalf("output %q with key %q: %v", r.Value, r.Key, err)
		}
		got[v.Key] = append(got[v.Key], string(r.Value))
	}
	return got
}

// diffByKey reports the first keys whose values differ.
func diffByKey(got, want map[string][]string) []string {
	var out []string
	for k, w := range want {
		if !slices.Equal(got[k], w) {
			out = append(out, fmt.Sprintf("key %s: %d values, want %d (first got %.80q)", k, len(got[k]), len(w), got[k]))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			out = append(out, "unexpected key "+k)
		}
	}
	slices.Sort(out)
	return out[:min(len(out), 10)]
}

// runChainJob runs chainConfig on a broker of its own over total records
// (bad is the dead letter) until read_committed counts holds every
// expected record, and returns counts' values by key and events-dlq's
// values.
func runChainJob(t *testing.T, chaining, unchainShape bool, total, keys, bad int) (map[string][]string, []string) {
	t.Helper()
	_, broker := startKfake(t, []string{"events", "events-dlq", "counts", "raw"})
	dir, metrics := t.TempDir(), testkit.FreeAddr(t)
	d := startProc(t, dir, chainConfig(dir, broker, metrics, chaining, unchainShape), broker, metrics)
	produce(t, newClient(t, broker), chainRecords(keys, bad)(0, total)...)
	want := 0
	for _, vs := range chainWant(total, keys, bad) {
		want += len(vs)
	}
	var out []*kgo.Record
	if !testkit.Poll(40*time.Second, func() bool {
		out = testkit.ReadTopic(t, []string{broker}, "counts", 10*time.Second)
		return len(out) >= want || d.exited()
	}) || len(out) != want {
		t.Fatalf("chaining=%v: read_committed counts holds %d records, want %d", chaining, len(out), want)
	}
	var dlq []string
	for _, r := range testkit.ReadTopic(t, []string{broker}, "events-dlq", 10*time.Second) {
		dlq = append(dlq, string(r.Value))
	}
	rw := rawWant(total, keys, bad)
	if d := diffByKey(readByKey(t, broker, "raw", count(rw)), rw); len(d) > 0 {
		t.Errorf("chaining=%v unchainShape=%v: read_committed raw differs from the model:\n%s", chaining, unchainShape, strings.Join(d, "\n"))
	}
	if code, _ := d.terminate(t, 20*time.Second); code != 0 {
		t.Fatalf("chaining=%v: exit status %d", chaining, code)
	}
	// The first chain runs source, operators and sink; the second ends in
	// a sink.
	wantChains := `chains="[events->keep->shape->raw counts->tagged->out]"`
	switch {
	case !chaining:
		wantChains = ""
	case unchainShape:
		wantChains = `chains="[events->keep counts->tagged->out]"`
	}
	var chains string
	for _, line := range strings.Split(d.out.String(), "\n") {
		if strings.Contains(line, "operators chained") {
			chains = line[strings.Index(line, "chains="):]
		}
	}
	if chains != wantChains {
		t.Errorf("chaining=%v unchainShape=%v: the daemon logged %q, want %q", chaining, unchainShape, chains, wantChains)
	}
	return byKey(t, out), dlq
}

// TestChainingOnOffSameOutput: the chained job (two chains, a dead letter
// from a chain's head, keyed state, an exactly-once sink) gives
// byte-identical output with chaining on (the default), off for the job
// (job.chaining: false) and off for one operator (chain: false): per key
// the same values in the same order, each exactly the expected running
// count, and the same dead letter; and so does the filter_project example
// (filter -> map chained, with a dead letter) with chaining on and off.
func TestChainingOnOffSameOutput(t *testing.T) {
	const total, keys, bad = 6000, 50, 4321
	want := chainWant(total, keys, bad)
	type result struct {
		out map[string][]string
		dlq []string
	}
	variants := []struct {
		name                   string
		chaining, unchainShape bool
	}{{"on", true, false}, {"off", false, false}, {"shape-unchained", true, true}}
	results := make([]result, len(variants))
	t.Run("group", func(t *testing.T) {
		for i, v := range variants {
			t.Run(v.name, func(t *testing.T) {
				t.Parallel()
				out, dlq := runChainJob(t, v.chaining, v.unchainShape, total, keys, bad)
				if d := diffByKey(out, want); len(d) > 0 {
					t.Errorf("output differs from the model:\n%s", strings.Join(d, "\n"))
				}
				if wantDLQ := fmt.Sprintf(`{"key":"k%03d","n":"x"}`, bad%keys); !slices.Equal(dlq, []string{wantDLQ}) {
					t.Errorf("events-dlq %q, want [%s]", dlq, wantDLQ)
				}
				results[i] = result{out, dlq}
			})
		}
		t.Run("filter_project", func(t *testing.T) {
			t.Parallel()
			var outs [2][]string
			for i, chaining := range []bool{true, false} {
				outs[i] = runFilterProject(t, chaining)
			}
			if len(outs[0]) != 900 || !slices.Equal(outs[0], outs[1]) {
				t.Errorf("filter_project: %d records chained, %d unchained, want the same 899 and the dead letter", len(outs[0]), len(outs[1]))
			}
		})
	})
	if t.Failed() {
		return
	}
	for i := 1; i < len(results); i++ {
		if d := diffByKey(results[i].out, results[0].out); len(d) > 0 || !slices.Equal(results[i].dlq, results[0].dlq) {
			t.Errorf("%s differs from %s:\n%s", variants[i].name, variants[0].name, strings.Join(d, "\n"))
		}
	}
}

// runFilterProject runs configs/examples/filter_project.yaml (job.chaining
// set to chaining) over 1,000 events and one bad one, and returns
// big-payments' values (sorted) followed by events-dlq's.
func runFilterProject(t *testing.T, chaining bool) []string {
	dir := t.TempDir()
	broker, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
	cfg := filterProjectConfig(t, dir, broker, metrics)
	cfg = strings.Replace(cfg, "\njob:\n", fmt.Sprintf("\njob:\n  chaining: %t\n", chaining), 1)
	d := startDaemon(t, dir, cfg, broker, metrics)
	cl := newClient(t, broker, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for i := range 1000 {
		recs = append(recs, &kgo.Record{Topic: "events", Partition: int32(i % 4), Value: fmt.Appendf(nil, `{"id":%d,"amount":%d,"note":"x"}`, i, i)})
		if i == 500 {
			recs = append(recs, &kgo.Record{Topic: "events", Partition: 1, Value: []byte(`{"id":5000,"amount":"a lot","note":"x"}`)})
		}
	}
	produce(t, cl, recs...)
	testkit.WaitMetric(t, 20*time.Second, d.url(), "kstreamd_source_records_dead_lettered_total", map[string]string{"source": "events"}, 1)
	var out []*kgo.Record
	testkit.Poll(30*time.Second, func() bool {
		out = testkit.ReadTopic(t, []string{broker}, "big-payments", 10*time.Second)
		return len(out) >= 899
	})
	var vals []string
	for _, r := range out {
		vals = append(vals, string(r.Value))
	}
	slices.Sort(vals)
	for _, r := range testkit.ReadTopic(t, []string{broker}, "events-dlq", 10*time.Second) {
		vals = append(vals, "dlq "+string(r.Value))
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
	return vals
}

// TestChainingCrashRestore: the chained job (a chain of source, two
// operators and a sink; another of two operators and a sink after a key
// exchange) is killed with SIGKILL twice
// while it processes (each time after a checkpoint completed) and
// restarted on the same data directory, first with chaining off (a
// checkpoint of the chained job restores into separate tasks), then on
// again (a checkpoint of the unchained job restores into chains). The
// exactly-once output is in the end exactly the model's: per key every
// running count once, in order, every kept record once in raw, in order,
// and the one dead letter once.
func TestChainingCrashRestore(t *testing.T) {
	const total, keys, bad, batch = 30_000, 100, 12_345, 500
	_, broker := startKfake(t, []string{"events", "events-dlq", "counts", "raw"})
	dir, metrics := t.TempDir(), testkit.FreeAddr(t)
	cl := newClient(t, broker)
	adm := kadm.NewClient(cl)
	d := startProc(t, dir, chainConfig(dir, broker, metrics, true, false), broker, metrics)
	// 60 batches, one every 80 ms: both kills land while records flow.
	prod := producePaced(t, cl, total, batch, 80*time.Millisecond, chainRecords(keys, bad))
	in := map[string]string{"operator": "counts"}
	completed := map[string]string{"kind": "checkpoint", "result": "completed"}
	for kill, chaining := range []bool{false, true} {
		// This process counted records and completed two checkpoints.
		const threshold = 3000
		ok := testkit.Poll(30*time.Second, func() bool {
			read, err1 := testkit.Scrape(d.url(), "kstreamd_operator_records_in_total", in)
			chk, err2 := testkit.Scrape(d.url(), "kstreamd_checkpoints_total", completed)
			return d.exited() || (err1 == nil && err2 == nil && read >= threshold && chk >= 2)
		})
		if !ok || d.exited() {
			t.Fatalf("kill %d: the job did not reach %v records and 2 checkpoints within 30 s (exited %v)", kill+1, threshold, d.exited())
		}
		t.Logf("kill %d with %d of %d records produced", kill+1, prod.produced.Load(), total)
		last, _ := testkit.Scrape(d.url(), "kstreamd_checkpoint_last_completed_id", nil)
		d.kill(t)
		d = startProc(t, dir, chainConfig(dir, broker, metrics, chaining, false), broker, metrics)
		lines := restoreLines(d.out.String())
		if len(lines) != 1 {
			t.Fatalf("restart %d (chaining %v): restoring lines %q, want one (checkpoint %v or later)", kill+1, chaining, lines, last)
		}
		t.Logf("restart %d (chaining %v) restores %s", kill+1, chaining, lines[0])
	}
	prod.wait(t, 30*time.Second)
	waitGroupAt(t, adm, "kstreamd-chained", "events", topicEnds(t, adm, "events", total), 45*time.Second, d)
	want := chainWant(total, keys, bad)
	n := 0
	for _, vs := range want {
		n += len(vs)
	}
	var out []*kgo.Record
	testkit.Poll(30*time.Second, func() bool {
		out = testkit.ReadTopic(t, []string{broker}, "counts", 10*time.Second)
		return len(out) >= n
	})
	if d := diffByKey(byKey(t, out), want); len(out) != n || len(d) > 0 {
		t.Fatalf("read_committed counts: %d records, want %d:\n%s", len(out), n, strings.Join(d, "\n"))
	}
	// The chain source -> keep -> shape -> raw ran in one task in the
	// first and last process.
	rw := rawWant(total, keys, bad)
	if d := diffByKey(readByKey(t, broker, "raw", count(rw)), rw); len(d) > 0 {
		t.Fatalf("read_committed raw differs from the model:\n%s", strings.Join(d, "\n"))
	}
	dlq := testkit.ReadTopic(t, []string{broker}, "events-dlq", 10*time.Second)
	if wantDLQ := fmt.Sprintf(`{"key":"k%03d","n":"x"}`, bad%keys); len(dlq) != 1 || string(dlq[0].Value) != wantDLQ {
		t.Fatalf("events-dlq holds %d records, want exactly %s once", len(dlq), wantDLQ)
	}
}

// TestChainingStopWithSavepointRescale stops the chained exactly-once job
// with a savepoint (`kstreamd savepoint --stop`) while records flow, the
// chain source -> keep -> shape -> raw running in one task, and restarts it
// at parallelism 3 (a plain run restores the stop-with-savepoint; the
// chained sinks' committables and the sources' offsets are split over 3
// subtasks). The read_committed output is in the end exactly the model's:
// the chained sink committed the savepoint's transaction before the
// subtask finished, the open one was aborted, and nothing is written twice
// or lost across the stop and the rescale.
func TestChainingStopWithSavepointRescale(t *testing.T) {
	const total, keys, bad, batch = 20_000, 100, 7_777, 500
	_, broker := startKfake(t, []string{"events", "events-dlq", "counts", "raw"})
	dir, metrics := t.TempDir(), testkit.FreeAddr(t)
	cl := newClient(t, broker)
	adm := kadm.NewClient(cl)
	d := startProc(t, dir, chainConfig(dir, broker, metrics, true, false), broker, metrics)
	prod := producePaced(t, cl, total, batch, 80*time.Millisecond, chainRecords(keys, bad))
	in := map[string]string{"operator": "counts"}
	if !testkit.Poll(30*time.Second, func() bool {
		read, err := testkit.Scrape(d.url(), "kstreamd_operator_records_in_total", in)
		return d.exited() || (err == nil && read >= 3000)
	}) || d.exited() {
		t.Fatalf("the job did not count 3000 records within 30 s (exited %v)", d.exited())
	}
	d.checkpointAfter(t)
	spDir := filepath.Join(t.TempDir(), "stop-savepoints")
	code, stdout, stderr := runBinary(t, "savepoint", "--address", metrics, "--dir", spDir, "--stop")
	if code != 0 || stderr != "" {
		t.Fatalf("kstreamd savepoint --stop: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	sp := strings.TrimSuffix(stdout, "\n")
	select {
	case <-d.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("the job did not exit within 20 s of the stop-with-savepoint")
	}
	if c := d.cmd.ProcessState.ExitCode(); c != 0 {
		t.Fatalf("stop-with-savepoint: exit status %d, want 0", c)
	}
	t.Logf("stopped with savepoint %s after %d of %d records produced", sp, prod.produced.Load(), total)
	three := strings.Replace(chainConfig(dir, broker, metrics, true, false), "  parallelism: 2\n", "  parallelism: 3\n", 1)
	d = startProc(t, dir, three, broker, metrics)
	restoringFrom(t, d.out.String(), sp)
	prod.wait(t, 30*time.Second)
	waitGroupAt(t, adm, "kstreamd-chained", "events", topicEnds(t, adm, "events", total), 45*time.Second, d)
	want := chainWant(total, keys, bad)
	if d := diffByKey(readByKey(t, broker, "counts", count(want)), want); len(d) > 0 {
		t.Fatalf("read_committed counts differs from the model:\n%s", strings.Join(d, "\n"))
	}
	rw := rawWant(total, keys, bad)
	if d := diffByKey(readByKey(t, broker, "raw", count(rw)), rw); len(d) > 0 {
		t.Fatalf("read_committed raw differs from the model:\n%s", strings.Join(d, "\n"))
	}
	dlq := testkit.ReadTopic(t, []string{broker}, "events-dlq", 10*time.Second)
	if wantDLQ := fmt.Sprintf(`{"key":"k%03d","n":"x"}`, bad%keys); len(dlq) != 1 || string(dlq[0].Value) != wantDLQ {
		t.Fatalf("events-dlq holds %d records, want exactly %s once", len(dlq), wantDLQ)
	}
}
