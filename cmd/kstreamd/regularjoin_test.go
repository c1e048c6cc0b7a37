package main

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/runtime"
)

// customerRec is a record of the customers table: an upsert of id to
// name, or a tombstone when name is "".
func customerRec(id, name string) *kgo.Record {
	r := &kgo.Record{Topic: "customers", Key: []byte(id)}
	if name != "" {
		r.Value = []byte(`{"name":"` + name + `"}`)
	}
	return r
}

// accountRec is a record of the accounts table: an upsert of id to
// balance, or a tombstone when balance is negative.
func accountRec(id string, balance int) *kgo.Record {
	r := &kgo.Record{Topic: "accounts", Key: []byte(id)}
	if balance >= 0 {
		r.Value = fmt.Appendf(nil, `{"balance":%d}`, balance)
	}
	return r
}

// TestExampleRegularJoin runs configs/examples/regular_join.yaml (a left
// join of the customers and accounts tables with state_ttl, both sides
// upsert) on fixed inputs produced in five phases, each waiting until the
// join read it so the per-key order of the two tables' records is fixed:
// customers c1..c3; accounts of c1, c2 and c9 (no customer yet); c1
// renamed and customer c9 added; c2's account deleted and c1's balance
// changed; customer c3 deleted. The header sink's read_committed
// changelog is exactly the expected one per key (kind and row), and the
// upsert sink's compacted view (per key the last value, a tombstone
// deleting) is exactly the final joined table: c1 Anna 80, c2 Bob null,
// c9 Zed 7, c3 gone.
func TestExampleRegularJoin(t *testing.T) {
	t.Parallel()
	_, broker := startKfake(t, []string{"customers", "accounts", "customer-balances", "customer-balance-changes"})
	cl := newClient(t, broker)
	dir, metrics := t.TempDir(), testkit.FreeAddr(t)
	d := startDaemon(t, dir, exampleConfig(t, "regular_join.yaml", dir, broker, metrics), broker, metrics)
	join := map[string]string{"operator": "balances"}
	read := 0
	for _, phase := range [][]*kgo.Record{
		{customerRec("c1", "Ann"), customerRec("c2", "Bob"), customerRec("c3", "Cid")},
		{accountRec("c1", 120), accountRec("c2", 50), accountRec("c9", 7)},
		{customerRec("c1", "Anna"), customerRec("c9", "Zed")},
		{accountRec("c2", -1), accountRec("c1", 80)},
		{customerRec("c3", "")},
	} {
		produce(t, cl, phase...)
		read += len(phase)
		testkit.WaitMetric(t, 30*time.Second, d.url(), "kstreamd_operator_records_in_total", join, float64(read))
	}
	row := func(id, name, balance string) string {
		return fmt.Sprintf(`{"balance":%s,"customer":%q,"name":%q}`, balance, id, name)
	}
	wantChanges := map[string][]string{
		"c1": {
			"+I " + row("c1", "Ann", "null"),
			"-D " + row("c1", "Ann", "null"), "+I " + row("c1", "Ann", "120"),
			"-D " + row("c1", "Ann", "120"), "+I " + row("c1", "Anna", "120"),
			"-D " + row("c1", "Anna", "120"), "+I " + row("c1", "Anna", "null"), "-D " + row("c1", "Anna", "null"), "+I " + row("c1", "Anna", "80"),
		},
		"c2": {
			"+I " + row("c2", "Bob", "null"),
			"-D " + row("c2", "Bob", "null"), "+I " + row("c2", "Bob", "50"),
			"-D " + row("c2", "Bob", "50"), "+I " + row("c2", "Bob", "null"),
		},
		"c3": {"+I " + row("c3", "Cid", "null"), "-D " + row("c3", "Cid", "null")},
		"c9": {"+I " + row("c9", "Zed", "7")},
	}
	n := 0
	for _, c := range wantChanges {
		n += len(c)
	}
	testkit.WaitMetric(t, 30*time.Second, d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "customer-balance-changes"}, float64(n))
	last, _ := testkit.Scrape(d.url(), "kstreamd_checkpoint_last_completed_id", nil)
	waitCheckpointAfter(t, d, last)
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
	changes := map[string][]string{}
	for _, r := range testkit.ReadTopic(t, []string{broker}, "customer-balance-changes", 10*time.Second) {
		kind := ""
		for _, h := range r.Headers {
			if h.Key == runtime.ChangeHeader {
				kind = string(h.Value)
			}
		}
		changes[string(r.Key)] = append(changes[string(r.Key)], kind+" "+string(r.Value))
	}
	if !reflect.DeepEqual(changes, wantChanges) {
		t.Fatalf("read_committed changelog:\n%v\nwant exactly\n%v", changes, wantChanges)
	}
	view := map[string]string{}
	for _, r := range testkit.ReadTopic(t, []string{broker}, "customer-balances", 10*time.Second) {
		view[string(r.Key)] = string(r.Value)
		if r.Value == nil {
			delete(view, string(r.Key))
		}
	}
	wantView := map[string]string{"c1": row("c1", "Anna", "80"), "c2": row("c2", "Bob", "null"), "c9": row("c9", "Zed", "7")}
	if !maps.Equal(view, wantView) {
		t.Fatalf("compacted view of customer-balances:\n%v\nwant exactly\n%v", view, wantView)
	}
}

// joinChanges is a full changelog of one side of a regular join, as
// records of topic with their kind in the kstreamd-change header: n
// changes over keys k0..k7 (inserts of new rows, deletes of a live row
// carrying it, updates as -U of a live row then +U of a new one), rows
// {"v":"<prefix><i>"}, from a fixed seed. It returns the records and the
// rows live at the end, per key.
func joinChanges(topic, prefix string, n int, seed uint64) ([]*kgo.Record, map[string][]string) {
	rng := rand.New(rand.NewPCG(seed, 1))
	live := map[string][]string{}
	var recs []*kgo.Record
	rec := func(kind runtime.ChangeKind, key, v string) {
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(key), Value: fmt.Appendf(nil, `{"v":%q}`, v),
			Headers: []kgo.RecordHeader{{Key: runtime.ChangeHeader, Value: []byte(kind.String())}}})
	}
	for i := range n {
		key := fmt.Sprintf("k%d", rng.IntN(8))
		rows := live[key]
		switch x := rng.Float64(); {
		case len(rows) == 0 || x < 0.5:
			live[key] = append(rows, fmt.Sprint(prefix, i))
			rec(runtime.ChangeInsert, key, fmt.Sprint(prefix, i))
		case x < 0.75:
			j := rng.IntN(len(rows))
			rec(runtime.ChangeDelete, key, rows[j])
			live[key] = slices.Delete(rows, j, j+1)
		default:
			j := rng.IntN(len(rows))
			rec(runtime.ChangeUpdateBefore, key, rows[j])
			rec(runtime.ChangeUpdateAfter, key, fmt.Sprint(prefix, i))
			rows[j] = fmt.Sprint(prefix, i)
		}
	}
	return recs, live
}

// regularJoinConfig is a full outer regular join "j" of the header-mode
// changelog topics lefts and rights (keyed by their Kafka keys) at
// parallelism p on Pebble, checkpoints every 200 ms, its changelog
// written in header mode to topic joined, exactly-once.
func regularJoinConfig(dir, broker, metrics string, p int) string {
	return jobHead("regular-join-kill", p, dir, brokersKafka(broker), metrics, "info") + `state:
  backend: pebble
checkpoints:
  interval: 200ms
sources:
  - {name: lefts, topic: lefts, changelog: header}
  - {name: rights, topic: rights, changelog: header}
operators:
  - name: j
    type: join
    inputs:
      left: {from: lefts, key_by: key}
      right: {from: rights, key_by: key}
    params:
      join: full
      select: '{"l": left == null ? null : left.v, "r": right == null ? null : right.v}'
sinks:
  - {name: joined, input: j, topic: joined, delivery: exactly-once, transaction_timeout: 1m, changelog: header}
`
}

// TestRegularJoinKillRescale: a full outer regular join of two changelog
// streams (300 changes a side: inserts, updates as -U/+U, deletes, over 8
// keys) runs at parallelism 2 and is killed with SIGKILL once a
// checkpoint holds the first half of both inputs, then restored at
// parallelism 3 for the rest. The read_committed changelog (+I/-D),
// applied in order (a -D of a row not in the view fails), equals the
// model join of both sides' final rows exactly (each pair of a key's
// left and right rows; a side's rows null-padded when the key has none
// on the other), and still does after two more checkpoints.
func TestRegularJoinKillRescale(t *testing.T) {
	t.Parallel()
	_, broker := startKfake(t, []string{"lefts", "rights", "joined"})
	dir, metrics := t.TempDir(), testkit.FreeAddr(t)
	cl := newClient(t, broker)
	lefts, liveL := joinChanges("lefts", "L", 300, 1)
	rights, liveR := joinChanges("rights", "R", 300, 2)
	want := map[string]int{}
	q := func(v string) string {
		if v == "" {
			return "null"
		}
		return strconv.Quote(v)
	}
	for k := range 8 {
		key := fmt.Sprintf("k%d", k)
		ls, rs := liveL[key], liveR[key]
		for _, l := range ls {
			for _, r := range rs {
				want[fmt.Sprintf(`%s {"l":%s,"r":%s}`, key, q(l), q(r))]++
			}
			if len(rs) == 0 {
				want[fmt.Sprintf(`%s {"l":%s,"r":null}`, key, q(l))]++
			}
		}
		if len(ls) == 0 {
			for _, r := range rs {
				want[fmt.Sprintf(`%s {"l":null,"r":%s}`, key, q(r))]++
			}
		}
	}
	// view applies the read_committed changelog of joined.
	view := func() map[string]int {
		v := map[string]int{}
		for _, r := range testkit.ReadTopic(t, []string{broker}, "joined", 10*time.Second) {
			kind := ""
			for _, h := range r.Headers {
				if h.Key == runtime.ChangeHeader {
					kind = string(h.Value)
				}
			}
			row := string(r.Key) + " " + string(r.Value)
			switch kind {
			case "+I":
				v[row]++
			case "-D":
				if v[row] == 0 {
					t.Fatalf("-D of %s, which is not in the view", row)
				}
				if v[row]--; v[row] == 0 {
					delete(v, row)
				}
			default:
				t.Fatalf("record %s with kind %q, want +I or -D", row, kind)
			}
		}
		return v
	}

	d := startProc(t, dir, regularJoinConfig(dir, broker, metrics, 2), broker, metrics)
	first := append(slices.Clone(lefts[:len(lefts)/2]), rights[:len(rights)/2]...)
	produce(t, cl, first...)
	if !testkit.Poll(30*time.Second, func() bool {
		n, err := testkit.Scrape(d.url(), "kstreamd_operator_records_in_total", map[string]string{"operator": "j"})
		return d.exited() || (err == nil && n >= float64(len(first)))
	}) || d.exited() {
		t.Fatalf("the first half was not read:\n%s", d.out.String())
	}
	d.checkpointAfter(t)
	d.kill(t)

	d = startProc(t, dir, regularJoinConfig(dir, broker, metrics, 3), broker, metrics)
	if lines := restoreLines(d.out.String()); len(lines) != 1 {
		t.Fatalf("restart: \"restoring\" lines %q, want one", lines)
	}
	produce(t, cl, append(slices.Clone(lefts[len(lefts)/2:]), rights[len(rights)/2:]...)...)
	var got map[string]int
	if !testkit.Poll(30*time.Second, func() bool { got = view(); return d.exited() || maps.Equal(got, want) }) || d.exited() {
		t.Fatalf("applied read_committed changelog (%d rows):\n%v\nwant the model join (%d rows):\n%v", len(got), got, len(want), want)
	}
	d.checkpointAfter(t)
	if got = view(); !maps.Equal(got, want) {
		t.Fatalf("after two more checkpoints: applied changelog %v, want %v", got, want)
	}
	if len(want) < 10 {
		t.Fatalf("the model join has %d rows; the input should give more", len(want))
	}
}
