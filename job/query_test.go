package job_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/kstreamd/kstreamd/job"
	"github.com/kstreamd/kstreamd/state"
)

// queryYAML is a keyed count of topic clicks per user at parallelism 2,
// the operator's uid differing from its name.
const queryYAML = `
job:
  name: query
  parallelism: 2
  max_parallelism: 16
kafka:
  brokers: [localhost:9092]
checkpoints:
  interval: 50ms
  timeout: 1m
sources:
  - name: clicks
    topic: clicks
operators:
  - name: per_user
    uid: users
    type: keyed_count
    input: clicks
    key_by: user
ASYNC
sinks:
  - name: counts
    input: per_user
    topic: counts
`

// TestQueryStateWhileRunning queries the count of each of 5 users over
// and over from 5 goroutines while a keyed count at parallelism 2 counts
// 2,000 clicks (400 per user, in 20 batches) and checkpoints every 50 ms, on the hashmap
// and Pebble backends and on Pebble with async state: each answer comes
// from the subtask owning the user's key group, every user's count never
// goes down from one answer to the next and ends at exactly 400 (the
// reads run on the subtasks' goroutines: -race finds no race with the
// record path, the snapshots or the async reads); by uid the operator is
// found too; an unknown operator is a *job.UnknownOperatorError listing
// per_user with its uid, an unknown state a *state.UnknownStateError; after
// Run returned a query fails with job.ErrNotRunning.
func TestQueryStateWhileRunning(t *testing.T) {
	for _, tc := range []struct {
		name, backend string
		async         bool
	}{{"hashmap", "hashmap", false}, {"pebble", "pebble", false}, {"pebble_async", "pebble", true}} {
		t.Run(tc.name, func(t *testing.T) {
			_, opts := newKafka(t, kfake.SeedTopics(2, "clicks", "counts"))
			yaml := strings.Replace(queryYAML, "ASYNC\n", "", 1)
			if tc.async {
				yaml = strings.Replace(queryYAML, "ASYNC", "    async_state: true", 1)
			}
			cfg := parseConfig(t, "query.yaml", yaml)
			g, err := cfg.Plan()
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			set := cfg.Settings()
			set.CheckpointDir, set.StateDir, set.StateBackend = filepath.Join(dir, "chk"), filepath.Join(dir, "state"), tc.backend
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			j, err := job.Build(ctx, g, set, job.Deps{ClientOpts: opts})
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- j.Run(ctx) }()

			const users, perUser = 5, 400
			var wg sync.WaitGroup
			errs := make(chan error, users)
			for u := range users {
				wg.Go(func() {
					key := fmt.Sprintf("u%d", u)
					last := int64(0)
					deadline := time.Now().Add(2 * time.Minute)
					for last < perUser && time.Now().Before(deadline) {
						a, err := j.QueryState(ctx, "per_user", "count", []byte(key))
						if err != nil {
							errs <- fmt.Errorf("%s: %w", key, err)
							return
						}
						n := int64(0)
						if a.Found {
							if _, err := fmt.Sscan(string(a.Value), &n); err != nil {
								errs <- fmt.Errorf("%s: value %s: %w", key, a.Value, err)
								return
							}
						}
						wantSub := 0
						if a.KeyGroup >= 8 {
							wantSub = 1
						}
						if n < last || n > perUser || a.Subtask != wantSub || a.UID != "users" {
							errs <- fmt.Errorf("%s: count %d after %d (at most %d), subtask %d of key group %d (want %d), uid %q", key, n, last, perUser, a.Subtask, a.KeyGroup, wantSub, a.UID)
							return
						}
						last = n
						time.Sleep(time.Millisecond)
					}
					if last != perUser {
						errs <- fmt.Errorf("%s: count %d after 2 minutes, want %d", key, last, perUser)
					}
				})
			}
			// In 20 batches, so that the queries meet the records on their way.
			for b := range 20 {
				var recs []produced
				for i := b * users * perUser / 20; i < (b+1)*users*perUser/20; i++ {
					recs = append(recs, produced{value: string(clickOf5(i))})
				}
				produceAll(t, opts, "clicks", recs)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}

			a, err := j.QueryState(ctx, "users", "count", []byte("u3"))
			if err != nil || !a.Found || string(a.Value) != "400" || a.Operator != "per_user" {
				t.Errorf("by uid: %+v, %v; want per_user's count 400", a, err)
			}
			_, err = j.QueryState(ctx, "counts", "count", []byte("u3"))
			var uo *job.UnknownOperatorError
			if !errors.As(err, &uo) || !uo.NotKeyed || fmt.Sprint(uo.Keyed) != "[per_user (uid users)]" {
				t.Errorf("a sink: %v, want *job.UnknownOperatorError (not keyed) listing per_user (uid users)", err)
			}
			_, err = j.QueryState(ctx, "per_user", "sum", []byte("u3"))
			var us *state.UnknownStateError
			if !errors.As(err, &us) || fmt.Sprint(us.Known) != "[count]" {
				t.Errorf("an unknown state: %v, want *state.UnknownStateError listing count", err)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Run: %v", err)
			}
			if _, err := j.QueryState(context.Background(), "per_user", "count", []byte("u3")); !errors.Is(err, job.ErrNotRunning) {
				t.Errorf("after Run returned: %v, want job.ErrNotRunning", err)
			}
		})
	}
}
