package operators

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
)

// TestAggregateSeenFilterTTLModel attacks the map read filter (seenFilter)
// where TestAggregateSeenFilterModel does not go: state_ttl. A key unseen
// for the TTL starts again from zero (its accumulators expire, its maps
// are cleared at its next record and it is born again in the filter,
// which still has its old entries), and a distinct value unseen for the
// TTL expires on its own while its key lives on (the filter says "maybe"
// for it; the read finds it absent, and it counts again). Random records
// of 8 keys and 6 users under a stepped TTL clock, sync and async on both
// backends, 4 rounds with a restore in between and the filter started
// over in two of them; every row each record emits is checked against an
// independent model of count_distinct and sum under the TTL.
func TestAggregateSeenFilterTTLModel(t *testing.T) {
	const ttl = 2050 * time.Millisecond // the clock moves in steps of 300ms: never exactly the TTL
	for _, kind := range backends {
		for _, mode := range modes {
			t.Run(kind+"/"+mode, func(t *testing.T) {
				p := AggregateParams{Emit: EmitEveryUpdate, StateTTL: StateTTLParams{TTL: ttl}, Aggregates: []AggregateSpec{
					{Name: "total", Fn: AggSum, Of: compiled(t, "amount")},
					{Name: "users", Fn: AggCountDistinct, Of: compiled(t, "user")},
				}}
				type keyModel struct {
					last         time.Duration
					total, users int
					seen         map[string]time.Duration // user -> last occurrence
				}
				model := map[string]*keyModel{}
				want, got := map[string][]string{}, map[string][]string{}
				clk := newStepClock()
				var now time.Duration
				r := rand.New(rand.NewPCG(41, uint64(len(kind+mode))))
				var restore *Restore
				for round := range 4 {
					fn := aggFn(mode, p, false)
					h, err := openStateful(t, kind, t.TempDir(), clk, restore, fn)
					if err != nil {
						t.Fatal(err)
					}
					bad := &recordErrors{}
					for i := range 150 {
						if i == 70 && round%2 == 1 {
							switch f := fn.(type) {
							case *Aggregate:
								f.seen.reset()
							case *AsyncAggregate:
								f.seen.reset()
							}
						}
						if r.IntN(3) == 0 {
							d := time.Duration(1+r.IntN(4)) * 300 * time.Millisecond
							clk.advance(d)
							now += d
						}
						k, amount, user := fmt.Sprint("k", r.IntN(8)), 1+r.IntN(9), fmt.Sprint("u", r.IntN(6))
						m := model[k]
						if m == nil || now-m.last > ttl {
							m = &keyModel{seen: map[string]time.Duration{}}
							model[k] = m
						}
						m.last, m.total = now, m.total+amount
						if at, ok := m.seen[user]; !ok || now-at > ttl {
							m.users++
						}
						m.seen[user] = now
						want[k] = append(want[k], fmt.Sprintf(`{"key":%q,"total":%d,"users":%d}`, k, m.total, m.users))
						h.feed(bad, payment(k, amount, user))
						for _, rec := range h.emitted() {
							if rec.Change != runtime.ChangeUpdateBefore && rec.Change != runtime.ChangeDelete {
								got[string(rec.Key)] = append(got[string(rec.Key)], string(rec.Value))
							}
						}
					}
					if len(bad.errs) > 0 {
						t.Fatalf("bad records %v", bad.errs)
					}
					restore = snapshotRestore(t, h)
				}
				if !reflect.DeepEqual(got, want) {
					for k := range want {
						if !reflect.DeepEqual(got[k], want[k]) {
							t.Fatalf("key %s: rows\n%v\nwant\n%v", k, got[k], want[k])
						}
					}
					t.Fatalf("rows\n%v\nwant\n%v", got, want)
				}
			})
		}
	}
}
