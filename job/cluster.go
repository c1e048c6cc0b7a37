package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/source"
)

// ErrUnitsChanged is wrapped by EnsureRepartitionTopics' error when a
// repartition topic exists with another partition count than the units
// asked for, and by RunMember's when the store's HEAD chains were written
// with another unit count: the unit count is fixed by the first start.
var ErrUnitsChanged = errors.New("job: the number of units cannot change")

// EnsureRepartitionTopics creates every repartition topic of st that does
// not exist, with st.Units partitions and infinite retention
// (retention.ms=-1: only the purge up to the consumer's committed HEAD
// deletes data, docs/scale-out.md invariant 5), and refuses a topic that
// exists with another partition count, naming both numbers (the error wraps
// ErrUnitsChanged).
func EnsureRepartitionTopics(ctx context.Context, opts []kgo.Opt, st *graph.Stages) error {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("job: kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	retention := "-1"
	for _, r := range st.Repartitions {
		resp, err := adm.CreateTopic(ctx, int32(r.Partitions), -1, map[string]*string{"retention.ms": &retention}, r.Topic)
		if err == nil {
			err = resp.Err
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("job: create repartition topic %s: %w", r.Topic, err)
		}
		details, err := adm.ListTopics(ctx, r.Topic)
		if err != nil {
			return fmt.Errorf("job: describe repartition topic %s: %w", r.Topic, err)
		}
		d, ok := details[r.Topic]
		if !ok || d.Err != nil {
			return fmt.Errorf("job: describe repartition topic %s: %v", r.Topic, d.Err)
		}
		if n := len(d.Partitions); n != r.Partitions {
			return fmt.Errorf("job: repartition topic %s has %d partitions, cluster.units is %d: %w", r.Topic, n, r.Partitions, ErrUnitsChanged)
		}
	}
	return nil
}

// purgeTarget is one repartition partition a unit reads: its source
// vertex, topic and partition (the unit's index).
type purgeTarget struct {
	source, topic string
	partition     int32
}

// repartitionPurge deletes, after each committed checkpoint of a unit, the
// records of the unit's input repartition partitions the checkpoint has
// read (docs/scale-out.md invariant 5): DeleteRecords up to the offset the
// HEAD-named checkpoint records, never further, so a later owner, which
// restores that checkpoint or a newer one, never needs them. A zombie
// purges nothing: the coordinator calls committed only after its HEAD
// create succeeded. The DeleteRecords requests run on their own goroutine
// (run), newest offsets first, so a slow broker never holds the
// coordinator.
type repartitionPurge struct {
	targets []purgeTarget
	logger  *slog.Logger
	// opts are the Kafka client options of run's client.
	opts []kgo.Opt
	// purged, if not nil, is told each partition's new log start offset.
	purged func(topic string, partition int32, offset int64)

	next chan kadm.Offsets // capacity 1: the newest offsets to purge to
	done map[string]int64  // per "topic/partition", the offset purged to (run's goroutine only)
}

// purgeTargets returns the repartition partitions the unit reads in g.
func purgeTargets(g *graph.Graph, unit *Unit) []purgeTarget {
	if unit == nil {
		return nil
	}
	var out []purgeTarget
	for _, s := range g.Sources {
		if s.Repartition {
			out = append(out, purgeTarget{source: s.Name, topic: s.Topic, partition: int32(unit.Index)})
		}
	}
	return out
}

// offsets returns the offset checkpoint m records for each target: the
// next offset its source reads from the partition. A partition the
// checkpoint did not read is left out.
func (p *repartitionPurge) offsets(m *checkpoint.Metadata) (kadm.Offsets, error) {
	out := kadm.Offsets{}
	for _, t := range p.targets {
		om, ok := m.Operators[t.source]
		if !ok {
			continue
		}
		states, err := checkpoint.DecodeTaskStates(om)
		if err != nil {
			return nil, fmt.Errorf("job: purge %s: %w", t.topic, err)
		}
		for _, ts := range states {
			for _, e := range ts.Operator[source.SplitsState].Entries {
				var sp source.Split
				if err := json.Unmarshal(e, &sp); err != nil {
					return nil, fmt.Errorf("job: purge %s: split %s: %w", t.topic, e, err)
				}
				if sp.Topic == t.topic && sp.Partition == t.partition && sp.Offset > 0 {
					out.Add(kadm.Offset{Topic: sp.Topic, Partition: sp.Partition, At: sp.Offset, LeaderEpoch: -1})
				}
			}
		}
	}
	return out, nil
}

// committed is CoordinatorConfig.Committed: it hands checkpoint m's offsets
// to run, replacing offsets not purged yet (the newest checkpoint's are the
// ones that count). It never blocks.
func (p *repartitionPurge) committed(_ int64, m *checkpoint.Metadata) {
	o, err := p.offsets(m)
	if err != nil {
		p.logger.Warn("repartition purge skipped", "checkpoint_id", m.CheckpointID, "err", err)
		return
	}
	if len(o) == 0 {
		return
	}
	select {
	case <-p.next: // drop the older offsets not purged yet
	default:
	}
	p.next <- o
}

// run issues the DeleteRecords requests until ctx ends. A failure is
// logged and retried with the next checkpoint's offsets: the records stay
// (infinite retention), nothing is lost.
func (p *repartitionPurge) run(ctx context.Context) {
	cl, err := kgo.NewClient(p.opts...)
	if err != nil {
		p.logger.Warn("repartition purge off: no Kafka client", "err", err)
		return
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for {
		var o kadm.Offsets
		select {
		case <-ctx.Done():
			return
		case o = <-p.next:
		}
		o.Each(func(off kadm.Offset) {
			if off.At <= p.done[off.Topic+"/"+strconv.Itoa(int(off.Partition))] {
				o.Delete(off.Topic, off.Partition)
			}
		})
		if len(o) == 0 {
			continue
		}
		resp, err := adm.DeleteRecords(ctx, o)
		if err != nil {
			p.logger.Warn("repartition purge failed; retried after the next checkpoint", "err", err)
			continue
		}
		for _, r := range resp.Sorted() {
			if r.Err != nil {
				p.logger.Warn("repartition purge failed; retried after the next checkpoint", "topic", r.Topic, "partition", r.Partition, "err", r.Err)
				continue
			}
			p.done[r.Topic+"/"+strconv.Itoa(int(r.Partition))] = r.LowWatermark
			if p.purged != nil {
				p.purged(r.Topic, r.Partition, r.LowWatermark)
			}
		}
	}
}
