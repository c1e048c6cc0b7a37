package main

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// userRec is a record of the users table: an upsert of id to country, or
// a tombstone when country is "".
func userRec(id, country string) *kgo.Record {
	r := &kgo.Record{Topic: "users", Key: []byte(id)}
	if country != "" {
		r.Value = []byte(`{"name":"` + strings.ToUpper(id) + `","country":"` + country + `"}`)
	}
	return r
}

// clickRec is a click of user on the clicks topic, keyed by the click id.
func clickRec(id, user string) *kgo.Record {
	return &kgo.Record{Topic: "clicks", Key: []byte(id), Value: []byte(`{"id":"` + id + `","user":"` + user + `"}`)}
}

// TestExampleGlobalTableJoin runs configs/examples/global_table_join.yaml
// on a users table with an update and a tombstone, produced before the job
// starts (the clicks wait until the table caught up): the read_committed
// output is exactly each click with its user's latest country, null for a
// deleted and an unknown user (join: left). A table update while the job
// runs applies to the clicks after it. Then the job is stopped and
// restarted at parallelism 4 from its checkpoint: the users source reads
// nothing (its offsets are restored), yet the clicks after the restart
// still find the table (each new subtask got a copy of the restored
// broadcast state). The plan's edges: clicks forward to the join, no
// key-group edge (TestPlanGlobalTableJoin checks the graph).
func TestExampleGlobalTableJoin(t *testing.T) {
	t.Parallel()
	_, broker := startKfake(t, []string{"users", "clicks", "clicks-enriched"})
	cl := newClient(t, broker)
	produce(t, cl, userRec("u1", "NL"), userRec("u2", "DE"), userRec("u3", "FR"), userRec("u1", "BE"), userRec("u2", ""))
	dir, metrics := t.TempDir(), testkit.FreeAddr(t)
	cfg := exampleConfig(t, "global_table_join.yaml", dir, broker, metrics)
	d := startDaemon(t, dir, cfg, broker, metrics)
	produce(t, cl, clickRec("c1", "u1"), clickRec("c2", "u2"), clickRec("c3", "u3"), clickRec("c4", "u9"))
	sink := map[string]string{"operator": "clicks-enriched"}
	testkit.WaitMetric(t, 30*time.Second, d.url(), "kstreamd_operator_records_out_total", sink, 4)
	// The join read 5 table records on each of its 2 subtasks and the 4
	// clicks; the update of u3 makes it 12 + 4 once both applied it.
	enrich := map[string]string{"operator": "enrich"}
	testkit.WaitMetric(t, 30*time.Second, d.url(), "kstreamd_operator_records_in_total", enrich, 14)
	produce(t, cl, userRec("u3", "DE"))
	testkit.WaitMetric(t, 30*time.Second, d.url(), "kstreamd_operator_records_in_total", enrich, 16)
	produce(t, cl, clickRec("c5", "u3"))
	testkit.WaitMetric(t, 30*time.Second, d.url(), "kstreamd_operator_records_out_total", sink, 5)
	last, _ := testkit.Scrape(d.url(), "kstreamd_checkpoint_last_completed_id", nil)
	waitCheckpointAfter(t, d, last)
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}

	d = startDaemon(t, dir, strings.Replace(cfg, "parallelism: 2", "parallelism: 4", 1), broker, metrics)
	if lines := restoreLines(d.out.String()); len(lines) != 1 {
		t.Fatalf("restart: restoring lines %q, want one", lines)
	}
	produce(t, cl, clickRec("c6", "u1"), clickRec("c7", "u3"), clickRec("c8", "u2"))
	testkit.WaitMetric(t, 30*time.Second, d.url(), "kstreamd_operator_records_out_total", sink, 3)
	last, _ = testkit.Scrape(d.url(), "kstreamd_checkpoint_last_completed_id", nil)
	waitCheckpointAfter(t, d, last)
	if n, _ := testkit.Scrape(d.url(), "kstreamd_operator_records_in_total", map[string]string{"operator": "users"}); n != 0 {
		t.Fatalf("the users source read %v records after the restore, want 0 (the table must come from the checkpoint)", n)
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
	got := map[string][]string{}
	for _, r := range testkit.ReadTopic(t, []string{broker}, "clicks-enriched", 10*time.Second) {
		got[string(r.Key)] = append(got[string(r.Key)], string(r.Value))
	}
	want := map[string][]string{
		"c1": {`{"click":"c1","country":"BE","user":"u1"}`},
		"c2": {`{"click":"c2","country":null,"user":"u2"}`},
		"c3": {`{"click":"c3","country":"FR","user":"u3"}`},
		"c4": {`{"click":"c4","country":null,"user":"u9"}`},
		"c5": {`{"click":"c5","country":"DE","user":"u3"}`},
		"c6": {`{"click":"c6","country":"BE","user":"u1"}`},
		"c7": {`{"click":"c7","country":"DE","user":"u3"}`},
		"c8": {`{"click":"c8","country":null,"user":"u2"}`},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read_committed clicks-enriched:\n%v\nwant exactly\n%v", got, want)
	}
}
