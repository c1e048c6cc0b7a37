package job

import (
	"fmt"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestUnitBalancerOwnedAfterLoss: a member whose group session was lost
// but whose units kept running reports them as owned through
// UnitBalancer.Owned (the client's own assignment is empty after the
// loss) and gets them back; when another member claims the same units
// from a newer generation (the group gave them to it meanwhile), the
// newer claim stands and the lost member's older one is dropped.
func TestUnitBalancerOwnedAfterLoss(t *testing.T) {
	type mem struct {
		id    string
		owned []int32 // reported through Owned, the client's current being empty
		gen   int32
	}
	for _, tc := range []struct {
		name string
		mems []mem
		want map[string][]int32
	}{
		{"the lost member's running units come back to it", []mem{{"a", []int32{0, 1, 6, 7}, 3}, {"b", []int32{2, 3, 4, 5}, 3}},
			map[string][]int32{"a": {0, 1, 6, 7}, "b": {2, 3, 4, 5}}},
		// b keeps two per stage of its own claim; a's older claim of 0, 1,
		// 6, 7 is dropped (kept, a would keep them and b would give them
		// up), and a gets the rest in the next cooperative round.
		{"a newer generation's claim wins", []mem{{"a", []int32{0, 1, 6, 7}, 3}, {"b", []int32{0, 1, 2, 3, 4, 5, 6, 7}, 5}},
			map[string][]int32{"b": {0, 1, 4, 5}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var members []kmsg.JoinGroupResponseMember
			for _, m := range tc.mems {
				mb := &UnitBalancer{Topic: "j-units", Stages: 2, Units: 4, Fingerprint: "g", Owned: func() []int32 { return m.owned }}
				jm := kmsg.NewJoinGroupResponseMember()
				jm.MemberID, jm.ProtocolMetadata = m.id, mb.JoinGroupMetadata([]string{"j-units"}, nil, m.gen)
				members = append(members, jm)
			}
			b := &UnitBalancer{Topic: "j-units", Stages: 2, Units: 4, Fingerprint: "g"}
			gb, _, err := b.MemberBalancer(members)
			if err != nil {
				t.Fatal(err)
			}
			into, err := gb.(kgo.GroupMemberBalancerOrError).BalanceOrError(map[string]int32{"j-units": 8})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string][]int32{}
			for id, topics := range into.(*electedPlan).plan.AsMemberIDMap() {
				if ps := slices.Sorted(slices.Values(topics["j-units"])); len(ps) > 0 {
					got[id] = ps
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("assignment %v, want %v", got, tc.want)
			}
		})
	}
}
