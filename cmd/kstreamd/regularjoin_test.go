package main

import (
	"fmt"
	"maps"
	"reflect"
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
