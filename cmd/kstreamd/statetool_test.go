package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/sdk"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// stateToolConfig is a job of topic events at parallelism 2 on backend,
// incremental checkpoints every 100 ms; body is its operators and sinks,
// by default a keyed_count "counts" by key written at-least-once to topic
// counts by sink "counted".
func stateToolConfig(name, dir, broker, metrics, backend, body string) string {
	if body == "" {
		body = `operators:
  - name: counts
    type: keyed_count
    input: events
    key_by: key
sinks:
  - name: counted
    input: counts
    topic: counts
`
	}
	return jobHead(name, 2, dir, brokersKafka(broker), metrics, "info") + fmt.Sprintf(`state:
  backend: %s
checkpoints:
  interval: 100ms
  incremental: true
sources:
  - name: events
    topic: events
`, backend) + body
}

// keyedEvents returns one events record per key in keys, in order, keyed
// by it.
func keyedEvents(keys ...string) []*kgo.Record {
	var out []*kgo.Record
	for i, k := range keys {
		out = append(out, &kgo.Record{Topic: "events", Key: []byte(k), Value: fmt.Appendf(nil, `{"key":%q,"n":%d}`, k, i)})
	}
	return out
}

// scrapedProcess is a running daemon whose metrics a test scrapes.
type scrapedProcess interface {
	url() string
	exited() bool
}

// countedIn waits until operator op read n records in all (its
// kstreamd_operator_records_in_total), failing the test after 30 s or when
// the daemon exited.
func countedIn(t *testing.T, p scrapedProcess, op string, n int) {
	t.Helper()
	if !testkit.Poll(30*time.Second, func() bool {
		read, err := testkit.Scrape(p.url(), "kstreamd_operator_records_in_total", map[string]string{"operator": op})
		return p.exited() || err == nil && read >= float64(n)
	}) || p.exited() {
		t.Fatalf("%s did not read %d records within 30s (exited: %v)", op, n, p.exited())
	}
}

// countedAndCheckpointed waits until operator op read n records in all and
// two checkpoints completed after that (the second was triggered after the
// last record was counted), and returns the id of the last completed one.
func countedAndCheckpointed(t *testing.T, p scrapedProcess, op string, n int) int64 {
	t.Helper()
	countedIn(t, p, op, n)
	first, _ := testkit.Scrape(p.url(), "kstreamd_checkpoint_last_completed_id", nil)
	var id float64
	if !testkit.Poll(15*time.Second, func() bool {
		id, _ = testkit.Scrape(p.url(), "kstreamd_checkpoint_last_completed_id", nil)
		return id >= first+2
	}) {
		t.Fatalf("no two checkpoints after checkpoint %v within 15s", first)
	}
	return int64(id)
}

// stateCLI runs `kstreamd state args...` in-process and returns its exit
// status, stdout and stderr.
func stateCLI(args ...string) (int, string, string) {
	var stdout, stderr strings.Builder
	code := run(context.Background(), append([]string{"state"}, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// fieldLines returns the lines of out with their fields joined by one
// space (tabwriter's padding gone).
func fieldLines(out string) []string {
	var ls []string
	for l := range strings.Lines(out) {
		ls = append(ls, strings.Join(strings.Fields(l), " "))
	}
	return ls
}

// TestStateToolReadsCheckpoints is issue 26 item 4's acceptance: a keyed
// count reads a fixed input in two phases (a checkpoint between them, so
// the Pebble checkpoint is incremental: its SSTs are shared files), stops,
// and `kstreamd state dump` of its latest checkpoint lists exactly one
// line per key with its count as the int64 value, its key group and the
// subtask owning it, in subtask and key order, for the Pebble and the
// hashmap backend; `state ls` lists the operators with the keyed state
// (kind, serializer, entries, bytes) and the source's split state;
// `state count` the entries and bytes per key group and in all; the
// filters --key, --key-group and --operator (by uid too) select; GET
// /api/v1/checkpoints/{id} of the running job gives the same summary; the
// same checkpoint rewritten as metadata version 1 dumps the same.
func TestStateToolReadsCheckpoints(t *testing.T) {
	phase1 := []string{"apple", "kiwi", "apple", "fig", "apple", "fig"}
	phase2 := []string{"plum", "apple", "kiwi", "plum", "apple", "plum", "plum"}
	want := map[string]int64{}
	for _, k := range append(slices.Clone(phase1), phase2...) {
		want[k]++
	}
	for _, backend := range []string{"pebble", "hashmap"} {
		t.Run(backend, func(t *testing.T) {
			_, broker := startKfake(t, []string{"events", "counts"})
			dir, metrics := t.TempDir(), testkit.FreeAddr(t)
			p := runInProcess(t, sdk.NewRegistry(), dir, stateToolConfig("statetool", dir, broker, metrics, backend, ""), metrics)
			cl := newClient(t, broker)
			produce(t, cl, keyedEvents(phase1...)...)
			countedAndCheckpointed(t, p, "counts", len(phase1))
			produce(t, cl, keyedEvents(phase2...)...)
			id := countedAndCheckpointed(t, p, "counts", len(phase1)+len(phase2))

			var sum struct {
				CheckpointID int64 `json:"checkpoint_id"`
				Operators    map[string]struct {
					Parallelism int
					Backend     string
					KeyedStates []struct {
						Name, Kind, Serializer string
						Entries                int64
					} `json:"keyed_states"`
				}
			}
			d := &daemon{metrics: metrics}
			if code := apiGet(t, d, fmt.Sprintf("/api/v1/checkpoints/%d", id), "", &sum); code != http.StatusOK {
				t.Fatalf("GET /api/v1/checkpoints/%d = %d", id, code)
			}
			c := sum.Operators["counts"]
			if sum.CheckpointID != id || c.Parallelism != 2 || c.Backend != backend || len(c.KeyedStates) != 1 ||
				c.KeyedStates[0].Name != "count" || c.KeyedStates[0].Kind != "value" || c.KeyedStates[0].Serializer != "int64" ||
				c.KeyedStates[0].Entries != int64(len(want)) {
				t.Errorf("GET /api/v1/checkpoints/%d = %+v, want counts with keyed state count (value, int64, %d entries)", id, sum, len(want))
			}
			p.stop()
			if code := p.wait(t, 30*time.Second); code != 0 {
				t.Fatalf("soft stop exited %d", code)
			}
			chk, meta, err := checkpoint.NewStorage(filepath.Join(dir, "checkpoints"), "statetool", 0, nil).Latest()
			if err != nil {
				t.Fatal(err)
			}
			if backend == "pebble" && len(meta.SharedFiles) == 0 {
				t.Fatalf("latest checkpoint %s refers to no shared files: not incremental", chk)
			}

			// The expected entries, in dump order: subtask, key group,
			// then the Pebble key order (length-prefixed key).
			type entry struct {
				key         string
				kg, sub     int
				storedBytes int
				count       int64
			}
			var exp []entry
			for k, n := range want {
				kg := keygroup.Assign([]byte(k), 128)
				sub := 0
				if !keygroup.RangeFor(128, 2, 0).Contains(kg) {
					sub = 1
				}
				exp = append(exp, entry{key: k, kg: kg, sub: sub, storedBytes: 2 + 4 + 1 + len(k) + 8, count: n})
			}
			slices.SortFunc(exp, func(a, b entry) int {
				if a.sub != b.sub {
					return a.sub - b.sub
				}
				if a.kg != b.kg {
					return a.kg - b.kg
				}
				if len(a.key) != len(b.key) {
					return len(a.key) - len(b.key)
				}
				return strings.Compare(a.key, b.key)
			})
			dumpLine := func(e entry) string {
				return fmt.Sprintf(`{"operator":"counts","subtask":%d,"state":"count","kind":"value","key_group":%d,"key":%q,"value":%d}`+"\n", e.sub, e.kg, e.key, e.count)
			}
			var wantDump strings.Builder
			for _, e := range exp {
				wantDump.WriteString(dumpLine(e))
			}
			checkDump := func(what string) {
				t.Helper()
				code, out, errOut := stateCLI("dump", chk)
				if code != 0 || out != wantDump.String() {
					t.Errorf("%s: state dump exit %d:\n%s%s\nwant:\n%s", what, code, out, errOut, wantDump.String())
				}
			}
			checkDump("metadata version 3")

			// Filters: one key; one key group (flags after DIR); the
			// operator by name; an unknown operator.
			code, out, _ := stateCLI("dump", "--key", "plum", chk)
			if plum := exp[slices.IndexFunc(exp, func(e entry) bool { return e.key == "plum" })]; code != 0 || out != dumpLine(plum) {
				t.Errorf("dump --key plum: exit %d %q, want %q", code, out, dumpLine(plum))
			}
			code, out, _ = stateCLI("dump", chk, "--key-group", fmt.Sprint(exp[0].kg), "--operator", "counts")
			var wantKG strings.Builder
			for _, e := range exp {
				if e.kg == exp[0].kg {
					wantKG.WriteString(dumpLine(e))
				}
			}
			if code != 0 || out != wantKG.String() {
				t.Errorf("dump --key-group %d: exit %d %q, want %q", exp[0].kg, code, out, wantKG.String())
			}
			if code, _, errOut := stateCLI("dump", "--operator", "nope", chk); code != 1 || !strings.Contains(errOut, `holds no operator "nope"`) {
				t.Errorf("dump --operator nope: exit %d %q, want 1 naming the operator", code, errOut)
			}

			// ls: the keyed state exactly; the source's splits (4
			// partitions); the sink.
			code, out, errOut := stateCLI("ls", chk)
			if code != 0 {
				t.Fatalf("state ls exit %d: %s", code, errOut)
			}
			lines := fieldLines(out)
			total := 0
			for _, e := range exp {
				total += e.storedBytes
			}
			kind := "checkpoint"
			wantLines := []string{
				fmt.Sprintf("%s %d of job statetool (metadata version 3, max parallelism 128, %d bytes, %d shared files)", kind, meta.CheckpointID, meta.Bytes, len(meta.SharedFiles)),
				"OPERATOR UID PARALLELISM STATE KIND SERIALIZER TTL ENTRIES BYTES",
				"counted counted 2 - (stateless) - - 0 0",
				fmt.Sprintf("counts counts 2 count keyed value (%s) int64 false %d %d", backend, len(exp), total),
			}
			if len(lines) != 5 || !slices.Equal(lines[:4], wantLines) || !strings.HasPrefix(lines[4], "events events 2 kafka-source-splits operator list (split) - - 4 ") {
				t.Errorf("state ls:\n%s\nwant:\n%s\nand the events row with its 4 splits", out, strings.Join(wantLines, "\n"))
			}

			// count: per key group, then the total.
			code, out, errOut = stateCLI("count", chk)
			byKG := map[int][2]int{}
			for _, e := range exp {
				c := byKG[e.kg]
				byKG[e.kg] = [2]int{c[0] + 1, c[1] + e.storedBytes}
			}
			wantCount := []string{"OPERATOR KEY_GROUP ENTRIES BYTES"}
			for _, kg := range slices.Sorted(func(yield func(int) bool) {
				for k := range byKG {
					if !yield(k) {
						return
					}
				}
			}) {
				wantCount = append(wantCount, fmt.Sprintf("counts %d %d %d", kg, byKG[kg][0], byKG[kg][1]))
			}
			wantCount = append(wantCount, fmt.Sprintf("counts total %d %d", len(exp), total))
			if code != 0 || !slices.Equal(fieldLines(out), wantCount) {
				t.Errorf("state count exit %d:\n%s%s\nwant:\n%s", code, out, errOut, strings.Join(wantCount, "\n"))
			}

			downgradeMetadata(t, chk)
			checkDump("metadata version 1")
		})
	}
}
