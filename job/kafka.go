package job

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/sink"
	"github.com/kstreamd/kstreamd/sink/filesink"
	"github.com/kstreamd/kstreamd/sink/pgsink"
	"github.com/kstreamd/kstreamd/source"
	"github.com/kstreamd/kstreamd/srformat"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// NewBuiltinConnectors returns a connector registry holding the built-in
// types: the kafka source and sink (KafkaSourceFactory,
// KafkaSinkFactory), the file sink (filesink.Factory), the PostgreSQL
// sink (pgsink.Factory), the formats json,
// string and bytes (connector.BuiltinFormats) and the Schema Registry
// formats avro, protobuf and json_schema (srformat.Factories).
func NewBuiltinConnectors() *connector.Registry {
	r := connector.NewRegistry()
	err := r.RegisterSource(KafkaSourceFactory())
	if err == nil {
		err = r.RegisterSink(KafkaSinkFactory())
	}
	if err == nil {
		err = r.RegisterSink(filesink.Factory())
	}
	if err == nil {
		err = r.RegisterSink(pgsink.Factory())
	}
	for _, f := range append(connector.BuiltinFormats(), srformat.Factories()...) {
		if err == nil {
			err = r.RegisterFormat(f)
		}
	}
	if err != nil {
		panic(err) // the built-ins are fixed: a clash is a programming error caught by every test
	}
	return r
}

// buildKey is the connector.Resources key of the build in progress: the
// Kafka connectors, which are the job's own, read the job's Kafka client
// options, metrics, dead-letter writers and cluster scope from it.
type buildKey struct{}

// buildOf returns the build whose resources res are.
func buildOf(res *connector.Resources) *build {
	b, _ := res.Get(buildKey{}, func() (any, error) { return nil, fmt.Errorf("no build") })
	return b.(*build)
}

// kafkaPartitions is what the kafka source's Prepare found: the number of
// partitions of its topic at start; for a source over several topics or a
// topic pattern, each topic read at start with its partition count
// (topics) and the compiled pattern.
type kafkaPartitions struct {
	n       int32
	topics  map[string]int32
	pattern *regexp.Regexp
}

// reads reports whether the source reads topic: its topic, one of its
// topics, or one its pattern matches.
func (kp *kafkaPartitions) reads(s *graph.Source, topic string) bool {
	switch {
	case kp.pattern != nil:
		return source.MatchTopics(kp.pattern, []string{topic}) != nil
	case s.Topics != nil:
		return slices.Contains(s.Topics, topic)
	}
	return topic == s.Topic
}

// KafkaSourceFactory returns the kafka source type (Flink's KafkaSource):
// one topic, every partition read without a consumer group, partitions
// assigned to subtasks by AssignPartition and discovered at run time, its
// splits (source.Split, one per partition with the offset of the next
// record) checkpointed as JSON in source.SplitsState. Its settings are
// the source's own fields (topic, start_from, ...), so it takes no
// params: mapping.
func KafkaSourceFactory() connector.SourceFactory {
	return connector.SourceFactory{
		Type:        connector.DefaultType,
		Doc:         "Kafka topics (topic, topics or topic_pattern): every partition, offsets in checkpoints (Flink's KafkaSource); settings are the source's fields topic, start_from, partition_discovery_interval, ...",
		Formats:     true,
		Chains:      true,
		SplitsState: source.SplitsState,
		Prepare: func(ctx context.Context, pc connector.PrepareContext) (any, error) {
			return buildOf(pc.Resources).discover(ctx, pc.Source)
		},
		Restore: func(rc connector.RestoreContext) ([]any, error) {
			return buildOf(rc.Resources).restoreKafkaSource(rc)
		},
		New: func(ctx connector.SourceContext) (runtime.SourceTask, error) {
			return buildOf(ctx.Resources).kafkaSource(ctx)
		},
	}
}

// discover returns the partition count of s's topic, retrying while the
// brokers cannot be reached, until ctx ends (source.Discover), through
// the admin client the build's sources share.
func (b *build) discover(ctx context.Context, s *graph.Source) (*kafkaPartitions, error) {
	if b.admin == nil {
		cl, err := kgo.NewClient(b.deps.ClientOpts...)
		if err != nil {
			return nil, fmt.Errorf("job: kafka client: %w", err)
		}
		b.admin = cl
	}
	adm, logger := kadm.NewClient(b.admin), b.deps.Logger.With("component", "source", "source", s.Name)
	if s.Topics != nil || s.TopicPattern != "" {
		return b.discoverTopics(ctx, s, adm, logger)
	}
	n, err := source.Discover(ctx, adm, logger, s.Topic)
	if err != nil {
		return nil, fmt.Errorf("job: source %q: %w", s.Name, err)
	}
	if s.DiscoveryInterval == 0 && !s.Repartition { // a unit's repartition partition is fixed
		b.sc.logger.Warn("partition discovery is off: partitions added to the topic later will not be read",
			"source", s.Name, "topic", s.Topic, "fix", "partition_discovery_interval")
	}
	return &kafkaPartitions{n: n}, nil
}

// discoverTopics returns the topics a source over several topics (each
// must exist) or a topic pattern (none matching is no error: discovery
// finds them later) reads at start, with their partition counts.
func (b *build) discoverTopics(ctx context.Context, s *graph.Source, adm *kadm.Client, logger *slog.Logger) (*kafkaPartitions, error) {
	if b.sc.unit != nil {
		return nil, fmt.Errorf("job: source %q: topics and topic_pattern are not supported in cluster mode", s.Name)
	}
	kp := &kafkaPartitions{topics: map[string]int32{}}
	if s.TopicPattern != "" {
		re, err := source.CompileTopicPattern(s.TopicPattern)
		if err != nil {
			return nil, fmt.Errorf("job: source %q: topic_pattern: %w", s.Name, err)
		}
		kp.pattern = re
		if kp.topics, err = source.DiscoverTopics(ctx, adm, logger, re); err != nil {
			return nil, fmt.Errorf("job: source %q: %w", s.Name, err)
		}
		if len(kp.topics) == 0 {
			logger.Warn("no topic matches the topic pattern yet; partition discovery reads the ones created later", "topic_pattern", s.TopicPattern)
		}
	}
	for _, t := range s.Topics {
		n, err := source.Discover(ctx, adm, logger, t)
		if err != nil {
			return nil, fmt.Errorf("job: source %q: %w", s.Name, err)
		}
		kp.topics[t] = n
	}
	if s.DiscoveryInterval == 0 {
		logger.Warn("partition discovery is off: partitions and matching topics added later will not be read", "fix", "partition_discovery_interval")
	}
	return kp, nil
}

// restoreKafkaSource returns each new subtask's *source.Restored (its
// share of the restored splits of the source's topic, with every
// partition the checkpoint knew; nil entries for a fresh start) and
// records which subtask reads each partition at this start
// (FactoryContext.SourceSubtask): a restored split's holder, else
// AssignPartition.
func (b *build) restoreKafkaSource(rc connector.RestoreContext) ([]any, error) {
	s := rc.Source
	out := make([]any, s.Parallelism)
	restored := make([]*source.Restored, s.Parallelism)
	kp := rc.Prepared.(*kafkaPartitions)
	if rc.Shares != nil {
		var known []int32
		knownTopics := map[string][]int32{}
		for i, share := range rc.Shares {
			r := &source.Restored{}
			for _, e := range share {
				var sp source.Split
				if err := json.Unmarshal(e, &sp); err != nil {
					return nil, fmt.Errorf("job: restore source %q: split %s: %w", s.Name, e, err)
				}
				if !kp.reads(s, sp.Topic) {
					continue // the source was pointed at another topic: start fresh there
				}
				r.Splits = append(r.Splits, sp)
				if kp.topics == nil {
					known = append(known, sp.Partition)
				} else {
					knownTopics[sp.Topic] = append(knownTopics[sp.Topic], sp.Partition)
				}
			}
			restored[i] = r
		}
		slices.Sort(known)
		for _, ps := range knownTopics {
			slices.Sort(ps)
		}
		for i, r := range restored {
			r.Known = known
			if kp.topics != nil {
				r.KnownTopics = knownTopics
			}
			out[i] = r
		}
	}
	topics := kp.topics
	if topics == nil {
		topics = map[string]int32{s.Topic: kp.n}
	}
	for t, n := range topics {
		if _, dup := b.readers[t]; !dup {
			b.readers[t] = sourceReaders(t, s.Parallelism, n, restored)
		}
	}
	return out, nil
}

// sourceReaders returns which subtask of a source of parallelism reads
// each partition of topic: a restored split's holder, else
// AssignPartition (as KafkaSource.assign does).
func sourceReaders(topic string, parallelism int, partitions int32, restored []*source.Restored) map[int32]int {
	out := map[int32]int{}
	for sub, r := range restored {
		if r == nil {
			continue
		}
		for _, sp := range r.Splits {
			if sp.Topic == topic {
				out[sp.Partition] = sub
			}
		}
	}
	for p := int32(0); p < partitions; p++ {
		if _, ok := out[p]; !ok {
			out[p] = source.AssignPartition(topic, p, parallelism)
		}
	}
	return out
}

// kafkaSource returns one subtask of a kafka source: the partitions the
// scope gives it, its restored splits, the job's client options and
// metrics, its transactional dead-letter writer when dead letters are
// transactional, and the source's format as its Decoder.
func (b *build) kafkaSource(ctx connector.SourceContext) (runtime.SourceTask, error) {
	s, sub := ctx.Source, ctx.Subtask
	kp := ctx.Prepared.(*kafkaPartitions)
	partitions := kp.n
	restored, _ := ctx.Restored.(*source.Restored)
	only, upstream := b.sc.sourcePartitions(s, partitions)
	var assigner func(*runtime.Record) (time.Time, error)
	if s.Timestamp != nil {
		assigner = s.Timestamp()
	}
	dlw, err := b.deadLetterWriter(s.Name, sub, s.OnError == string(source.OnErrorDeadLetter))
	if err != nil {
		return nil, err
	}
	var dec source.Decoder
	if ctx.Format != nil {
		dec = ctx.Format
	}
	src := source.New(source.Config{
		Timestamp: assigner, MaxAhead: s.MaxAhead, Watermarks: source.WatermarkConfig{OutOfOrderness: s.OutOfOrderness, Idleness: s.Idleness},
		Alignment:      b.alignment(s),
		WatermarkGauge: ctx.Watermark,
		Name:           s.Name, Topic: s.Topic, Partitions: partitions, TopicPartitions: kp.topics, TopicPattern: kp.pattern,
		Subtask: sub, Parallelism: ctx.Parallelism, Only: only, Upstream: upstream, StartFrom: source.StartFrom(s.StartFrom), Restored: restored,
		DiscoveryInterval: s.DiscoveryInterval, Group: "kstreamd-" + b.g.Job,
		Decoder: dec, NewJSONDoc: newJSONDoc, Tombstones: s.Broadcast, Table: s.Table, Check: s.Check, Changelog: s.Changelog, UpsertChangelog: s.UpsertChangelog,
		OnError: source.OnError(s.OnError), DeadLetterTopic: s.DeadLetterTopic, PolicySource: s.PolicySource, DeadLetters: dlw, MaxRecordBytes: s.MaxRecordBytes,
		ClientOpts: b.deps.ClientOpts, Output: ctx.Output, Responder: ctx.Responder,
		OnCaughtUp: ctx.OnCaughtUp,
		RecordsIn:  ctx.RecordsIn, Metrics: b.m.source, Retries: b.m.kafka,
		Logger: b.sc.logger.With("component", "source"),
	})
	b.j.sources = append(b.j.sources, src)
	return src, nil
}

// alignment returns the watermark alignment of a subtask of source s: off
// unless s sets a max drift; else with the group of that name, one per
// build (so per daemon and per run of the job: a restart starts a new
// one), shared by every subtask of every source naming it.
func (b *build) alignment(s *graph.Source) source.WatermarkAlignment {
	if s.AlignmentMaxDrift <= 0 {
		return source.WatermarkAlignment{}
	}
	g := b.alignGroups[s.AlignmentGroup]
	if g == nil {
		g = source.NewAlignmentGroup(s.AlignmentGroup)
		if b.alignGroups == nil {
			b.alignGroups = map[string]*source.AlignmentGroup{}
		}
		b.alignGroups[s.AlignmentGroup] = g
	}
	return source.WatermarkAlignment{Group: g, MaxDrift: s.AlignmentMaxDrift, UpdateInterval: s.AlignmentUpdateInterval}
}

// newJSONDoc is every Kafka source's source.Config.NewJSONDoc: one
// expression.Doc per source subtask, shared by the operators chained to it.
func newJSONDoc() runtime.ReusableJSON { return new(expression.Doc) }

// KafkaSinkFactory returns the kafka sink type (Flink's KafkaSink): one
// topic, the record key as the Kafka key; exactly-once by one Kafka
// transaction per subtask and checkpoint epoch (its committables, Kafka
// producer ids and epochs as JSON, committed at restore by
// sink.RecoverTransactions), at-least-once with acks=all (optionally
// buffered), or none. Its settings are the sink's own fields (topic,
// transactional_id_prefix, pool_size, ...), so it takes no params:
// mapping.
func KafkaSinkFactory() connector.SinkFactory {
	return connector.SinkFactory{
		Type:       connector.DefaultType,
		Doc:        "one Kafka topic; exactly-once by Kafka transactions (Flink's KafkaSink); settings are the sink's fields topic, transactional_id_prefix, pool_size, ...",
		Deliveries: graph.Deliveries(),
		Formats:    true,
		Fields:     connector.KafkaSinkFields(),
		Recover: func(ctx context.Context, rc connector.RecoverContext) error {
			return buildOf(rc.Resources).recoverKafkaSink(ctx, rc)
		},
		New: func(ctx connector.SinkContext) (runtime.Operator, error) {
			return buildOf(ctx.Resources).kafkaSink(ctx)
		},
	}
}

// kafkaTxnTimeout returns the transaction timeout of an exactly-once
// Kafka sink: as configured, or sink.DefaultTransactionTimeout for 0.
func kafkaTxnTimeout(sk *graph.Sink) time.Duration {
	return cmp.Or(sk.TransactionTimeout, sink.DefaultTransactionTimeout)
}

// kafkaTxn returns the transaction timeout and pool size of an
// exactly-once Kafka sink: as configured, or the defaults for 0
// (kafkaTxnTimeout; sink.PoolSizeFor the job's tolerable checkpoint
// failures, as pipeline files get it, for a sink built in code and a
// cluster unit's repartition sinks).
func (b *build) kafkaTxn(sk *graph.Sink) (time.Duration, int) {
	return kafkaTxnTimeout(sk), b.poolSize(sk.PoolSize)
}

// poolSize returns configured, or sink.PoolSizeFor the job's tolerable
// checkpoint failures when it is 0.
func (b *build) poolSize(configured int) int {
	return cmp.Or(configured, sink.PoolSizeFor(b.set.TolerableFailures))
}

// recoverKafkaSink prepares an exactly-once Kafka sink before its
// subtasks start: it checks the transaction timeout against the brokers'
// maximum, commits the transactions the restored checkpoint pre-committed
// and fences every transactional id the sink may have used (old or new
// parallelism; a unit exactly its own).
func (b *build) recoverKafkaSink(ctx context.Context, rc connector.RecoverContext) error {
	sk := rc.Sink
	timeout, pool := b.kafkaTxn(sk)
	prefix, _ := b.sc.txn(sk.TransactionalIDPrefix, 0)
	b.m.sink.Init(sk.Name)
	if err := sink.CheckTransactionTimeout(ctx, b.deps.ClientOpts, sk.Name, timeout); err != nil {
		return err
	}
	committables, err := decodeKafkaCommittables(sk.Name, rc.Committables)
	if err != nil {
		return err
	}
	return sink.RecoverTransactions(ctx, sink.RecoverConfig{
		Name: sk.Name, ClientOpts: b.deps.ClientOpts, Committables: committables,
		TransactionalIDPrefix: prefix, PoolSize: pool, Subtasks: max(rc.OldParallelism, rc.Parallelism), FenceOnly: b.sc.fenceOnly(prefix, pool),
		TransactionTimeout: timeout, IgnoreLost: sk.IgnoreLostTransactions, Metrics: b.m.sink,
		Logger: rc.Logger,
	})
}

// kafkaSink returns one subtask of a kafka sink: a
// connector.TwoPhaseCommitSink over a KafkaCommitter of a KafkaTxnCommitter
// for exactly-once (a unit's repartition sink
// partitions by key group and writes markers), else a KafkaSink, buffered
// when buffer_threshold is set.
func (b *build) kafkaSink(ctx connector.SinkContext) (runtime.Operator, error) {
	sk, sub := ctx.Sink, ctx.Subtask
	var enc sink.Encoder
	if ctx.Format != nil {
		enc = ctx.Format
	}
	if !sk.Delivery.ExactlyOnce() {
		ks := sink.New(sink.Config{
			Name: sk.Name, Subtask: sub, Topic: sk.Topic, Delivery: sinkDelivery(sk.Delivery), Changelog: sinkChangelog(sk.Changelog),
			ClientOpts: b.deps.ClientOpts, RecordsOut: ctx.RecordsOut, Encode: enc, Logger: ctx.Logger,
		})
		if sk.BufferThreshold > 0 {
			return sink.NewBufferingSink(ks, sk.BufferThreshold, ctx.Restored), nil
		}
		return ks, nil
	}
	timeout, pool := b.kafkaTxn(sk)
	prefix, txnSub := b.sc.txn(sk.TransactionalIDPrefix, sub)
	var partition func([]byte) int32
	if sk.Units > 0 {
		units, maxP := sk.Units, b.rp.maxP
		partition = func(key []byte) int32 {
			return int32(keygroup.OperatorIndex(keygroup.Assign(key, maxP), maxP, units))
		}
	}
	kc := sink.NewKafkaCommitter(sk.Name, sink.NewKafkaTxnCommitter(sink.KafkaTxnConfig{
		Name: sk.Name, Subtask: txnSub, Topic: sk.Topic, TransactionalIDPrefix: prefix, Partition: partition, Partitions: int32(sk.Units),
		Changelog: sinkChangelog(sk.Changelog),
		PoolSize:  pool, TransactionTimeout: timeout, IgnoreLost: sk.IgnoreLostTransactions, Encode: enc,
		ClientOpts: b.deps.ClientOpts, RecordsOut: ctx.RecordsOut, Metrics: b.m.sink, Retries: b.m.kafka, Logger: ctx.Logger,
	}), b.m.sink)
	if mc := b.sc.markers(sk, b.set.MarkerInterval); mc != nil {
		if err := kc.EnableMarkers(*mc); err != nil {
			return nil, err
		}
	}
	return connector.NewTwoPhaseCommitSink(sink.CommittableType, sk.Name, sub, kc, ctx.Logger), nil
}

// sinkDelivery maps the delivery of a graph sink that is not exactly-once
// (those get a TwoPhaseCommitSink instead) to the Kafka sink's: none, or
// at-least-once for every other value ("" included), as it always did.
func sinkDelivery(d graph.Delivery) sink.Delivery {
	if d == graph.DeliveryNone {
		return sink.None
	}
	return sink.AtLeastOnce
}

// sinkChangelog maps a graph sink's changelog mode to the sink's:
// ChangelogHeader to sink.ChangelogHeader, ChangelogUpsertHeader to
// sink.ChangelogUpsertHeader, anything else (the default upsert) to
// sink.ChangelogUpsert.
func sinkChangelog(m graph.ChangelogMode) sink.ChangelogMode {
	switch m {
	case graph.ChangelogHeader:
		return sink.ChangelogHeader
	case graph.ChangelogUpsertHeader:
		return sink.ChangelogUpsertHeader
	}
	return sink.ChangelogUpsert
}
