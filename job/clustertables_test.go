package job_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
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

const temporalUnitsYAML = `
job:
  name: tj
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
  - name: enrich
    type: table_join
    inputs:
      left: {from: clicks, key_by: user}
      right: {from: users, key_by: key}
    params:
      mode: event_time
      join: left
      history_retention: 1h
      select: '{"click": left.id, "country": right == null ? null : right.country}'
sinks:
  - {name: out, input: enrich, topic: out, delivery: exactly-once, transaction_timeout: 5m}
`

// TestUnitsTemporalTableJoin runs an event-time table_join (Flink's
// temporal join) of clicks with a users table in cluster mode, 2 units per
// stage: the table is read as a table in stage 0 (upserts, a tombstone)
// and crosses the exchange on its own repartition topic with each change's
// kind, the clicks on theirs, and the join's watermark is the minimum of
// both topics' marker watermarks. Member a runs every unit over the
// records before +20s (clicks wait until both watermarks pass them); member
// b takes every unit over from the store and reads the rest. Read_committed,
// every click comes out once with its user's country valid at the click's
// time: before an update the old one, after a tombstone null, before the
// user existed null (join: left); the tick records that move the
// watermarks never join.
func TestUnitsTemporalTableJoin(t *testing.T) {
	f := newUnitFixture(t, "tj.yaml", temporalUnitsYAML, kfake.SeedTopics(2, "clicks", "users", "out"))
	opts, st, dir := f.opts, f.st, f.dir
	f.ensureRepartitions(t)
	prod, err := kgo.NewClient(append(slices.Clone(opts), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	const base = int64(1_700_000_000_000)
	at := func(sec int) time.Time { return time.UnixMilli(base + int64(sec)*1000) }
	// versions: per user, the country from each time on ("" deleted).
	type version struct {
		sec     int
		country string
	}
	versions := map[int][]version{}
	user := func(u, sec int, country string) *kgo.Record {
		versions[u] = append(versions[u], version{sec, country})
		r := &kgo.Record{Topic: "users", Partition: int32(u % 2), Key: fmt.Appendf(nil, "u%d", u), Timestamp: at(sec)}
		if country != "" {
			r.Value = fmt.Appendf(nil, `{"country":%q}`, country)
		}
		return r
	}
	want := map[string]string{}
	click := func(i, u, sec int) *kgo.Record {
		country := "null"
		for _, v := range versions[u] {
			if v.sec <= sec {
				country = "null"
				if v.country != "" {
					country = fmt.Sprintf("%q", v.country)
				}
			}
		}
		want[fmt.Sprintf(`{"click":"c%d","country":%s}`, i, country)] = "+"
		return &kgo.Record{Topic: "clicks", Partition: int32(i % 2), Value: fmt.Appendf(nil, `{"id":"c%d","user":"u%d"}`, i, u), Timestamp: at(sec)}
	}
	produce := func(recs ...*kgo.Record) {
		if err := prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	clicksAt := func(first, sec int) []*kgo.Record {
		var out []*kgo.Record
		for u := range 6 {
			out = append(out, click(first+u, u, sec))
		}
		return out
	}
	committed := func() map[string]string {
		out := map[string]string{}
		for _, r := range testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), "out", 5*time.Second) {
			out[string(r.Value)] += "+"
		}
		return out
	}
	var logs testkit.SyncBuffer
	// Before +20s: u0 NL, then BE from +10s; u1 DE; u2 FR; u5 ES from
	// +12s; clicks of u0..u5 at +5s and +15s. The watermark, the minimum
	// of both topics' partitions (users partition 0 at +10s), lets the
	// +5s clicks out.
	produce(user(0, 0, "NL"), user(1, 0, "DE"), user(2, 0, "FR"), user(0, 10, "BE"), user(5, 12, "ES"))
	produce(clicksAt(0, 5)...)
	early := maps.Clone(want)
	produce(clicksAt(6, 15)...)
	runUnits(t, st, f.set, dir, "a", opts, nil, &logs, func() bool { return maps.Equal(committed(), early) })
	// Then u1 deleted at +20s, u3 created at +30s, clicks at +25s and
	// +35s, and ticks moving every partition's watermark past the clicks:
	// users u100 and u101 at +200s, clicks of nobody at +100s (never out:
	// the watermark stays below them).
	produce(user(1, 20, ""), user(3, 30, "IT"), user(100, 200, "X"), user(101, 200, "X"))
	produce(clicksAt(12, 25)...)
	produce(clicksAt(18, 35)...)
	for p := range int32(2) {
		produce(&kgo.Record{Topic: "clicks", Partition: p, Value: fmt.Appendf(nil, `{"id":"tick%d","user":"nobody"}`, p), Timestamp: at(100)})
	}
	checkRestoredFrom(t, runUnits(t, st, f.set, dir, "b", opts, nil, &logs, func() bool { return len(committed()) >= len(want) }), dir, "b", "tj")
	if got := committed(); !maps.Equal(got, want) {
		for k := range want {
			if got[k] != "+" {
				t.Errorf("%s: %q, want once", k, got[k])
			}
		}
		t.Fatalf("read_committed out: %d distinct records %v, want exactly %d", len(got), got, len(want))
	}
	for _, w := range []string{`{"click":"c0","country":"NL"}`, `{"click":"c6","country":"BE"}`, `{"click":"c13","country":null}`,
		`{"click":"c15","country":null}`, `{"click":"c21","country":"IT"}`, `{"click":"c11","country":"ES"}`, `{"click":"c5","country":null}`} {
		if want[w] != "+" {
			t.Errorf("the expectation misses %s", w)
		}
	}
}
