package job

import "testing"

// TestUnitBalancerUpgrade: during a rolling upgrade the graph of the
// members that report a state-compatible upgrade of the store's graph wins
// (ElectedByUpgrade), so units run the new graph only and never the old
// graph restoring the new one's HEADs; several upgrades: the one of most
// members, ties the leader's; an upgrade of another graph than the store's
// counts for nothing; once the HEADs record the new graph, members
// reading it elect it by the store.
func TestUnitBalancerUpgrade(t *testing.T) {
	all := []int32{0, 1, 2, 3, 4, 5, 6, 7}
	cases := []balanceCase{
		{"the first upgraded daemon takes every unit", "g1", []balanceMem{
			{id: "a", fp: "g2", store: "g1", upgrades: "g1"}, {id: "b", fp: "g1", store: "g1"}, {id: "c", fp: "g1", store: "g1"}},
			map[string][]int32{"a": all}, GraphElection{"g2", ElectedByUpgrade}},
		{"the second joins it; the store's graph has the most votes still", "g1", []balanceMem{
			{id: "a", fp: "g2", store: "g1", upgrades: "g1"}, {id: "b", fp: "g2", store: "g2"}, {id: "c", fp: "g1", store: "g1"}},
			map[string][]int32{"a": {0, 1, 6, 7}, "b": {2, 3, 4, 5}}, GraphElection{"g2", ElectedByUpgrade}},
		{"all upgraded: the store decides", "g2", []balanceMem{
			{id: "a", fp: "g2", store: "g1", upgrades: "g1"}, {id: "b", fp: "g2", store: "g2"}, {id: "c", fp: "g2", store: "g2"}},
			map[string][]int32{"a": {0, 1, 7}, "b": {2, 4, 5}, "c": {3, 6}}, GraphElection{"g2", ElectedByStore}},
		{"two upgrades: the one of most members", "g1", []balanceMem{
			{id: "a", fp: "g2", store: "g1", upgrades: "g1"}, {id: "b", fp: "g3", store: "g1", upgrades: "g1"}, {id: "c", fp: "g3", store: "g1", upgrades: "g1"}},
			map[string][]int32{"b": {0, 1, 6, 7}, "c": {2, 3, 4, 5}}, GraphElection{"g3", ElectedByUpgrade}},
		{"two upgrades, as many members: the leader's", "g2", []balanceMem{
			{id: "a", fp: "g2", store: "g1", upgrades: "g1"}, {id: "b", fp: "g3", store: "g1", upgrades: "g1"}},
			map[string][]int32{"a": all}, GraphElection{"g2", ElectedByUpgrade}},
		{"an upgrade of another graph than the store's counts for nothing", "g1", []balanceMem{
			{id: "a", fp: "g2", store: "g1", upgrades: "g0"}, {id: "b", fp: "g1", store: "g1"}},
			map[string][]int32{"b": all}, GraphElection{"g1", ElectedByStore}},
	}
	runBalanceCases(t, cases)
}
