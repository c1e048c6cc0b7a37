package job

import (
	"cmp"
	"encoding/json"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// UnitsProtocol is the group protocol name of UnitBalancer; a member
// offers it first and LegacyUnitsProtocol second.
const UnitsProtocol = "kstreamd-units-v2"

// LegacyUnitsProtocol is the protocol of daemons before the graph
// election (join user data: the bare fingerprint): a member offers it
// second, so a group with such a daemon still forms (a rolling upgrade);
// the group then elects by the units its members own.
const LegacyUnitsProtocol = "kstreamd-units-v1"

// Election reasons (GraphElection.By): what decided the graph a job runs.
const (
	// ElectedByStore: the graph the store's newest HEADs record (a member
	// read it before joining).
	ElectedByStore = "store"
	// ElectedByRunning: no member read a HEAD; the graph whose members
	// run the most units.
	ElectedByRunning = "running units"
	// ElectedByMembers: no HEAD and no running unit (a fresh job); the
	// graph of the most members, ties the group leader's.
	ElectedByMembers = "members"
	// ElectedByOwned: a legacy member is in the group; the graph whose
	// members own the most units, then of the most members.
	ElectedByOwned = "owned units"
)

// GraphElection is the graph a cluster-mode job runs, as the group
// leader's UnitBalancer decided it at the last rebalance and sent to every
// member in its assignment's user data: Fingerprint (graph.Fingerprint),
// By what decided it (ElectedByStore, ...). Only members whose graph is
// Fingerprint get units.
type GraphElection struct {
	Fingerprint string `json:"fingerprint"`
	By          string `json:"by"`
}

// unitsJoin is the user data of a member's join metadata (UnitsProtocol).
type unitsJoin struct {
	// Fingerprint is the member's graph; Store the graph the store's
	// newest HEADs record as the member read them ("" none); Running how
	// many units it runs (claimed and restored), not merely holds.
	Fingerprint string `json:"fingerprint"`
	Store       string `json:"store,omitempty"`
	Running     int    `json:"running"`
	// Upgrades is the store's graph this member's graph is a
	// state-compatible upgrade of (upgradeElection), "" for none.
	Upgrades string `json:"upgrades,omitempty"`
}

// parseUnitsJoin reads a member's join user data: the JSON unitsJoin of
// the current protocol, or a legacy member's bare fingerprint (legacy
// true).
func parseUnitsJoin(data []byte) (j unitsJoin, legacy bool) {
	if err := json.Unmarshal(data, &j); err != nil || j.Fingerprint == "" {
		return unitsJoin{Fingerprint: string(data)}, true
	}
	return j, false
}

// UnitBalancer is the kgo.GroupBalancer of cluster mode (docs/scale-out.md,
// "Assignment"): it hands out the partitions of the units topic (partition
// stage*Units+index is unit (stage, index)) cooperatively (KIP-429), sticky
// (a unit stays with its owner while that keeps the spread even) and evenly
// per stage and in total (each eligible member holds floor or ceil of
// Units/members of every stage, and floor or ceil of Stages*Units/members
// in all: the one-more units of each stage go to the members holding the
// fewest so far). The join metadata's user data carries the member's graph
// fingerprint, the graph the store's HEADs record as it read them, and the
// units it runs. The job's graph is elected (GraphElection), in this
// order: the graph the store's HEADs record (reported by the most
// members), else the graph whose members run the most units, else the one
// of most members (ties: the leader's). It is never decided by how many
// units a member holds without running them. A member whose graph is not
// the elected one gets no units; every member learns the election from its
// assignment's user data (Elected).
type UnitBalancer struct {
	// Topic is the units topic; Stages and Units its shape.
	Topic         string
	Stages, Units int
	// Fingerprint is this member's graph fingerprint.
	Fingerprint string
	// Store, if not nil, returns the graph fingerprint the store's newest
	// HEADs record ("" when the store holds none), sent when joining.
	Store func() string
	// Running, if not nil, returns how many units this member runs, sent
	// when joining.
	Running func() int
	// Upgrades, if not nil, returns the store's graph this member's graph
	// is a state-compatible upgrade of ("" none), sent when joining
	// (upgradeElection).
	Upgrades func() string
	// Elected, if not nil, is called with the election of every
	// assignment this member receives from a leader that sends one.
	Elected func(GraphElection)
	// Owned, if not nil, returns the units-topic partitions this member
	// still runs; JoinGroupMetadata reports them as owned besides the
	// client's current assignment, so that a member whose session the
	// client gave up during a broker outage, but whose units kept running,
	// gets them back (sticky) when it rejoins.
	Owned func() []int32
	// legacy makes this the LegacyUnitsProtocol balancer.
	legacy bool
}

// Legacy returns b as the LegacyUnitsProtocol balancer: the same
// assignment, the bare fingerprint as join user data. Offer it after b
// (kgo.Balancers(b, b.Legacy())).
func (b *UnitBalancer) Legacy() *UnitBalancer {
	l := *b
	l.legacy = true
	return &l
}

// ProtocolName implements kgo.GroupBalancer.
func (b *UnitBalancer) ProtocolName() string {
	if b.legacy {
		return LegacyUnitsProtocol
	}
	return UnitsProtocol
}

// IsCooperative implements kgo.GroupBalancer: true.
func (*UnitBalancer) IsCooperative() bool { return true }

// JoinGroupMetadata implements kgo.GroupBalancer: a consumer member
// metadata with the owned partitions and unitsJoin as user data (the bare
// fingerprint for the legacy protocol).
func (b *UnitBalancer) JoinGroupMetadata(interests []string, current map[string][]int32, generation int32) []byte {
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Version = 3
	meta.Topics = interests
	meta.Generation = generation
	if b.legacy {
		meta.UserData = []byte(b.Fingerprint)
	} else {
		j := unitsJoin{Fingerprint: b.Fingerprint}
		if b.Store != nil {
			j.Store = b.Store()
		}
		if b.Running != nil {
			j.Running = b.Running()
		}
		if b.Upgrades != nil {
			j.Upgrades = b.Upgrades()
		}
		meta.UserData, _ = json.Marshal(j) // plain strings and an int: never fails
	}
	if b.Owned != nil {
		if extra := b.Owned(); len(extra) > 0 {
			current = maps.Clone(current)
			if current == nil {
				current = map[string][]int32{}
			}
			parts := slices.Clone(current[b.Topic])
			for _, p := range extra {
				if !slices.Contains(parts, p) {
					parts = append(parts, p)
				}
			}
			current[b.Topic] = parts
		}
	}
	for topic, parts := range current {
		op := kmsg.NewConsumerMemberMetadataOwnedPartition()
		op.Topic, op.Partitions = topic, slices.Sorted(slices.Values(parts))
		meta.OwnedPartitions = append(meta.OwnedPartitions, op)
	}
	slices.SortFunc(meta.OwnedPartitions, func(a, c kmsg.ConsumerMemberMetadataOwnedPartition) int { return cmp.Compare(a.Topic, c.Topic) })
	return meta.AppendTo(nil)
}

// ParseSyncAssignment implements kgo.GroupBalancer: the assigned
// partitions; the election in the user data, if any, goes to Elected.
func (b *UnitBalancer) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	parts, err := kgo.ParseConsumerSyncAssignment(assignment)
	if err != nil || b.Elected == nil {
		return parts, err
	}
	var a kmsg.ConsumerMemberAssignment
	if a.ReadFrom(assignment) == nil && len(a.UserData) > 0 {
		var e GraphElection
		if json.Unmarshal(a.UserData, &e) == nil && e.Fingerprint != "" {
			b.Elected(e)
		}
	}
	return parts, nil
}

// MemberBalancer implements kgo.GroupBalancer.
func (b *UnitBalancer) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	cb, err := kgo.NewConsumerBalancer(b, members)
	if err != nil {
		return nil, nil, err
	}
	return cb, cb.MemberTopics(), nil
}

// balanceMember is one member as the leader's Balance sees it.
type balanceMember struct {
	m     *kmsg.JoinGroupResponseMember
	join  unitsJoin
	owned map[int32]bool
}

// elect returns the graph the job runs (UnitBalancer's doc): legacy is
// whether a member sent the bare fingerprint.
func (b *UnitBalancer) elect(all []balanceMember, legacy bool) GraphElection {
	store, running, owned, votes := map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}
	for _, m := range all {
		if m.join.Store != "" {
			store[m.join.Store]++
		}
		running[m.join.Fingerprint] += m.join.Running
		owned[m.join.Fingerprint] += len(m.owned)
		votes[m.join.Fingerprint]++
	}
	best := func(score map[string]int, tie func(a, c string) int) string {
		var want string
		for _, fp := range slices.Sorted(maps.Keys(score)) {
			if want == "" || cmp.Or(cmp.Compare(score[fp], score[want]), tie(fp, want)) > 0 {
				want = fp
			}
		}
		return want
	}
	leaderFirst := func(a, c string) int {
		switch {
		case a == b.Fingerprint:
			return 1
		case c == b.Fingerprint:
			return -1
		}
		return 0
	}
	byVotes := func(a, c string) int { return cmp.Or(cmp.Compare(votes[a], votes[c]), leaderFirst(a, c)) }
	switch {
	case legacy:
		return GraphElection{Fingerprint: best(owned, byVotes), By: ElectedByOwned}
	case len(store) > 0:
		return upgradeElection(all, GraphElection{Fingerprint: best(store, byVotes), By: ElectedByStore}, b.Fingerprint)
	}
	if fp := best(running, byVotes); running[fp] > 0 {
		return GraphElection{Fingerprint: fp, By: ElectedByRunning}
	}
	return GraphElection{Fingerprint: best(votes, leaderFirst), By: ElectedByMembers}
}

// Balance implements kgo.ConsumerBalancerBalance.
func (b *UnitBalancer) Balance(cb *kgo.ConsumerBalancer, _ map[string]int32) kgo.IntoSyncAssignment {
	var all []balanceMember
	legacy := false
	gen := map[int]int32{} // join metadata generation by index in all
	cb.EachMember(func(m *kmsg.JoinGroupResponseMember, meta *kmsg.ConsumerMemberMetadata) {
		mb := balanceMember{m: m, owned: map[int32]bool{}}
		var old bool
		mb.join, old = parseUnitsJoin(meta.UserData)
		legacy = legacy || old
		for _, op := range meta.OwnedPartitions {
			if op.Topic == b.Topic {
				for _, p := range op.Partitions {
					mb.owned[p] = true
				}
			}
		}
		gen[len(all)] = meta.Generation
		all = append(all, mb)
	})
	// Two members claiming one unit (a member whose lost session's units
	// kept running, UnitBalancer.Owned, and the member the group gave
	// them meanwhile): the claim of the newest generation stands, as in
	// Kafka's sticky assignor; the older one's is dropped.
	newest := map[int32]int32{}
	for i, m := range all {
		for p := range m.owned {
			if g, ok := newest[p]; !ok || gen[i] > g {
				newest[p] = gen[i]
			}
		}
	}
	for i, m := range all {
		for p := range m.owned {
			if gen[i] < newest[p] {
				delete(m.owned, p)
			}
		}
	}
	plan := cb.NewPlan()
	elected := b.elect(all, legacy)
	var elig []balanceMember
	for _, m := range all {
		if m.join.Fingerprint == elected.Fingerprint {
			elig = append(elig, m)
		}
	}
	slices.SortFunc(elig, func(a, c balanceMember) int { return cmp.Compare(memberKey(a.m), memberKey(c.m)) })
	b.assign(plan, elig)
	plan.AdjustCooperative(cb)
	data, _ := json.Marshal(elected) // two strings: never fails
	return &electedPlan{plan: plan, data: data}
}

// assign adds the units to plan over elig (sorted by memberKey): per stage
// each member gets floor(Units/n), and the Units%n one-more units of the
// stage go to the members with the fewest one-more units so far (so the
// totals differ by at most one), then to those owning the most of the
// stage (sticky), then rotated by stage; a unit stays with its owner while
// its owner is below its cap, the others fill the members below theirs.
func (b *UnitBalancer) assign(plan *kgo.BalancePlan, elig []balanceMember) {
	n := len(elig)
	if n == 0 {
		return
	}
	extras := make([]int, n)
	taken := map[int32]bool{}
	for s := range b.Stages {
		lo := int32(s * b.Units)
		count := make([]int, n)
		for i, m := range elig {
			for p := range m.owned {
				if p >= lo && p < lo+int32(b.Units) {
					count[i]++
				}
			}
		}
		order := make([]int, n)
		for i := range order {
			order[i] = i
		}
		rot := func(i int) int { return (i - s%n + n) % n }
		slices.SortStableFunc(order, func(a, c int) int {
			return cmp.Or(cmp.Compare(extras[a], extras[c]), cmp.Compare(count[c], count[a]), cmp.Compare(rot(a), rot(c)))
		})
		caps := make([]int, n)
		for k, i := range order {
			caps[i] = b.Units / n
			if k < b.Units%n {
				caps[i]++
				extras[i]++
			}
		}
		got := make([]int, n)
		var free []int32
		for u := range b.Units {
			p := lo + int32(u)
			kept := false
			for i, m := range elig {
				if m.owned[p] && !taken[p] && got[i] < caps[i] {
					plan.AddPartition(m.m, b.Topic, p)
					taken[p], got[i], kept = true, got[i]+1, true
					break
				}
			}
			if !kept {
				free = append(free, p)
			}
		}
		for _, p := range free {
			for _, i := range order {
				if got[i] < caps[i] {
					plan.AddPartition(elig[i].m, b.Topic, p)
					taken[p] = true
					got[i]++
					break
				}
			}
		}
	}
}

// electedPlan is a balance plan whose every member assignment carries the
// election (GraphElection as JSON) as user data.
type electedPlan struct {
	plan *kgo.BalancePlan
	data []byte
}

// IntoSyncAssignment implements kgo.IntoSyncAssignment.
func (p *electedPlan) IntoSyncAssignment() []kmsg.SyncGroupRequestGroupAssignment {
	out := p.plan.IntoSyncAssignment()
	for i := range out {
		var a kmsg.ConsumerMemberAssignment
		if a.ReadFrom(out[i].MemberAssignment) != nil {
			continue // kgo's own encoding: does not happen
		}
		a.UserData = p.data
		out[i].MemberAssignment = a.AppendTo(nil)
	}
	return out
}

// memberKey orders members by instance id (static membership), else
// member id.
func memberKey(m *kmsg.JoinGroupResponseMember) string {
	if m.InstanceID != nil {
		return *m.InstanceID
	}
	return m.MemberID
}
