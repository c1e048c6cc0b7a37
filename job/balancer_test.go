package job

import (
	"fmt"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestUnitBalancer: the units (2 stages x 4 units, partitions stage*4+unit)
// spread evenly per stage over the members of the job's graph, stay with
// their owners when that keeps the spread even (a unit that moves is only
// revoked in the first cooperative round), and none go to a member with
// another fingerprint, even when it leads or is as many as the job's.
func TestUnitBalancer(t *testing.T) {
	type mem struct {
		id, fp string
		owned  []int32
	}
	cases := []struct {
		name   string
		leader string // the balancing member's fingerprint
		mems   []mem
		want   map[string][]int32
	}{
		{"fresh two members", "g", []mem{{"a", "g", nil}, {"b", "g", nil}},
			map[string][]int32{"a": {0, 1, 6, 7}, "b": {2, 3, 4, 5}}},
		{"sticky: owners keep theirs", "g", []mem{{"a", "g", []int32{2, 3, 6, 7}}, {"b", "g", []int32{0, 1, 4, 5}}},
			map[string][]int32{"a": {2, 3, 6, 7}, "b": {0, 1, 4, 5}}},
		{"a joins b who holds all: b gives up half, a gets them next round", "g", []mem{{"a", "g", nil}, {"b", "g", []int32{0, 1, 2, 3, 4, 5, 6, 7}}},
			map[string][]int32{"b": {0, 1, 4, 5}}},
		{"the lost member's units go to the survivor", "g", []mem{{"b", "g", []int32{2, 3, 6, 7}}},
			map[string][]int32{"b": {0, 1, 2, 3, 4, 5, 6, 7}}},
		{"three members: 1 or 2 per stage each", "g", []mem{{"a", "g", nil}, {"b", "g", nil}, {"c", "g", nil}},
			map[string][]int32{"a": {0, 1, 7}, "b": {2, 4, 5}, "c": {3, 6}}},
		{"another graph as leader, as many members: the owners' graph wins", "h", []mem{{"b", "g", []int32{2, 3, 6, 7}}, {"c", "h", nil}},
			map[string][]int32{"b": {0, 1, 2, 3, 4, 5, 6, 7}}},
		{"another graph in the minority gets nothing", "g", []mem{{"a", "g", nil}, {"b", "g", nil}, {"c", "h", nil}},
			map[string][]int32{"a": {0, 1, 6, 7}, "b": {2, 3, 4, 5}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := &UnitBalancer{Topic: "j-units", Stages: 2, Units: 4, Fingerprint: tc.leader}
			var members []kmsg.JoinGroupResponseMember
			for _, m := range tc.mems {
				mb := &UnitBalancer{Topic: "j-units", Stages: 2, Units: 4, Fingerprint: m.fp}
				cur := map[string][]int32{}
				if m.owned != nil {
					cur["j-units"] = m.owned
				}
				jm := kmsg.NewJoinGroupResponseMember()
				jm.MemberID, jm.ProtocolMetadata = m.id, mb.JoinGroupMetadata([]string{"j-units"}, cur, 1)
				members = append(members, jm)
			}
			gb, _, err := b.MemberBalancer(members)
			if err != nil {
				t.Fatal(err)
			}
			into, err := gb.(kgo.GroupMemberBalancerOrError).BalanceOrError(map[string]int32{"j-units": 8})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string][]int32{}
			for id, topics := range into.(*kgo.BalancePlan).AsMemberIDMap() {
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
