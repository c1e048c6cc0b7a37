package source

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/runtime"
)

// StartFrom says where a subtask starts reading a partition that has no
// restored offset.
type StartFrom string

const (
	// Earliest starts at the log start offset (the default).
	Earliest StartFrom = "earliest"
	// Latest starts at the end offset: only records produced after start.
	Latest StartFrom = "latest"
)

// Skip reasons, the bounded values of the reason label of
// kstreamd_source_records_skipped_total.
const (
	ReasonMalformedJSON = "malformed_json"
	ReasonNotObject     = "not_object"
	ReasonMissingKey    = "missing_key"
	ReasonEmptyValue    = "empty_value"
)

// Config configures one Kafka source subtask.
type Config struct {
	// Name is the source's configured name (metric and log label).
	Name string
	// Topic is read in full: every partition AssignPartition gives this subtask.
	Topic string
	// Partitions is the number of partitions of Topic, from Discover.
	Partitions int32
	// Subtask is this subtask's index in [0, Parallelism).
	Subtask int
	// Parallelism is the number of subtasks of this source.
	Parallelism int
	// StartFrom is Earliest (default) or Latest.
	StartFrom StartFrom
	// KeyBy, if not empty, is the top-level JSON field whose value becomes
	// the record key (a JSON string gives its characters, any other JSON
	// value its JSON text); a record without it is skipped. Empty keeps the
	// Kafka record key.
	KeyBy string
	// Tombstones lets records with a null value through (they delete a rule
	// on a broadcast rules topic); otherwise they are skipped as empty.
	Tombstones bool
	// ClientOpts are the franz-go options every client of the job shares
	// (seed brokers, client id, TLS, SASL, logger).
	ClientOpts []kgo.Opt
	// Output receives the records and control elements.
	Output *runtime.Output
	// RecordsIn counts records read from Kafka, malformed ones included; may
	// be nil.
	RecordsIn prometheus.Counter
	// Metrics is shared by every source subtask of the job.
	Metrics *Metrics
	// Logger is scoped by the caller; the subtask adds source and subtask.
	Logger *slog.Logger
}

// Metrics are the source metrics shared by every source subtask.
type Metrics struct {
	skipped *prometheus.CounterVec
}

// NewMetrics registers kstreamd_source_records_skipped_total{source,reason}
// with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kstreamd_source_records_skipped_total",
		Help: "Records a source skipped as malformed, by reason (malformed_json, not_object, missing_key, empty_value).",
	}, []string{"source", "reason"})}
	if err := reg.Register(m.skipped); err != nil {
		return nil, err
	}
	return m, nil
}

// Skipped returns the skipped-records counter of one source and reason.
func (m *Metrics) Skipped(source, reason string) prometheus.Counter {
	return m.skipped.WithLabelValues(source, reason)
}

// KafkaSource is one source subtask; it implements runtime.Task.
type KafkaSource struct {
	cfg        Config
	partitions []int32
	logger     *slog.Logger
	lastLog    time.Time
	suppressed int
}

// New returns the source subtask cfg describes. It does not connect yet.
func New(cfg Config) *KafkaSource {
	if cfg.StartFrom == "" {
		cfg.StartFrom = Earliest
	}
	return &KafkaSource{
		cfg:        cfg,
		partitions: PartitionsFor(cfg.Topic, cfg.Partitions, cfg.Subtask, cfg.Parallelism),
		logger:     cfg.Logger.With("source", cfg.Name, "subtask", cfg.Subtask),
	}
}

// Name implements runtime.Task.
func (s *KafkaSource) Name() string { return fmt.Sprintf("%s[%d]", s.cfg.Name, s.cfg.Subtask) }

// Partitions returns the partitions this subtask reads, ascending.
func (s *KafkaSource) Partitions() []int32 { return s.partitions }

// Run implements runtime.Task: it reads its partitions until stop is closed,
// then emits end-of-input and returns nil. It returns an error only if ctx
// ends or the output fails.
func (s *KafkaSource) Run(ctx context.Context, stop <-chan struct{}) error {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-pctx.Done():
		}
	}()
	if err := s.read(pctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	s.logger.Info("source stopped")
	return s.cfg.Output.Broadcast(ctx, runtime.Element{Kind: runtime.KindEndOfInput})
}

func (s *KafkaSource) read(ctx context.Context) error {
	if len(s.partitions) == 0 {
		s.logger.Info("source subtask has no partitions", "topic", s.cfg.Topic, "partitions", s.cfg.Partitions)
		if err := s.cfg.Output.Broadcast(ctx, runtime.Element{Kind: runtime.KindCaughtUp}); err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	}
	start := kgo.NewOffset().AtStart()
	if s.cfg.StartFrom == Latest {
		start = kgo.NewOffset().AtEnd()
	}
	assign := map[int32]kgo.Offset{}
	for _, p := range s.partitions {
		assign[p] = start
	}
	opts := append([]kgo.Opt{}, s.cfg.ClientOpts...)
	opts = append(opts,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{s.cfg.Topic: assign}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("source %s: client: %w", s.cfg.Name, err)
	}
	defer cl.Close()

	pending, err := s.catchUpTargets(ctx, cl)
	if err != nil {
		return err
	}
	s.logger.Info("source started", "topic", s.cfg.Topic, "partitions", s.partitions, "start_from", string(s.cfg.StartFrom))
	caughtUp := false
	checkCaughtUp := func() error {
		if caughtUp || len(pending) > 0 {
			return nil
		}
		caughtUp = true
		s.logger.Info("source caught up with the end offsets seen at start", "topic", s.cfg.Topic)
		return s.cfg.Output.Broadcast(ctx, runtime.Element{Kind: runtime.KindCaughtUp})
	}
	if err := checkCaughtUp(); err != nil {
		return err
	}
	for {
		fetches := cl.PollRecords(ctx, 1000)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		for _, fe := range fetches.Errors() {
			if errors.Is(fe.Err, context.Canceled) {
				continue
			}
			s.logger.Warn("fetch failed; retrying", "topic", fe.Topic, "partition", fe.Partition, "err", fe.Err)
		}
		var emitErr error
		fetches.EachRecord(func(r *kgo.Record) {
			if emitErr != nil {
				return
			}
			if !r.Attrs.IsControl() {
				emitErr = s.emit(ctx, r)
			}
			if target, ok := pending[r.Partition]; ok && r.Offset+1 >= target {
				delete(pending, r.Partition)
			}
		})
		if emitErr != nil {
			return emitErr
		}
		if err := checkCaughtUp(); err != nil {
			return err
		}
	}
}

// catchUpTargets returns, per partition not yet caught up, the last stable
// offset it must read up to. Earliest-starting partitions whose log is empty
// and latest-starting partitions are caught up at once.
func (s *KafkaSource) catchUpTargets(ctx context.Context, cl *kgo.Client) (map[int32]int64, error) {
	pending := map[int32]int64{}
	if s.cfg.StartFrom == Latest {
		return pending, nil
	}
	adm := kadm.NewClient(cl)
	var ends, starts kadm.ListedOffsets
	err := retry(ctx, s.logger, "list offsets", func() error {
		var err error
		if ends, err = adm.ListCommittedOffsets(ctx, s.cfg.Topic); err != nil {
			return err
		}
		if starts, err = adm.ListStartOffsets(ctx, s.cfg.Topic); err != nil {
			return err
		}
		if err := ends.Error(); err != nil {
			return err
		}
		return starts.Error()
	})
	if err != nil {
		return nil, fmt.Errorf("source %s: %w", s.cfg.Name, err)
	}
	for _, p := range s.partitions {
		end, _ := ends.Lookup(s.cfg.Topic, p)
		st, _ := starts.Lookup(s.cfg.Topic, p)
		if end.Offset > st.Offset {
			pending[p] = end.Offset
		}
	}
	return pending, nil
}

func (s *KafkaSource) emit(ctx context.Context, r *kgo.Record) error {
	if s.cfg.RecordsIn != nil {
		s.cfg.RecordsIn.Inc()
	}
	origin := runtime.Origin{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
	rec := runtime.Record{Key: r.Key, Value: r.Value, Timestamp: r.Timestamp, Origin: origin}
	if reason := s.decode(&rec); reason != "" {
		s.skip(origin, reason)
		return nil
	}
	return s.cfg.Output.Emit(ctx, rec)
}

// decode checks rec's value and extracts the key; it returns the skip
// reason, or "" if the record is good.
func (s *KafkaSource) decode(rec *runtime.Record) string {
	if rec.Value == nil && s.cfg.Tombstones {
		return ""
	}
	if len(rec.Value) == 0 {
		return ReasonEmptyValue
	}
	if s.cfg.KeyBy == "" {
		if !json.Valid(rec.Value) {
			return ReasonMalformedJSON
		}
		return ""
	}
	key, reason := ExtractKey(rec.Value, s.cfg.KeyBy)
	if reason != "" {
		return reason
	}
	rec.Key = key
	return ""
}

// ExtractKey returns the key bytes of field in the JSON object value: a JSON
// string gives its characters, another JSON value its compact JSON text. It
// returns a skip reason (ReasonMalformedJSON, ReasonNotObject,
// ReasonMissingKey) when value is not a JSON object holding field.
func ExtractKey(value []byte, field string) ([]byte, string) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(value, &obj); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return nil, ReasonNotObject
		}
		return nil, ReasonMalformedJSON
	}
	if obj == nil {
		return nil, ReasonNotObject
	}
	raw, ok := obj[field]
	if !ok || string(raw) == "null" {
		return nil, ReasonMissingKey
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, ReasonMalformedJSON
		}
		return []byte(s), ""
	}
	return []byte(raw), ""
}

// skip counts a malformed record and logs it, at most once a second per
// subtask (with the number of records skipped unlogged since).
func (s *KafkaSource) skip(o runtime.Origin, reason string) {
	if s.cfg.Metrics != nil {
		s.cfg.Metrics.Skipped(s.cfg.Name, reason).Inc()
	}
	if now := time.Now(); now.Sub(s.lastLog) >= time.Second {
		s.logger.Warn("skipped malformed record", "topic", o.Topic, "partition", o.Partition, "offset", o.Offset, "reason", reason, "suppressed_since_last_log", s.suppressed)
		s.lastLog = now
		s.suppressed = 0
		return
	}
	s.suppressed++
}
