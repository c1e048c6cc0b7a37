package job

import (
	"fmt"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// balanceMem is one member of a balancing round: its id, graph, the graph
// it read in the store, the units it runs and the partitions it owns.
type balanceMem struct {
	id, fp, store string
	running       int
	owned         []int32
	legacy        bool   // joins with the legacy protocol's bare fingerprint
	upgrades      string // the store's graph fp is a compatible upgrade of
}

// balanceRound runs one rebalance of the units topic "j-units" (stages x
// units) with the leader's fingerprint leader over mems and returns each
// member's sorted assignment (members with none left out) and the election
// each member parsed from its assignment (ParseSyncAssignment).
func balanceRound(t *testing.T, stages, units int, leader string, mems []balanceMem) (map[string][]int32, map[string]GraphElection) {
	t.Helper()
	b := &UnitBalancer{Topic: "j-units", Stages: stages, Units: units, Fingerprint: leader}
	var members []kmsg.JoinGroupResponseMember
	for _, m := range mems {
		mb := &UnitBalancer{Topic: "j-units", Stages: stages, Units: units, Fingerprint: m.fp,
			Store: func() string { return m.store }, Running: func() int { return m.running }, legacy: m.legacy,
			Upgrades: func() string { return m.upgrades }}
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
	into, err := gb.(kgo.GroupMemberBalancerOrError).BalanceOrError(map[string]int32{"j-units": int32(stages * units)})
	if err != nil {
		t.Fatal(err)
	}
	got, elected := map[string][]int32{}, map[string]GraphElection{}
	for _, a := range into.IntoSyncAssignment() {
		var e GraphElection
		parser := &UnitBalancer{Elected: func(g GraphElection) { e = g }}
		parts, err := parser.ParseSyncAssignment(a.MemberAssignment)
		if err != nil {
			t.Fatal(err)
		}
		if ps := slices.Sorted(slices.Values(parts["j-units"])); len(ps) > 0 {
			got[a.MemberID] = ps
		}
		elected[a.MemberID] = e
	}
	return got, elected
}

// TestUnitBalancer: the units (2 stages x 4 units, partitions stage*4+unit)
// spread evenly per stage over the members of the job's graph, stay with
// their owners when that keeps the spread even (a unit that moves is only
// revoked in the first cooperative round), and none go to a member with
// another graph: the graph is the one the store's HEADs record, else the
// one whose members run the most units, else the one of most members, and
// never the one of a member that holds units it does not run. Every
// member's assignment names the election.
func TestUnitBalancer(t *testing.T) {
	all := []int32{0, 1, 2, 3, 4, 5, 6, 7}
	cases := []balanceCase{
		{"fresh two members", "g", []balanceMem{{id: "a", fp: "g"}, {id: "b", fp: "g"}},
			map[string][]int32{"a": {0, 1, 6, 7}, "b": {2, 3, 4, 5}}, GraphElection{"g", ElectedByMembers}},
		{"sticky: owners keep theirs", "g", []balanceMem{{id: "a", fp: "g", store: "g", running: 4, owned: []int32{2, 3, 6, 7}}, {id: "b", fp: "g", store: "g", running: 4, owned: []int32{0, 1, 4, 5}}},
			map[string][]int32{"a": {2, 3, 6, 7}, "b": {0, 1, 4, 5}}, GraphElection{"g", ElectedByStore}},
		{"a joins b who holds all: b gives up half, a gets them next round", "g", []balanceMem{{id: "a", fp: "g"}, {id: "b", fp: "g", running: 8, owned: all}},
			map[string][]int32{"b": {0, 1, 4, 5}}, GraphElection{"g", ElectedByRunning}},
		{"the lost member's units go to the survivor", "g", []balanceMem{{id: "b", fp: "g", store: "g", owned: []int32{2, 3, 6, 7}}},
			map[string][]int32{"b": all}, GraphElection{"g", ElectedByStore}},
		{"three members: 1 or 2 per stage each", "g", []balanceMem{{id: "a", fp: "g"}, {id: "b", fp: "g"}, {id: "c", fp: "g"}},
			map[string][]int32{"a": {0, 1, 7}, "b": {2, 4, 5}, "c": {3, 6}}, GraphElection{"g", ElectedByMembers}},
		{"another graph as leader, as many members: the running graph wins", "h", []balanceMem{{id: "b", fp: "g", running: 4, owned: []int32{2, 3, 6, 7}}, {id: "c", fp: "h"}},
			map[string][]int32{"b": all}, GraphElection{"g", ElectedByRunning}},
		{"another graph in the minority gets nothing", "g", []balanceMem{{id: "a", fp: "g"}, {id: "b", fp: "g"}, {id: "c", fp: "h"}},
			map[string][]int32{"a": {0, 1, 6, 7}, "b": {2, 3, 4, 5}}, GraphElection{"g", ElectedByMembers}},
		// The wrong daemon that was alone: it holds every unit, runs none
		// (the HEADs refuse its graph), and leads; the store decides.
		{"another graph alone, the store records g: nobody gets units", "h", []balanceMem{{id: "c", fp: "h", store: "g"}},
			map[string][]int32{}, GraphElection{"g", ElectedByStore}},
		{"another graph holding every unit, the right ones join: c keeps none", "h", []balanceMem{{id: "a", fp: "g", store: "g"}, {id: "b", fp: "g", store: "g"}, {id: "c", fp: "h", store: "g", owned: all}},
			map[string][]int32{}, GraphElection{"g", ElectedByStore}}, // first cooperative round: c must revoke first
		{"... and the next round gives them all to a and b", "h", []balanceMem{{id: "a", fp: "g", store: "g"}, {id: "b", fp: "g", store: "g"}, {id: "c", fp: "h", store: "g"}},
			map[string][]int32{"a": {0, 1, 6, 7}, "b": {2, 3, 4, 5}}, GraphElection{"g", ElectedByStore}},
		{"the store outvotes more members of another graph", "h", []balanceMem{{id: "a", fp: "g", store: "g"}, {id: "c", fp: "h"}, {id: "d", fp: "h"}},
			map[string][]int32{"a": all}, GraphElection{"g", ElectedByStore}},
		{"holding units without running them does not count", "h", []balanceMem{{id: "a", fp: "g", running: 1, owned: []int32{0}}, {id: "c", fp: "h", owned: []int32{1, 2, 3, 4, 5, 6, 7}}},
			map[string][]int32{"a": {0}}, GraphElection{"g", ElectedByRunning}},
		{"a legacy member: the graph owning the most units", "h", []balanceMem{{id: "b", fp: "g", owned: []int32{2, 3, 6, 7}, legacy: true}, {id: "c", fp: "h", legacy: true}},
			map[string][]int32{"b": all}, GraphElection{"g", ElectedByOwned}},
	}
	runBalanceCases(t, cases)
}

// balanceCase is one balancing round of 2 stages x 4 units: the balancing
// member's fingerprint, the members, each member's assignment and the
// election every member's assignment must name.
type balanceCase struct {
	name   string
	leader string // the balancing member's fingerprint
	mems   []balanceMem
	want   map[string][]int32
	by     GraphElection
}

// runBalanceCases runs each case's round (balanceRound, 2 stages x 4
// units) as a subtest and checks the assignment and the election each
// member's assignment names.
func runBalanceCases(t *testing.T, cases []balanceCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, elected := balanceRound(t, 2, 4, tc.leader, tc.mems)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("assignment %v, want %v", got, tc.want)
			}
			for _, m := range tc.mems {
				if elected[m.id] != tc.by {
					t.Errorf("member %s's assignment names the election %+v, want %+v", m.id, elected[m.id], tc.by)
				}
			}
		})
	}
}

// TestUnitBalancerEvenTotals: 3 stages of 4 units over 3 members end at
// 4 units each, 1 or 2 of every stage, however the units were held
// before (fresh, all on one member, on two of them), after the
// cooperative rounds settle; and a member leaving leaves 6/6, 2 per stage.
func TestUnitBalancerEvenTotals(t *testing.T) {
	const stages, units = 3, 4
	settle := func(t *testing.T, ids []string, owned map[string][]int32) map[string][]int32 {
		t.Helper()
		for range 4 {
			var mems []balanceMem
			for _, id := range ids {
				mems = append(mems, balanceMem{id: id, fp: "g", store: "g", running: len(owned[id]), owned: owned[id]})
			}
			got, _ := balanceRound(t, stages, units, "g", mems)
			if fmt.Sprint(got) == fmt.Sprint(owned) {
				return got
			}
			owned = got
		}
		t.Fatalf("the assignment did not settle: %v", owned)
		return nil
	}
	check := func(t *testing.T, got map[string][]int32, ids []string) {
		t.Helper()
		total := stages * units
		for _, id := range ids {
			perStage := make([]int, stages)
			for _, p := range got[id] {
				perStage[int(p)/units]++
			}
			if n := len(got[id]); n < total/len(ids) || n > (total+len(ids)-1)/len(ids) {
				t.Errorf("%s holds %d units %v, want %d", id, n, got[id], total/len(ids))
			}
			for s, n := range perStage {
				if n < units/len(ids) || n > (units+len(ids)-1)/len(ids) {
					t.Errorf("%s holds %d units of stage %d (%v)", id, n, s, got[id])
				}
			}
		}
		var seen []int32
		for _, ps := range got {
			seen = append(seen, ps...)
		}
		if slices.Sort(seen); len(seen) != total || seen[0] != 0 || seen[total-1] != int32(total-1) || len(slices.Compact(seen)) != total {
			t.Errorf("units assigned %v, want each of 0..%d once", seen, total-1)
		}
	}
	all := make([]int32, stages*units)
	for i := range all {
		all[i] = int32(i)
	}
	three := []string{"a", "b", "c"}
	for _, tc := range []struct {
		name  string
		owned map[string][]int32
	}{
		{"fresh", map[string][]int32{}},
		{"a held all", map[string][]int32{"a": all}},
		{"a and b held 6 each", map[string][]int32{"a": {0, 1, 4, 5, 8, 9}, "b": {2, 3, 6, 7, 10, 11}}},
		{"the old 6/3/3", map[string][]int32{"a": {0, 1, 4, 5, 8, 9}, "b": {2, 6, 10}, "c": {3, 7, 11}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := settle(t, three, tc.owned)
			check(t, got, three)
			for _, id := range three {
				if len(got[id]) != 4 {
					t.Errorf("%s holds %d units, want 4: %v", id, len(got[id]), got)
				}
			}
			// c leaves: a and b hold 6 each, 2 of every stage, and keep
			// the units they held.
			left := settle(t, []string{"a", "b"}, map[string][]int32{"a": got["a"], "b": got["b"]})
			check(t, left, []string{"a", "b"})
			for _, id := range []string{"a", "b"} {
				for _, p := range got[id] {
					if !slices.Contains(left[id], p) {
						t.Errorf("%s lost unit %d when c left: before %v, after %v", id, p, got[id], left[id])
					}
				}
			}
		})
	}
}
