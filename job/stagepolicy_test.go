package job_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/job"
	"github.com/kstreamd/kstreamd/source"
)

// stagePolicyYAML is a two-stage cluster job whose filter runs after the
// key-group exchange (stage 1); ON_ERROR is replaced by the source's
// policy lines.
const stagePolicyYAML = `
job:
  name: sp
  max_parallelism: 8
kafka:
  brokers: [localhost:9092]
checkpoints:
  interval: 100ms
  timeout: 1m
cluster:
  enabled: true
  units: 1
  store:
    dir: /unused
sources:
  - name: events
    topic: in
ON_ERROR
operators:
  - name: big
    type: filter
    input: events
    key_by: user
    params:
      condition: amount > 100
sinks:
  - name: out
    input: big
    topic: out
    delivery: exactly-once
    transaction_timeout: 10m
`

// TestUnitStagePolicy: the filter of stage 1 fails on the 3 records whose
// amount is not a number (they are valid JSON, so stage 0 passes them
// through the repartition topic); the 6 of the 10 good records above 100
// pass. Stage 1 obeys the on_error policy of the job's source events,
// which its repartition source inherited:
//   - dead-letter: the read_committed dead-letter topic holds exactly the 3
//     records, once each, in order, written transactionally (by the
//     filter's writer, ids kstreamd-sp-big.dead-letters-1-0-<slot>), with
//     their value, their key_by key, the eval_error header and headers
//     naming where stage 1 read them (sp-1-repartition, partition 0, their
//     offset there); the output holds exactly the 6 others;
//   - skip: kstreamd_source_records_skipped_total{source="events",
//     reason="eval_error"} of the stage-1 unit is 3 and the output holds
//     the 6;
//   - fail: the stage-1 unit fails with the *source.BadRecordError of the
//     first bad record, at its repartition offset, naming events.
func TestUnitStagePolicy(t *testing.T) {
	for _, tc := range []struct{ name, onError string }{
		{"dead-letter", "    on_error: dead-letter\n    dead_letter_topic: dlq"},
		{"skip", "    on_error: skip"},
		{"fail", "    on_error: fail"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newUnitFixture(t, "sp.yaml", strings.Replace(stagePolicyYAML, "ON_ERROR", tc.onError, 1), kfake.SeedTopics(1, "in", "out", "dlq"))
			kc, opts, st, set := f.kc, f.opts, f.st, f.set
			var idsMu sync.Mutex
			ids := map[string]bool{}
			kc.ControlKey(int16(kmsg.InitProducerID), func(req kmsg.Request) (kmsg.Response, error, bool) {
				kc.KeepControl()
				if r := req.(*kmsg.InitProducerIDRequest); r.TransactionalID != nil {
					idsMu.Lock()
					ids[*r.TransactionalID] = true
					idsMu.Unlock()
				}
				return nil, nil, false
			})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			f.ensureRepartitions(t)
			var recs []produced
			for i := range 10 {
				recs = append(recs, produced{key: fmt.Sprint("k", i), value: fmt.Sprintf(`{"user":"g%d","amount":%d}`, i, 97+i)})
				if i%3 == 1 {
					recs = append(recs, produced{key: fmt.Sprint("k", i, "x"), value: fmt.Sprintf(`{"user":"eval%d","amount":"x"}`, i)})
				}
			}
			produceAll(t, opts, "in", recs)

			set.PurgeRepartitions = false   // the test reads the repartition topic
			reg := prometheus.NewRegistry() // the stage-1 unit's
			done := make([]chan error, len(st.Stages))
			for _, stage := range st.Stages {
				s := set
				s.Unit = &job.Unit{Stage: stage.Index, Index: 0, Units: 1}
				deps := job.Deps{ClientOpts: opts}
				if stage.Index == 1 {
					deps.Registerer = reg
				}
				j, err := job.Build(ctx, stage.Graph, s, deps)
				if err != nil {
					t.Fatalf("build stage %d: %v", stage.Index, err)
				}
				done[stage.Index] = make(chan error, 1)
				go func() { done[stage.Index] <- j.Run(ctx) }()
			}
			read := func(iso kgo.IsolationLevel, topic string) []*kgo.Record {
				return testkit.ReadTopicWith(t, opts, iso, topic, 5*time.Second)
			}
			stopped := func() bool { return len(done[0])+len(done[1]) > 0 }
			var rep []*kgo.Record // the repartition topic's records, in order
			repOffset := func(user string) int64 {
				for _, r := range rep {
					if string(r.Key) == user {
						return r.Offset
					}
				}
				t.Fatalf("no record with key %q in the repartition topic", user)
				return 0
			}
			bad := []string{"eval1", "eval4", "eval7"}

			if tc.name == "fail" {
				var err error
				select {
				case err = <-done[1]:
				case err = <-done[0]:
					t.Fatalf("stage 0 stopped with %v, want stage 1 to fail", err)
				case <-time.After(time.Minute):
					t.Fatal("stage 1 never failed")
				}
				cancel()
				if err := <-done[0]; err != nil {
					t.Errorf("stage 0: %v", err)
				}
				rep = testkit.WithoutMarkers(read(kgo.ReadCommitted(), st.Repartitions[0].Topic))
				var bre *source.BadRecordError
				if !errors.As(err, &bre) {
					t.Fatalf("stage 1 failed with %v, want a *source.BadRecordError", err)
				}
				want := source.BadRecordError{Source: "events", Topic: "sp-1-repartition", Partition: 0, Offset: repOffset("eval1"), Reason: "eval_error", Detail: bre.Detail}
				if *bre != want || !strings.HasPrefix(bre.Detail, `expression "amount > 100"`) {
					t.Errorf("stage 1 failed with %+v, want %+v with the expression's error", *bre, want)
				}
				return
			}

			if !testkit.Poll(time.Minute, func() bool {
				if stopped() {
					return true
				}
				if len(read(kgo.ReadCommitted(), "out")) < 6 {
					return false
				}
				if tc.name == "skip" {
					return counterSum(t, reg, "kstreamd_source_records_skipped_total", nil) >= 3
				}
				return len(read(kgo.ReadCommitted(), "dlq")) >= 3
			}) {
				t.Fatal("stage 1 never committed its output")
			}
			cancel()
			for i, d := range done {
				if err := <-d; err != nil {
					t.Errorf("stage %d: %v", i, err)
				}
			}
			rep = testkit.WithoutMarkers(read(kgo.ReadCommitted(), st.Repartitions[0].Topic))
			var outUsers []string
			for _, r := range read(kgo.ReadCommitted(), "out") {
				outUsers = append(outUsers, string(r.Key))
			}
			if got, want := strings.Join(outUsers, " "), "g4 g5 g6 g7 g8 g9"; got != want {
				t.Errorf("the read_committed output holds %q, want %q", got, want)
			}
			if tc.name == "skip" {
				if got := counterSum(t, reg, "kstreamd_source_records_skipped_total", map[string]string{"source": "events", "reason": "eval_error"}); got != 3 {
					t.Errorf("stage 1 counted %v skipped records of events (eval_error), want 3", got)
				}
				if got := counterSum(t, reg, "kstreamd_source_records_skipped_total", nil); got != 3 {
					t.Errorf("stage 1 counted %v skipped records in all, want 3", got)
				}
				return
			}
			var want []produced
			for _, u := range bad {
				for _, r := range recs {
					if strings.Contains(r.value, `"`+u+`"`) {
						want = append(want, produced{key: u, value: r.value, offset: repOffset(u)})
					}
				}
			}
			dlq := read(kgo.ReadCommitted(), "dlq")
			checkDeadLetters(t, dlq, want, "sp-1-repartition", func(string) string { return `eval_error: expression "amount > 100"*` })
			for _, r := range dlq {
				if !r.Attrs.IsTransactional() {
					t.Errorf("dead letter %q was not written in a transaction", r.Key)
				}
			}
			if n := len(read(kgo.ReadUncommitted(), "dlq")); n != 3 {
				t.Errorf("read_uncommitted, the dead-letter topic holds %d records, want 3 (none written twice)", n)
			}
			idsMu.Lock()
			defer idsMu.Unlock()
			if !ids["kstreamd-sp-big.dead-letters-1-0-0"] {
				t.Errorf("the filter's dead-letter writer never initialised kstreamd-sp-big.dead-letters-1-0-0; transactional ids: %v", ids)
			}
		})
	}
}
