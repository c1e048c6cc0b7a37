package job_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

const globalTableUnitsYAML = `
job:
  name: gt
  max_parallelism: 16
kafka:
  brokers: [localhost:9092]
checkpoints:
  interval: 100ms
  timeout: 1m
cluster:
  enabled: true
  units: 2
  store:
    dir: /unused
sources:
  - {name: clicks, topic: clicks}
  - {name: users, topic: users, table: true}
operators:
  - name: unique
    type: dedup
    input: clicks
    key_by: id
    params: {ttl: 1h}
  - name: enrich
    type: global_table_join
    input: unique
    broadcast: users
    params:
      key: user
      join: left
      select: '{"click": left.id, "country": right == null ? null : right.country}'
sinks:
  - {name: out, input: enrich, topic: out, delivery: exactly-once, transaction_timeout: 5m}
`

// TestUnitsGlobalTableJoin runs a global_table_join (GlobalKTable) in
// cluster mode behind a key_by, so in stage 1: every stage-1 unit reads the
// whole users table (a broadcast source copied into the stage, every
// partition) while it reads only its key groups of the clicks. Member a
// runs every unit over a table with an update and a tombstone and the
// clicks of every user; member b, with empty local directories, takes
// every unit over from the store (the table from each unit's checkpointed
// broadcast state and offsets), a table update and more clicks follow.
// Read_committed, every click comes out once with its user's country as
// the table held it (null for the deleted and the unknown user), whichever
// unit it went to.
func TestUnitsGlobalTableJoin(t *testing.T) {
	f := newUnitFixture(t, "gt.yaml", globalTableUnitsYAML, kfake.SeedTopics(2, "clicks", "users", "out"))
	opts, st, dir := f.opts, f.st, f.dir
	f.ensureRepartitions(t)
	var stage1 []string
	for _, s := range st.Stages[1].Graph.Sources {
		stage1 = append(stage1, s.Name)
	}
	if got := strings.Join(stage1, " "); got != "users repartition.1" {
		t.Fatalf("stage 1 reads %q, want the users table and its repartition topic", got)
	}
	prod, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	produce := func(recs ...*kgo.Record) {
		if err := prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	user := func(id, country string) *kgo.Record {
		r := &kgo.Record{Topic: "users", Key: []byte(id)}
		if country != "" {
			r.Value = fmt.Appendf(nil, `{"country":%q}`, country)
		}
		return r
	}
	want := map[string]string{}
	clicks := func(from, to int, country func(u int) string) {
		var recs []*kgo.Record
		for i := from; i < to; i++ {
			u := i % 6
			recs = append(recs, &kgo.Record{Topic: "clicks", Value: fmt.Appendf(nil, `{"id":"c%d","user":"u%d"}`, i, u)})
			want[fmt.Sprintf("c%d", i)] = country(u)
		}
		produce(recs...)
	}
	committed := func() map[string]string {
		out := map[string]string{}
		for _, r := range testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), "out", 5*time.Second) {
			out[string(r.Value)] += "+" // twice would show
		}
		return out
	}
	var logs testkit.SyncBuffer
	country := map[int]string{0: "NL", 1: "DE", 2: "FR", 3: "BE", 4: "IT"} // u5 never exists
	produce(user("u0", "NL"), user("u1", "DE"), user("u2", "FR"), user("u3", "BE"), user("u4", "AT"), user("u4", "IT"), user("u3", ""))
	delete(country, 3)
	clicks(0, 60, func(u int) string { return country[u] })
	everyClick := func() bool { return len(committed()) >= len(want) }
	runUnits(t, st, f.set, dir, "a", opts, nil, &logs, everyClick)
	produce(user("u1", "ES"), user("u3", "PT"))
	country[1], country[3] = "ES", "PT"
	clicks(60, 120, func(u int) string { return country[u] })
	checkRestoredFrom(t, runUnits(t, st, f.set, dir, "b", opts, nil, &logs, everyClick), dir, "b", "gt")

	wantOut := map[string]string{}
	for id, c := range want {
		v := "null"
		if c != "" {
			v = fmt.Sprintf("%q", c)
		}
		wantOut[fmt.Sprintf(`{"click":%q,"country":%s}`, id, v)] = "+"
	}
	if got := committed(); !maps.Equal(got, wantOut) {
		for k := range wantOut {
			if got[k] != "+" {
				t.Errorf("%s: %q, want once", k, got[k])
			}
		}
		t.Fatalf("read_committed out: %d distinct records, want exactly %d", len(got), len(wantOut))
	}
}
