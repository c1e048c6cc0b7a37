package job

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/graph"
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
