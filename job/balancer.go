package job

import (
	"cmp"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// UnitsProtocol is the group protocol name of UnitBalancer.
const UnitsProtocol = "kstreamd-units-v1"

// UnitBalancer is the kgo.GroupBalancer of cluster mode (docs/scale-out.md,
// "Assignment"): it hands out the partitions of the units topic (partition
// stage*Units+index is unit (stage, index)) cooperatively (KIP-429), sticky
// (a unit stays with its owner while that keeps the spread even) and evenly
// per stage (each eligible member holds floor or ceil of Units/members of
// every stage). The join metadata's user data is the graph fingerprint; a
// member whose fingerprint is not the job's gets no units: the job's is the
// one whose members own the most units, then the one of most members
// (ties: the leader's).
type UnitBalancer struct {
	// Topic is the units topic; Stages and Units its shape.
	Topic         string
	Stages, Units int
	// Fingerprint is this member's graph fingerprint.
	Fingerprint string
	// Owned, if not nil, returns the units-topic partitions this member
	// still runs; JoinGroupMetadata reports them as owned besides the
	// client's current assignment, so that a member whose session the
	// client gave up during a broker outage, but whose units kept running,
	// gets them back (sticky) when it rejoins.
	Owned func() []int32
}

// ProtocolName implements kgo.GroupBalancer.
func (*UnitBalancer) ProtocolName() string { return UnitsProtocol }

// IsCooperative implements kgo.GroupBalancer: true.
func (*UnitBalancer) IsCooperative() bool { return true }

// JoinGroupMetadata implements kgo.GroupBalancer: a consumer member
// metadata with the owned partitions and the fingerprint as user data.
func (b *UnitBalancer) JoinGroupMetadata(interests []string, current map[string][]int32, generation int32) []byte {
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Version = 3
	meta.Topics = interests
	meta.Generation = generation
	meta.UserData = []byte(b.Fingerprint)
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

// ParseSyncAssignment implements kgo.GroupBalancer.
func (*UnitBalancer) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	return kgo.ParseConsumerSyncAssignment(assignment)
}

// MemberBalancer implements kgo.GroupBalancer.
func (b *UnitBalancer) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	cb, err := kgo.NewConsumerBalancer(b, members)
	if err != nil {
		return nil, nil, err
	}
	return cb, cb.MemberTopics(), nil
}

// Balance implements kgo.ConsumerBalancerBalance.
func (b *UnitBalancer) Balance(cb *kgo.ConsumerBalancer, _ map[string]int32) kgo.IntoSyncAssignment {
	type member struct {
		m     *kmsg.JoinGroupResponseMember
		fp    string
		owned map[int32]bool
	}
	var all []member
	gen := map[int]int32{} // join metadata generation by index in all
	cb.EachMember(func(m *kmsg.JoinGroupResponseMember, meta *kmsg.ConsumerMemberMetadata) {
		mb := member{m: m, fp: string(meta.UserData), owned: map[int32]bool{}}
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
	// The fingerprint the job runs: the one whose members own the most
	// units (a daemon with another graph joining a running job must not
	// take it over, even when it is as many), then the one of most
	// members, then the leader's (this member's).
	owned, votes := map[string]int{}, map[string]int{}
	for _, m := range all {
		owned[m.fp] += len(m.owned)
		votes[m.fp]++
	}
	want := b.Fingerprint
	for fp := range votes {
		if better := cmp.Or(cmp.Compare(owned[fp], owned[want]), cmp.Compare(votes[fp], votes[want])); better > 0 {
			want = fp
		}
	}
	var elig []member
	for _, m := range all {
		if m.fp == want {
			elig = append(elig, m)
		}
	}
	if len(elig) == 0 {
		return plan
	}
	slices.SortFunc(elig, func(a, c member) int { return cmp.Compare(memberKey(a.m), memberKey(c.m)) })
	taken := map[int32]bool{}
	for s := range b.Stages {
		lo := int32(s * b.Units)
		count := make([]int, len(elig))
		for i, m := range elig {
			for p := range m.owned {
				if p >= lo && p < lo+int32(b.Units) {
					count[i]++
				}
			}
		}
		// Who gets one more than floor: the members that own the most
		// (sticky), rotated by stage among equals so extras spread.
		order := make([]int, len(elig))
		for i := range order {
			order[i] = (i + s) % len(elig)
		}
		slices.SortStableFunc(order, func(a, c int) int { return cmp.Compare(count[c], count[a]) })
		caps := make([]int, len(elig))
		for k, i := range order {
			caps[i] = b.Units / len(elig)
			if k < b.Units%len(elig) {
				caps[i]++
			}
		}
		got := make([]int, len(elig))
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
	plan.AdjustCooperative(cb)
	return plan
}

// memberKey orders members by instance id (static membership), else
// member id.
func memberKey(m *kmsg.JoinGroupResponseMember) string {
	if m.InstanceID != nil {
		return *m.InstanceID
	}
	return m.MemberID
}
