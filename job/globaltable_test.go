package job_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/job"
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
	// run runs every unit as member until every click is out, then
	// stops them; it returns what each stage-1 unit restored from.
	run := func(member string) []string {
		var restored []string
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var wg sync.WaitGroup
		errs := make(chan error, 2*st.Units)
		for _, stage := range st.Stages {
			for u := range st.Units {
				s := f.set
				s.CheckpointDir, s.StateDir = dir+"/"+member+"/staging", dir+"/"+member+"/state"
				s.Unit = &job.Unit{Stage: stage.Index, Index: u, Units: st.Units, Member: member, Fingerprint: st.Fingerprint}
				j, err := job.Build(ctx, stage.Graph, s, job.Deps{ClientOpts: opts, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
				if err != nil {
					t.Fatalf("%s: build stage %d unit %d: %v", member, stage.Index, u, err)
				}
				if stage.Index == 1 {
					restored = append(restored, j.RestoredFrom())
				}
				wg.Go(func() {
					if err := j.Run(ctx); err != nil {
						errs <- fmt.Errorf("%s: stage %d unit %d: %w", member, stage.Index, u, err)
					}
				})
			}
		}
		if !testkit.Poll(2*time.Minute, func() bool { return len(committed()) >= len(want) }) {
			t.Fatalf("%s: %d committed outputs, want %d; warnings:\n%s", member, len(committed()), len(want), logs.String())
		}
		cancel()
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		return restored
	}
	country := map[int]string{0: "NL", 1: "DE", 2: "FR", 3: "BE", 4: "IT"} // u5 never exists
	produce(user("u0", "NL"), user("u1", "DE"), user("u2", "FR"), user("u3", "BE"), user("u4", "AT"), user("u4", "IT"), user("u3", ""))
	delete(country, 3)
	clicks(0, 60, func(u int) string { return country[u] })
	run("a")
	produce(user("u1", "ES"), user("u3", "PT"))
	country[1], country[3] = "ES", "PT"
	clicks(60, 120, func(u int) string { return country[u] })
	for u, r := range run("b") {
		if want := fmt.Sprintf("%s/b/staging/gt/units/1/%d/chk-", dir, u); !strings.HasPrefix(r, want) {
			t.Errorf("b's stage-1 unit %d restored %q, want a checkpoint downloaded into %s", u, r, want)
		}
	}

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
