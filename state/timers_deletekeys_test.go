package state

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// TestTimerQueueDeleteKeys: on both backends, DeleteKeys removes every
// timer (both domains, several per key) of the keys its predicate selects
// and returns how many: the queue and the stored entries keep exactly the
// others, which still fire in order; a deleted timer never fires.
func TestTimerQueueDeleteKeys(t *testing.T) {
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			b := open(t, testConfig(t, kind))
			q := must1(NewTimerQueue(b))(t)
			for i := range 20 {
				key := []byte(fmt.Sprintf("%s-%02d", []string{"a", "b"}[i%2], i))
				for ts := range int64(3) {
					must1(q.Register(EventTime, key, 100+ts))(t)
				}
				must1(q.Register(ProcessingTime, key, 50))(t)
			}
			n, err := q.DeleteKeys(func(key []byte) bool { return strings.HasPrefix(string(key), "a-") })
			if err != nil {
				t.Fatal(err)
			}
			if n != 40 { // 10 keys x (3 event + 1 processing)
				t.Fatalf("DeleteKeys removed %d timers, want 40", n)
			}
			if e, p, s := q.Len(EventTime), q.Len(ProcessingTime), storedEntries(t, b); e != 30 || p != 10 || s != 40 {
				t.Fatalf("left %d event, %d processing timers, %d entries; want 30, 10, 40", e, p, s)
			}
			for _, d := range []TimeDomain{EventTime, ProcessingTime} {
				fired, last := 0, int64(math.MinInt64)
				for {
					tm, ok, err := q.PopDue(d, math.MaxInt64)
					if err != nil {
						t.Fatal(err)
					}
					if !ok {
						break
					}
					if !strings.HasPrefix(string(tm.Key), "b-") || tm.Timestamp < last {
						t.Fatalf("%v timer %s@%d fired (after %d)", d, tm.Key, tm.Timestamp, last)
					}
					fired, last = fired+1, tm.Timestamp
				}
				if want := map[TimeDomain]int{EventTime: 30, ProcessingTime: 10}[d]; fired != want {
					t.Fatalf("%v: %d fired, want %d", d, fired, want)
				}
			}
			if s := storedEntries(t, b); s != 0 {
				t.Fatalf("%d entries left after firing everything", s)
			}
		})
	}
}
