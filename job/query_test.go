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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/kstreamd/kstreamd/internal/testkit"
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

// TestMemberQueryState runs the two stages of a keyed count (2 units
// each) on two members of one group: after 1,000 clicks (200 per user),
// the member running the stage-1 unit that owns user u1's key group
// answers its count, 200, naming the unit; the other member answers a
// *job.NotOwnerError naming that unit and the member holding it, as the
// group reports it; an operator no stage has is a *job.UnknownOperatorError.
func TestMemberQueryState(t *testing.T) {
	f := newUnitFixture(t, "units.yaml", strings.Replace(unitsYAML, "units: 4", "units: 2", 1), kfake.SeedTopics(2, "clicks", "counts"))
	opts, st, set := f.opts, f.st, f.set
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	members := map[string]*job.Member{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range []string{"m1", "m2"} {
		s := set
		s.StateDir += "/" + id
		s.CheckpointDir += "/" + id
		wg.Go(func() {
			err := job.RunMember(ctx, st, s, job.Deps{Registerer: prometheus.NewRegistry(), ClientOpts: opts}, job.MemberConfig{
				GroupID: "clicks-cluster", MemberID: id,
				SessionTimeout: 10 * time.Second, RebalanceTimeout: time.Minute, RevokeTimeout: 30 * time.Second,
				OnJoined: func(m *job.Member) { mu.Lock(); members[id] = m; mu.Unlock() },
			})
			if err != nil {
				t.Errorf("%s: RunMember: %v", id, err)
			}
		})
	}
	defer wg.Wait()
	defer cancel()
	produceEach(t, opts, "clicks", 0, 1000, clickOf5)
	// Poll until the group settled (each member holds units and is ready)
	// and u1's unit has counted all 200 of its clicks.
	var owner, other *job.Member
	var ans job.StateAnswer
	var notOwner *job.NotOwnerError
	ok := testkit.Poll(2*time.Minute, func() bool {
		mu.Lock()
		m1, m2 := members["m1"], members["m2"]
		mu.Unlock()
		if m1 == nil || m2 == nil || !m1.Ready() || !m2.Ready() {
			return false
		}
		qctx, qcancel := context.WithTimeout(ctx, 10*time.Second)
		defer qcancel()
		owner, other, notOwner = nil, nil, nil
		for _, pair := range [][2]*job.Member{{m1, m2}, {m2, m1}} {
			a, err := pair[0].QueryState(qctx, "per_user", "count", []byte("u1"))
			if err == nil && a.Found && string(a.Value) == "200" {
				owner, ans = pair[0], a
				_, err = pair[1].QueryState(qctx, "per_user", "count", []byte("u1"))
				if errors.As(err, &notOwner) && notOwner.Owner == owner.ID() {
					other = pair[1]
				}
			}
		}
		return owner != nil && other != nil
	})
	if !ok {
		t.Fatalf("no member answered u1's count 200 while the other named it (last: owner %v, answer %+v, other's error %v)", owner != nil, ans, notOwner)
	}
	kg := ans.KeyGroup
	wantUnit := job.UnitID{Stage: 1, Unit: 0}
	if kg >= 8 {
		wantUnit.Unit = 1
	}
	if ans.Unit == nil || *ans.Unit != wantUnit || ans.Operator != "per_user" || ans.Subtask != 0 {
		t.Errorf("owner's answer %+v (unit %v), want per_user of unit %+v", ans, ans.Unit, wantUnit)
	}
	if notOwner.Unit != wantUnit || notOwner.Host == "" {
		t.Errorf("other member's error %+v, want unit %+v, owner %s with its host", notOwner, wantUnit, owner.ID())
	}
	_, err := other.QueryState(ctx, "nope", "count", []byte("u1"))
	var uo *job.UnknownOperatorError
	if !errors.As(err, &uo) || fmt.Sprint(uo.Keyed) != "[per_user]" {
		t.Errorf("unknown operator: %v, want *job.UnknownOperatorError listing per_user", err)
	}
}
