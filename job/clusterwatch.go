package job

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/graph"
)

// DefaultOutputWatchInterval is how often a member measures its job's
// output partitions when MemberConfig.OutputWatchInterval is 0.
const DefaultOutputWatchInterval = 5 * time.Second

// outputTopics returns the Kafka topics the job's units write
// transactionally or not: every user Kafka sink's topic and every
// repartition topic, sorted.
func outputTopics(st *graph.Stages) []string {
	var out []string
	for _, s := range st.Stages {
		for _, sk := range s.Graph.Sinks {
			if (sk.Type == "" || sk.Type == "kafka") && sk.Topic != "" && !slices.Contains(out, sk.Topic) {
				out = append(out, sk.Topic)
			}
		}
	}
	for _, r := range st.Repartitions {
		if !slices.Contains(out, r.Topic) {
			out = append(out, r.Topic)
		}
	}
	slices.Sort(out)
	return out
}

// watchOutputs sets, every interval until ctx ends,
// kstreamd_cluster_output_unstable_offsets{topic,partition} to the high
// watermark minus the last stable offset of each partition of topics
// (ListEndOffsets and ListCommittedOffsets): the records read_committed
// readers cannot see yet because a transaction before them is still open.
// It stays near the records of one checkpoint interval while the units
// commit; a value that keeps growing is a stuck transaction (a unit that
// pre-committed and stopped: its transaction pins the partition until the
// broker aborts it at its transaction timeout). A failed measurement is
// logged at debug level and leaves the gauges as they were.
func watchOutputs(ctx context.Context, cl *kgo.Client, topics []string, g *prometheus.GaugeVec, interval time.Duration, logger *slog.Logger) {
	if len(topics) == 0 {
		return
	}
	adm := kadm.NewClient(cl)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		measureOutputs(ctx, adm, topics, g, logger)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// measureOutputs is one measurement of watchOutputs.
func measureOutputs(ctx context.Context, adm *kadm.Client, topics []string, g *prometheus.GaugeVec, logger *slog.Logger) {
	hwm, err := adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = hwm.Error()
	}
	if err != nil {
		logger.Debug("output offsets not measured", "err", err)
		return
	}
	lso, err := adm.ListCommittedOffsets(ctx, topics...)
	if err == nil {
		err = lso.Error()
	}
	if err != nil {
		logger.Debug("output offsets not measured", "err", err)
		return
	}
	hwm.Each(func(o kadm.ListedOffset) {
		if s, ok := lso.Lookup(o.Topic, o.Partition); ok {
			g.WithLabelValues(o.Topic, strconv.Itoa(int(o.Partition))).Set(float64(o.Offset - s.Offset))
		}
	})
}
