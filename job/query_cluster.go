package job

import (
	"context"
	"fmt"
	"slices"

	"github.com/kstreamd/kstreamd/state/keygroup"
)

// NotOwnerError is returned by Member.QueryState when the unit owning the
// key's key group runs on another member: Owner is that member's id
// (group.instance.id, else Kafka's member id) and Host the host its Kafka
// client connects from, as the group coordinator reports them; both are
// empty when the group could not be described or no member holds the unit
// (a rebalance). The member's API address is not known to the group, so
// the HTTP API answers 409 with these rather than redirecting.
type NotOwnerError struct {
	Unit        UnitID
	Owner, Host string
}

// Error implements error.
func (e *NotOwnerError) Error() string {
	if e.Owner == "" {
		return fmt.Sprintf("job: stage %d unit %d owns the key and does not run on this member; its owner is not known now (rebalancing?)", e.Unit.Stage, e.Unit.Unit)
	}
	return fmt.Sprintf("job: stage %d unit %d owns the key and runs on member %s (host %s): ask that member", e.Unit.Stage, e.Unit.Unit, e.Owner, e.Host)
}

// QueryState is Job.QueryState for a cluster-mode member: it finds the
// stage running operator (by name, else uid) and the unit of that stage
// whose key groups hold key's, and asks that unit's job when it runs on
// this member. The answer names the unit. It returns a *NotOwnerError when
// another member holds the unit, an error wrapping ErrNotRunning when the
// unit is assigned here but not running yet, a *UnknownOperatorError for
// an operator no stage has with keyed state, and Job.QueryState's errors.
func (m *Member) QueryState(ctx context.Context, operator, stateName string, key []byte) (StateAnswer, error) {
	st := m.stages
	stage := -1
	var keyed []string
	notKeyed := false
	for _, byUID := range []bool{false, true} {
		for _, s := range st.Stages {
			for _, o := range s.Graph.Operators {
				if !byUID && o.Name == operator || byUID && s.Graph.UID(o.Name) == operator {
					if !o.Factory.Traits.Keyed {
						notKeyed = true
						continue
					}
					if stage < 0 {
						stage = s.Index
					}
				}
			}
		}
	}
	if stage < 0 {
		for _, s := range st.Stages {
			for _, o := range s.Graph.Operators {
				if n := keyedName(o.Name, s.Graph.UID(o.Name)); o.Factory.Traits.Keyed && !slices.Contains(keyed, n) {
					keyed = append(keyed, n)
				}
			}
		}
		return StateAnswer{}, &UnknownOperatorError{Operator: operator, NotKeyed: notKeyed, Keyed: keyed}
	}
	kg := keygroup.Assign(key, st.MaxParallelism)
	unit := 0
	for u := range st.Units {
		if keygroup.RangeFor(st.MaxParallelism, st.Units, u).Contains(kg) {
			unit = u
			break
		}
	}
	id := UnitID{Stage: stage, Unit: unit}
	p := int32(stage*st.Units + unit)
	m.mu.Lock()
	r := m.running[p]
	m.mu.Unlock()
	if r != nil {
		j := r.current()
		if j == nil {
			return StateAnswer{}, fmt.Errorf("%w: stage %d unit %d is starting on this member", ErrNotRunning, stage, unit)
		}
		ans, err := j.QueryState(ctx, operator, stateName, key)
		if err == nil {
			ans.Unit = &id
		}
		return ans, err
	}
	e := &NotOwnerError{Unit: id}
	for _, mu := range m.Status(ctx).Members {
		if slices.Contains(mu.Units, id) {
			e.Owner, e.Host = mu.Member, mu.Host
		}
	}
	return StateAnswer{}, e
}

// keyedName is how an UnknownOperatorError lists the operator called
// name with uid uid: "name", or "name (uid u)" when they differ.
func keyedName(name, uid string) string {
	if uid != name {
		return fmt.Sprintf("%s (uid %s)", name, uid)
	}
	return name
}
