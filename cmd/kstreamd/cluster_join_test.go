package main

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// clusterJoinPipeline is two two-input operators in cluster mode: a left
// interval join of orders and payments (bounds [-5s, +10s], event time
// from the ts field) and a regular left join of the customers and accounts
// tables (both upsert sides), each starting a stage of its own that reads
// one repartition topic per role (clicks-1-left/right-repartition,
// clicks-2-left/right-repartition).
const clusterJoinPipeline = `sources:
  - {name: orders, topic: orders, timestamp: {expression: ts}, watermark: {out_of_orderness: 2s}}
  - {name: payments, topic: payments, timestamp: {expression: ts}, watermark: {out_of_orderness: 2s}}
  - {name: customers, topic: customers, table: true}
  - {name: accounts, topic: accounts, table: true}
operators:
  - name: paid
    type: interval_join
    inputs:
      left: {from: orders, key_by: id}
      right: {from: payments, key_by: order_id}
    params:
      lower: -5s
      upper: 10s
      join: left
      select: '{"o": left == null ? null : left.id, "p": right == null ? null : right.pid}'
  - name: balances
    type: join
    inputs:
      left: {from: customers, key_by: key}
      right: {from: accounts, key_by: key}
    params:
      join: left
      upsert: [left, right]
      select: '{"customer": key, "name": left.name, "balance": right == null ? null : right.balance}'
sinks:
  - {name: paid-out, input: paid, topic: paid, delivery: exactly-once, transaction_timeout: 2m}
  - {name: balances-out, input: balances, topic: balances, delivery: exactly-once, transaction_timeout: 2m, changelog: header}
`

// tableOps returns the customers and accounts records of one half of
// TestClusterJoins (customerRec, accountRec: a name "" or a negative
// balance is a tombstone), and applies them to the tables customers and
// accounts (key -> name, key -> balance): the first half creates customers
// c0..c39 and the accounts of c0..c29 and of c50..c54 (no customer yet);
// the second renames every fifth customer, deletes the customers c3, c10,
// c17, ..., deletes the accounts c1, c7, c13, ..., changes the balance of
// c2, c6, c10, ... and creates customer c50.
func tableOps(half int, customers map[string]string, accounts map[string]int) []*kgo.Record {
	var out []*kgo.Record
	cust := func(id, name string) {
		out = append(out, customerRec(id, name))
		if name == "" {
			delete(customers, id)
		} else {
			customers[id] = name
		}
	}
	acct := func(id string, balance int) {
		out = append(out, accountRec(id, balance))
		if balance < 0 {
			delete(accounts, id)
		} else {
			accounts[id] = balance
		}
	}
	if half == 0 {
		for i := range 40 {
			cust(fmt.Sprintf("c%d", i), fmt.Sprintf("N%d", i))
		}
		for i := range 30 {
			acct(fmt.Sprintf("c%d", i), 100+i)
		}
		for i := 50; i < 55; i++ {
			acct(fmt.Sprintf("c%d", i), i)
		}
		return out
	}
	for i := range 40 {
		id := fmt.Sprintf("c%d", i)
		switch {
		case i%7 == 3:
			cust(id, "")
		case i%5 == 0:
			cust(id, fmt.Sprintf("R%d", i))
		}
		switch {
		case i%6 == 1:
			acct(id, -1)
		case i%4 == 2:
			acct(id, 1000+i)
		}
	}
	cust("c50", "N50")
	return out
}

// TestClusterJoins runs an interval join and a regular join of two tables
// in cluster mode on two daemons (2 units per stage, 3 stages), each join's
// two inputs crossing one repartition topic per role. Daemon a, running one
// unit of each stage, is killed with SIGKILL once the first half of the
// input has output on both joins;
// b takes a's units over (restoring their join state, the markers' valve
// state and the table rows) and the second half follows. Read_committed:
//   - paid is exactly the left interval join computed from the definition
//     (joinExpected over joinInput's 1,000 orders and 1,000 payments),
//     every row once, the unmatched orders released by the watermark, the
//     minimum over both roles' repartition topics, once tick records at
//     +300s passed every interval;
//   - the changelog on balances (+I/-D, kind in the header) applies
//     cleanly (every -D retracts a row that is there, no row twice) to
//     exactly the left join of the final customers and accounts tables
//     (renames, deleted customers and accounts, balance changes);
//   - each repartition topic holds each record of its role once, in the
//     partition of its key group's unit; no transaction is left open.
func TestClusterJoins(t *testing.T) {
	t.Parallel()
	topics := map[string]int{"orders": 4, "payments": 4, "customers": 2, "accounts": 2, "paid": 2, "balances": 2}
	tb := startTestBroker(t, topics)
	c := newCluster(t, clusterJob{Units: 2, Pipeline: clusterJoinPipeline, Output: "paid"}, tb.addr)
	a, b := c.start("a"), c.start("b")
	manual := newClient(t, tb.addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	keyed := newClient(t, tb.addr)
	opts := []kgo.Opt{kgo.SeedBrokers(tb.addr)}
	read := func(topic string) []*kgo.Record {
		return testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), topic, 5*time.Second)
	}

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
	customers, accounts := map[string]string{}, map[string]int{}
	first := tableOps(0, customers, accounts)
	produce(t, keyed, first...)
	produce(t, manual, half(true)...)
	exited := func() bool { return a.exited() || b.exited() }
	if !testkit.Poll(60*time.Second, func() bool { return exited() || len(read("paid")) > 0 && len(read("balances")) > 0 }) || exited() {
		t.Fatalf("no output of both joins before the kill:\n%s", c.logs())
	}
	// Each daemon runs one unit of each stage (even per stage), so the
	// kill moves a unit of both joins and one of stage 0.
	if !testkit.Poll(30*time.Second, func() bool { return len(running(a)) == 3 && len(running(b)) == 3 }) {
		t.Fatalf("units not spread 3/3 before the kill: a runs %v, b %v:\n%s", running(a), running(b), c.logs())
	}
	c.kill("a")
	second := tableOps(1, customers, accounts)
	produce(t, keyed, second...)
	produce(t, manual, half(false)...)
	var ticks []*kgo.Record // move every partition's watermark past every interval
	for p := range int32(4) {
		ticks = append(ticks,
			joinRec{topic: "orders", partition: p, ts: joinBase + 300_000, id: 100_000 + int(p)}.record(),
			joinRec{topic: "payments", partition: p, ts: joinBase + 300_000, id: 100_000 + int(p), orderID: 200_000 + int(p)}.record())
	}
	produce(t, manual, ticks...)

	// The interval join: exactly the left join of the definition.
	want, _ := joinExpected(orders, payments, "left")
	var got []string
	paid := func() []string {
		got = got[:0]
		for _, r := range read("paid") {
			got = append(got, string(r.Key)+" "+string(r.Value))
		}
		slices.Sort(got)
		return got
	}
	if !testkit.Poll(60*time.Second, func() bool { return b.exited() || len(paid()) >= len(want) }) || b.exited() {
		t.Fatalf("paid holds %d rows read_committed, want %d:\n%s", len(got), len(want), c.logs())
	}

	if got := running(b); len(got) != 6 {
		t.Errorf("b runs units %v after the kill, want all 6", got)
	}

	// The regular join: the final joined table, reached by a clean
	// changelog.
	row := func(id, name, balance string) string {
		return fmt.Sprintf(`{"balance":%s,"customer":%q,"name":%q}`, balance, id, name)
	}
	wantView := map[string][]string{}
	for id, name := range customers {
		balance := "null"
		if n, ok := accounts[id]; ok {
			balance = fmt.Sprint(n)
		}
		wantView[id] = []string{row(id, name, balance)}
	}
	var view map[string][]string
	var bad []string
	apply := func() bool {
		view, bad = map[string][]string{}, nil
		for _, r := range read("balances") {
			kind := ""
			for _, h := range r.Headers {
				if h.Key == runtime.ChangeHeader {
					kind = string(h.Value)
				}
			}
			k, v := string(r.Key), string(r.Value)
			switch i := slices.Index(view[k], v); {
			case kind == "+I" && i >= 0:
				bad = append(bad, "+I of a row already there: "+k+" "+v)
			case kind == "+I":
				view[k] = append(view[k], v)
			case kind == "-D" && i < 0:
				bad = append(bad, "-D of a row not there: "+k+" "+v)
			case kind == "-D":
				view[k] = slices.Delete(view[k], i, i+1)
			default:
				bad = append(bad, fmt.Sprintf("kind %q: %s %s", kind, k, v))
			}
			if len(view[k]) == 0 {
				delete(view, k)
			}
		}
		return reflect.DeepEqual(view, wantView)
	}
	if !testkit.Poll(30*time.Second, apply) {
		t.Errorf("balances changelog applies to\n%v\nwant exactly\n%v", view, wantView)
	}
	if len(bad) > 0 {
		t.Errorf("balances changelog does not apply cleanly:\n%s", strings.Join(bad, "\n"))
	}
	if !slices.Equal(paid(), want) {
		for _, l := range want {
			if _, found := slices.BinarySearch(got, l); !found {
				t.Errorf("missing: %s", l)
			}
		}
		for i, l := range got {
			if _, found := slices.BinarySearch(want, l); !found || i > 0 && got[i-1] == l {
				t.Errorf("not expected or twice: %s", l)
			}
		}
		t.Fatalf("paid holds %d rows, want exactly the %d of the definition", len(got), len(want))
	}

	// The exchange: each record of each role once, in its unit's partition.
	for topic, n := range map[string]int{
		"clicks-1-left-repartition": len(orders) + 4, "clicks-1-right-repartition": len(payments) + 4,
		"clicks-2-left-repartition":  countTopic(first, second, "customers"),
		"clicks-2-right-repartition": countTopic(first, second, "accounts"),
	} {
		rep := testkit.WithoutMarkers(read(topic))
		if len(rep) != n {
			t.Errorf("%s holds %d records, want %d", topic, len(rep), n)
		}
		seen := map[string]bool{}
		for _, r := range rep {
			id := string(r.Key) + " " + string(r.Value) + " " + fmt.Sprint(r.Timestamp.UnixMilli())
			if strings.HasPrefix(topic, "clicks-1") && seen[id] {
				t.Errorf("%s: %s twice", topic, id)
			}
			seen[id] = true
			if want := keygroup.OperatorIndex(keygroup.Assign(r.Key, 24), 24, 2); int(r.Partition) != want {
				t.Errorf("%s: key %s in partition %d, want %d", topic, r.Key, r.Partition, want)
			}
		}
	}
	c.checkSettled("paid", "balances", "clicks-1-left-repartition", "clicks-1-right-repartition", "clicks-2-left-repartition", "clicks-2-right-repartition")
	if ks := slices.Sorted(maps.Keys(wantView)); len(ks) != 40-6+1 {
		t.Fatalf("expected table has %d customers %v, want 35", len(ks), ks)
	}
}

// countTopic returns how many of the records of halves are on topic.
func countTopic(first, second []*kgo.Record, topic string) int {
	n := 0
	for _, r := range append(slices.Clone(first), second...) {
		if r.Topic == topic {
			n++
		}
	}
	return n
}
