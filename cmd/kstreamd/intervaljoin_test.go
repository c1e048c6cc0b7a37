package main

import (
	"cmp"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// TestExampleIntervalJoin runs configs/examples/interval_join.yaml (a left
// interval join of orders and payments, bounds [-5s, +10s]) over a fixed
// input on partition 0 of each topic (partition 1 goes idle): the
// read_committed output is exactly the two orders paid within their
// interval (one payment on the lower bound) and, once a later record moved
// the watermark past its interval, the order paid only outside it with paid
// null; a payment behind the watermark goes unchanged to late-payments.
func TestExampleIntervalJoin(t *testing.T) {
	t.Parallel()
	_, broker := startKfake(t, []string{"paid-orders", "late-payments"}, kfake.SeedTopics(2, "orders", "payments"))
	dir, metrics := t.TempDir(), testkit.FreeAddr(t)
	d := startDaemon(t, dir, exampleConfig(t, "interval_join.yaml", dir, broker, metrics), broker, metrics)
	cl := newClient(t, broker, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	order := func(id int, user string, sec float64) *kgo.Record {
		return &kgo.Record{Topic: "orders", Value: fmt.Appendf(nil, `{"id":%d,"user":%q,"ts":%d}`, id, user, t0+int64(sec*1000))}
	}
	payment := func(id, amount int, sec float64) *kgo.Record {
		return &kgo.Record{Topic: "payments", Value: fmt.Appendf(nil, `{"order_id":%d,"amount":%d,"ts":%d}`, id, amount, t0+int64(sec*1000))}
	}
	produce(t, cl, order(1, "alice", 1), order(2, "bob", 2), order(3, "carol", 3))
	produce(t, cl,
		payment(2, 9, -4),  // 2s - 5s = -3s: one second too early
		payment(3, 5, -2),  // 3s - 5s: on the lower bound
		payment(1, 30, 4),  // within [-4s, 11s]
		payment(9, 1, 5),   // no such order: a left join drops it
		payment(1, 70, 12), // 1s + 10s = 11s: one second too late
	)
	// Order 100 and a payment at 30s move the watermark to 27.999s: order
	// 2's interval (ends 12s) is over, order 100's is not.
	produce(t, cl, order(100, "dave", 30), payment(100, 0, 30))
	want := []string{`1 {"order":1,"paid":30,"user":"alice"}`, `2 {"order":2,"paid":null,"user":"bob"}`, `3 {"order":3,"paid":5,"user":"carol"}`,
		`100 {"order":100,"paid":0,"user":"dave"}`}
	testkit.WaitMetric(t, 60*time.Second, d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "paid-orders"}, float64(len(want)))
	late := payment(3, 6, 1)
	produce(t, cl, late)
	testkit.WaitMetric(t, 30*time.Second, d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "late-payments"}, 1)
	last, _ := testkit.Scrape(d.url(), "kstreamd_checkpoint_last_completed_id", nil)
	waitCheckpointAfter(t, d, last)
	var got []string
	for _, r := range testkit.ReadTopic(t, []string{broker}, "paid-orders", 10*time.Second) {
		got = append(got, string(r.Key)+" "+string(r.Value))
	}
	slices.Sort(got)
	slices.Sort(want)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read_committed paid-orders:\n%q\nwant exactly\n%q", got, want)
	}
	lateGot := testkit.ReadTopic(t, []string{broker}, "late-payments", 10*time.Second)
	if len(lateGot) != 1 || string(lateGot[0].Value) != string(late.Value) {
		t.Fatalf("read_committed late-payments: %d records, want exactly %s", len(lateGot), late.Value)
	}
	// Order 100 and its payment are still held (the watermark has not
	// passed 40s and 35s); everything else was removed.
	if rows, err := testkit.Scrape(d.url(), "kstreamd_join_buffered_rows", map[string]string{"operator": "paid"}); err != nil || rows != 2 {
		t.Fatalf("kstreamd_join_buffered_rows{operator=paid} = %v (%v), want 2", rows, err)
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
}

// joinBase is the event time of the interval join acceptance input.
const joinBase = t0

// joinRec is one input record of TestIntervalJoinKillRescale.
type joinRec struct {
	topic     string
	partition int32
	ts        int64
	id        int // order id (orders) or payment id (payments)
	orderID   int // payments: the order paid
}

func (r joinRec) record() *kgo.Record {
	v := fmt.Appendf(nil, `{"kind":"order","id":%d,"ts":%d}`, r.id, r.ts)
	if r.topic == "payments" {
		v = fmt.Appendf(nil, `{"kind":"payment","pid":%d,"order_id":%d,"ts":%d}`, r.id, r.orderID, r.ts)
	}
	return &kgo.Record{Topic: r.topic, Partition: r.partition, Value: v}
}

// joinInput returns the 1,000 orders and 1,000 payments of the acceptance
// test, each partition's records in time order: orders 0..999 at base +
// 100ms*i; payments 0..749 pay orders 0..749 within [-5s, +10s] (the first
// two on the bounds), 750..799 pay orders 0..49 a second time within it,
// 800..899 pay orders 800..899 outside it (by 1ms up to 5s), 900..999 pay
// orders that do not exist. So orders 750..999 match nothing and so do
// payments 800..999.
func joinInput() (orders, payments []joinRec) {
	for i := range 1000 {
		orders = append(orders, joinRec{topic: "orders", partition: int32(i % 4), ts: joinBase + int64(i)*100, id: i})
	}
	for j := range 1000 {
		var order int
		var off int64
		switch {
		case j == 0:
			order, off = 0, -5000
		case j == 1:
			order, off = 1, 10_000
		case j < 750:
			order, off = j, int64(j*37%15_001)-5000
		case j < 800:
			order, off = j-750, int64(j*53%15_001)-5000
		case j < 900 && j%2 == 0:
			order, off = j, -5001-int64(j%5)*1000
		case j < 900:
			order, off = j, 10_001+int64(j%5)*1000
		default:
			order, off = 5000+j, 0
		}
		ts := joinBase + int64(order%1000)*100 + off
		payments = append(payments, joinRec{topic: "payments", partition: int32(j % 4), ts: ts, id: j, orderID: order})
	}
	byTime := func(a, b joinRec) int {
		return cmp.Or(cmp.Compare(a.partition, b.partition), cmp.Compare(a.ts, b.ts), cmp.Compare(a.id, b.id))
	}
	slices.SortFunc(orders, byTime)
	slices.SortFunc(payments, byTime)
	return orders, payments
}

// joinExpected computes, from the definition, what the join of kind
// (inner, left or full) writes for the orders and payments that are not
// late, as "key value" lines sorted, and, for each unmatched row, the
// time its interval ends (when the watermark releases it).
func joinExpected(orders, payments []joinRec, kind string) (lines []string, release map[string]int64) {
	release = map[string]int64{}
	matchedO, matchedP := map[int]bool{}, map[int]bool{}
	for _, o := range orders {
		for _, p := range payments {
			if p.orderID == o.id && o.ts-5000 <= p.ts && p.ts <= o.ts+10_000 {
				lines = append(lines, fmt.Sprintf(`%d {"o":%d,"p":%d}`, o.id, o.id, p.id))
				matchedO[o.id], matchedP[p.id] = true, true
			}
		}
	}
	if kind != "inner" {
		for _, o := range orders {
			if !matchedO[o.id] {
				l := fmt.Sprintf(`%d {"o":%d,"p":null}`, o.id, o.id)
				lines = append(lines, l)
				release[l] = o.ts + 10_000
			}
		}
	}
	if kind == "full" {
		for _, p := range payments {
			if !matchedP[p.id] {
				l := fmt.Sprintf(`%d {"o":null,"p":%d}`, p.orderID, p.id)
				lines = append(lines, l)
				release[l] = p.ts + 5000
			}
		}
	}
	slices.Sort(lines)
	return lines, release
}

// intervalJoinConfig is three interval joins of orders and payments,
// bounds [-5s, +10s] (inner, left and full outer, each to its own topic,
// exactly-once; the inner join's late records to topic late), behind
// filters that drop the tick records, at parallelism p, on state backend
// backend; aligned puts both sources in one watermark alignment group.
func intervalJoinConfig(dir, broker, metrics, backend string, p int, aligned bool) string {
	align := ""
	if aligned {
		align = ", watermark_alignment: {group: ijoin, max_drift: 1s}"
	}
	cfg := jobHead("ijoin", p, dir, brokersKafka(broker), metrics, "info") + `state:
  backend: ` + backend + `
checkpoints:
  interval: 200ms
sources:
  - {name: orders, topic: orders, timestamp: {expression: ts}, watermark: {out_of_orderness: 2s}` + align + `}
  - {name: payments, topic: payments, timestamp: {expression: ts}, watermark: {out_of_orderness: 2s}` + align + `}
operators:
  - {name: o, type: filter, input: orders, params: {condition: "kind == 'order'"}}
  - {name: p, type: filter, input: payments, params: {condition: "kind == 'payment'"}}
`
	for _, kind := range []string{"inner", "left", "full"} {
		cfg += fmt.Sprintf(`  - name: %s
    type: interval_join
    inputs:
      left: {from: o, key_by: id}
      right: {from: p, key_by: order_id}
    params:
      lower: -5s
      upper: 10s
      join: %s
      select: '{"o": left == null ? null : left.id, "p": right == null ? null : right.pid}'
`, kind, kind)
	}
	cfg += "sinks:\n"
	for _, kind := range []string{"inner", "left", "full"} {
		cfg += fmt.Sprintf("  - {name: %s-out, input: %s, topic: %s, delivery: exactly-once, transaction_timeout: 1m}\n", kind, kind, kind)
	}
	return cfg + "  - {name: late-out, input: inner.late, topic: late, delivery: exactly-once, transaction_timeout: 1m}\n"
}

// TestIntervalJoinKillRescale is issue 23's acceptance test of the interval
// join, bounds [-5s, +10s]: 1,000 orders and 1,000 payments (joinInput:
// matched, paid twice, paid outside the bounds, never paid, paying no
// order) and 40 late records, on both state backends. The job runs at
// parallelism 2 and is killed with SIGKILL once a checkpoint holds the
// first half of the input, then restored at parallelism 3 for the rest. Read_committed, the inner, left
// and full outer outputs are exactly what joinExpected computes from the
// definition (none twice); before the watermark passes the last intervals
// exactly the unmatched rows whose interval it passed are out; the late
// records are exactly the late output; and once the watermark passed every
// interval the joins hold no row (kstreamd_join_buffered_rows 0). The
// pebble-aligned case runs the same with both sources in one watermark
// alignment group (max_drift 1s): pausing partitions changes none of it.
func TestIntervalJoinKillRescale(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, backend string
		aligned       bool
	}{{"hashmap", "hashmap", false}, {"pebble", "pebble", false}, {"pebble-aligned", "pebble", true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			intervalJoinKillRescale(t, c.backend, c.aligned)
		})
	}
}

func intervalJoinKillRescale(t *testing.T, backend string, aligned bool) {
	_, broker := startKfake(t, []string{"orders", "payments", "inner", "left", "full", "late"})
	dir, metrics := t.TempDir(), testkit.FreeAddr(t)
	cl := newClient(t, broker, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	orders, payments := joinInput()
	half := func(first bool) []*kgo.Record {
		var out []*kgo.Record
		for _, r := range append(slices.Clone(orders), payments...) {
			if (r.ts < joinBase+50_000) == first {
				out = append(out, r.record())
			}
		}
		return out
	}
	// The watermark once every record was read: per partition its newest
	// time - 2s - 1ms, the minimum over the partitions of both topics.
	newest := map[string]int64{}
	for _, r := range append(slices.Clone(orders), payments...) {
		k := fmt.Sprint(r.topic, r.partition)
		newest[k] = max(newest[k], r.ts)
	}
	wantWM := int64(math.MaxInt64)
	for _, ts := range newest {
		wantWM = min(wantWM, ts-2001)
	}
	watermark := func(d *proc) int64 {
		v, err := testkit.Scrape(d.url(), "kstreamd_operator_watermark_seconds", map[string]string{"operator": "inner", "subtask": "0"})
		if err != nil {
			return 0
		}
		return int64(math.Round(v * 1000))
	}
	read := func(topic string) []string {
		var out []string
		for _, r := range testkit.ReadTopic(t, []string{broker}, topic, 10*time.Second) {
			out = append(out, string(r.Key)+" "+string(r.Value))
		}
		slices.Sort(out)
		return out
	}
	// readAtLeast reads topic until it holds n records (a completed
	// checkpoint's transactions are committed by the sinks just after the
	// checkpoint counts as completed) or 30s passed.
	readAtLeast := func(topic string, n int) []string {
		var out []string
		testkit.Poll(30*time.Second, func() bool { out = read(topic); return len(out) >= n })
		return out
	}

	d := startProc(t, dir, intervalJoinConfig(dir, broker, metrics, backend, 2, aligned), broker, metrics)
	first := half(true)
	produce(t, cl, first...)
	if !testkit.Poll(60*time.Second, func() bool {
		n, err := testkit.Scrape(d.url(), "kstreamd_operator_records_in_total", map[string]string{"operator": "inner"})
		return d.exited() || (err == nil && n >= float64(len(first)))
	}) || d.exited() {
		t.Fatalf("the first half was not read:\n%s", d.out.String())
	}
	d.checkpointAfter(t)
	if aligned {
		for _, src := range []string{"orders", "payments"} {
			n, err := testkit.Scrape(d.url(), "kstreamd_source_alignment_pauses_total", map[string]string{"source": src})
			t.Logf("%s: %v partitions paused by alignment (%v)", src, n, err)
		}
	}
	d.kill(t)

	d = startProc(t, dir, intervalJoinConfig(dir, broker, metrics, backend, 3, aligned), broker, metrics)
	if lines := restoreLines(d.out.String()); len(lines) != 1 {
		t.Fatalf("restart: \"restoring\" lines %q, want one", lines)
	}
	produce(t, cl, half(false)...)
	if !testkit.Poll(60*time.Second, func() bool { return d.exited() || watermark(d) == wantWM }) || d.exited() {
		t.Fatalf("the watermark is %d, want %d once every record was read:\n%s", watermark(d), wantWM, d.out.String())
	}
	// 40 late records: 20 orders and 20 payments that would match orders
	// 0..19, all far behind the watermark.
	var late []string
	var lateRecs []*kgo.Record
	for k := range 20 {
		o := joinRec{topic: "orders", partition: int32(k % 4), ts: joinBase + 5000, id: 3000 + k}
		p := joinRec{topic: "payments", partition: int32(k % 4), ts: joinBase + int64(k)*100 + 1000, id: 3000 + k, orderID: k}
		lateRecs = append(lateRecs, o.record(), p.record())
		// A late record goes out unchanged but for its key, the join key
		// its input's key_by selected.
		late = append(late, fmt.Sprintf("%d %s", o.id, o.record().Value), fmt.Sprintf("%d %s", p.orderID, p.record().Value))
	}
	slices.Sort(late)
	produce(t, cl, lateRecs...)
	testkit.WaitMetric(t, 60*time.Second, d.url(), "kstreamd_operator_late_records_routed_total", map[string]string{"operator": "inner"}, 40)
	d.checkpointAfter(t)
	// Before the ticks: the unmatched rows out are exactly those whose
	// interval the watermark passed.
	for _, kind := range []string{"left", "full"} {
		all, release := joinExpected(orders, payments, kind)
		var want []string
		for _, l := range all {
			if end, unmatched := release[l]; !unmatched || end <= wantWM {
				want = append(want, l)
			}
		}
		if len(want) == len(all) || len(want) <= 800 {
			t.Fatalf("%s join: %d of %d rows due at watermark %d; the test wants some unmatched rows out and some held back", kind, len(want), len(all), wantWM)
		}
		if got := readAtLeast(kind, len(want)); !slices.Equal(got, want) {
			un := testkit.ReadTopicWith(t, []kgo.Opt{kgo.SeedBrokers(broker)}, kgo.ReadUncommitted(), kind, 10*time.Second)
			t.Fatalf("%s join at watermark %d: %d rows, want %d (unmatched held back: %d); read_uncommitted %d; %s", kind, wantWM, len(got), len(want), len(all)-len(want), len(un), diffLines(got, want))
		}
	}
	// Ticks at 200s on every partition move the watermark past every
	// interval; the filters drop them before the joins.
	var ticks []*kgo.Record
	for _, topic := range []string{"orders", "payments"} {
		for p := range int32(4) {
			ticks = append(ticks, &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, `{"kind":"tick","ts":%d}`, joinBase+200_000)})
		}
	}
	produce(t, cl, ticks...)
	if !testkit.Poll(60*time.Second, func() bool { return watermark(d) == joinBase+200_000-2001 }) {
		t.Fatalf("the watermark is %d after the ticks, want %d", watermark(d), joinBase+200_000-2001)
	}
	for _, op := range []string{"inner", "left", "full"} {
		if !testkit.Poll(30*time.Second, func() bool {
			v, err := testkit.Scrape(d.url(), "kstreamd_join_buffered_rows", map[string]string{"operator": op})
			return err == nil && v == 0
		}) {
			v, _ := testkit.Scrape(d.url(), "kstreamd_join_buffered_rows", map[string]string{"operator": op})
			t.Fatalf("%s holds %v rows after the watermark passed every interval, want 0", op, v)
		}
	}
	d.checkpointAfter(t)
	for _, kind := range []string{"inner", "left", "full"} {
		want, _ := joinExpected(orders, payments, kind)
		if got := readAtLeast(kind, len(want)); !slices.Equal(got, want) {
			t.Errorf("read_committed %s join: %d rows, want %d; first differences:\n%s", kind, len(got), len(want), diffLines(got, want))
		}
	}
	if got := readAtLeast("late", len(late)); !slices.Equal(got, late) {
		t.Errorf("read_committed late: %d records, want the %d late ones:\n%s", len(got), len(late), diffLines(got, late))
	}
	if code, _ := d.terminate(t, 20*time.Second); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
}

// diffLines describes up to 10 lines only one of got and want holds.
func diffLines(got, want []string) string {
	var b strings.Builder
	n := 0
	for _, g := range got {
		if _, ok := slices.BinarySearch(want, g); !ok && n < 5 {
			fmt.Fprintf(&b, "unexpected: %s\n", g)
			n++
		}
	}
	for _, w := range want {
		if _, ok := slices.BinarySearch(got, w); !ok && n < 10 {
			fmt.Fprintf(&b, "missing:    %s\n", w)
			n++
		}
	}
	return b.String()
}

// TestExampleWindowJoin runs configs/examples/window_join.yaml (Nexmark
// q8: persons and their auctions in one 10s tumbling window) over a fixed
// input on partition 0 of each topic: read_committed, exactly the person
// and auction pairs of one seller in one window (alice's two auctions of
// her window, not the one of the next window; bob's auction in another
// window than his account joins nothing), written once the watermark of
// both topics passed the window's end; a person whose window had ended
// goes unchanged to late-records.
func TestExampleWindowJoin(t *testing.T) {
	t.Parallel()
	_, broker := startKfake(t, []string{"new-sellers", "late-records"}, kfake.SeedTopics(2, "persons", "auctions"))
	dir, metrics := t.TempDir(), testkit.FreeAddr(t)
	d := startDaemon(t, dir, exampleConfig(t, "window_join.yaml", dir, broker, metrics), broker, metrics)
	cl := newClient(t, broker, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	person := func(id int, name string, sec float64) *kgo.Record {
		return &kgo.Record{Topic: "persons", Value: fmt.Appendf(nil, `{"id":%d,"name":%q,"ts":%d}`, id, name, t0+int64(sec*1000))}
	}
	auction := func(id, seller int, sec float64) *kgo.Record {
		return &kgo.Record{Topic: "auctions", Value: fmt.Appendf(nil, `{"id":%d,"seller":%d,"ts":%d}`, id, seller, t0+int64(sec*1000))}
	}
	produce(t, cl, person(1, "alice", 1), person(2, "bob", 8), person(3, "carol", 12), person(9, "tick", 25))
	produce(t, cl, auction(10, 1, 2), auction(11, 1, 9.999), auction(12, 1, 10), auction(20, 2, 11), auction(30, 3, 19), auction(99, 9, 25))
	start := func(sec int64) string { return time.UnixMilli(t0 + sec*1000).UTC().Format(time.RFC3339) }
	want := []string{
		fmt.Sprintf(`1 {"auction":10,"name":"alice","person":1,"window_start":%q}`, start(0)),
		fmt.Sprintf(`1 {"auction":11,"name":"alice","person":1,"window_start":%q}`, start(0)),
		fmt.Sprintf(`3 {"auction":30,"name":"carol","person":3,"window_start":%q}`, start(10)),
	}
	testkit.WaitMetric(t, 60*time.Second, d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "new-sellers"}, float64(len(want)))
	late := person(4, "dave", 3)
	produce(t, cl, late)
	testkit.WaitMetric(t, 30*time.Second, d.url(), "kstreamd_operator_records_out_total", map[string]string{"operator": "late-records"}, 1)
	last, _ := testkit.Scrape(d.url(), "kstreamd_checkpoint_last_completed_id", nil)
	waitCheckpointAfter(t, d, last)
	var got []string
	for _, r := range testkit.ReadTopic(t, []string{broker}, "new-sellers", 10*time.Second) {
		got = append(got, string(r.Key)+" "+string(r.Value))
	}
	slices.Sort(got)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read_committed new-sellers:\n%q\nwant exactly\n%q", got, want)
	}
	lateGot := testkit.ReadTopic(t, []string{broker}, "late-records", 10*time.Second)
	if len(lateGot) != 1 || string(lateGot[0].Value) != string(late.Value) {
		t.Fatalf("read_committed late-records: %d records, want exactly %s", len(lateGot), late.Value)
	}
	// The window [20s, 30s) of the tick person and auction is open; every
	// other window's rows were removed.
	if rows, err := testkit.Scrape(d.url(), "kstreamd_join_buffered_rows", map[string]string{"operator": "sellers"}); err != nil || rows != 2 {
		t.Fatalf("kstreamd_join_buffered_rows{operator=sellers} = %v (%v), want 2", rows, err)
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
}
