package sink

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/runtime"
)

// Delivery is a sink's delivery guarantee.
type Delivery string

const (
	// AtLeastOnce waits for acks=all and fails the job when a record cannot
	// be written (the default).
	AtLeastOnce Delivery = "at-least-once"
	// None produces without acknowledgements and drops records it cannot
	// write (counted in the metrics).
	None Delivery = "none"
)

// Config configures one Kafka sink subtask.
type Config struct {
	// Name is the sink's configured name.
	Name string
	// Subtask is this subtask's index.
	Subtask int
	// Topic receives every record; the record key becomes the Kafka key.
	Topic string
	// Delivery is AtLeastOnce (default) or None.
	Delivery Delivery
	// Changelog is how a changelog is written; default ChangelogUpsert.
	Changelog ChangelogMode
	// ClientOpts are the franz-go options every client of the job shares.
	ClientOpts []kgo.Opt
	// RecordsOut counts records the broker acknowledged; may be nil.
	RecordsOut prometheus.Counter
	// Encode, if not nil, encodes each record before it is produced (the
	// sink's format, connector.Format.Encode); an error fails the job.
	Encode Encoder
	// Logger is scoped by the caller.
	Logger *slog.Logger
}

// Encoder encodes a record into the bytes written to topic
// (connector.Format): it may replace rec's value, key and headers.
type Encoder interface {
	Encode(ctx context.Context, topic string, rec *runtime.Record) error
}

// encode runs enc on rec, if there is one, naming sink in its error.
func encode(ctx context.Context, enc Encoder, sink, topic string, rec *runtime.Record) error {
	if enc == nil {
		return nil
	}
	if err := enc.Encode(ctx, topic, rec); err != nil {
		return fmt.Errorf("sink %s: encode a record for topic %q: %w", sink, topic, err)
	}
	return nil
}

// encoded returns rec encoded by enc (encode). It takes and returns the
// record by value so that only a record that is encoded moves to the heap
// (an Encoder is an interface: the pointer encode hands it escapes), not
// every record a sink writes.
//
//go:noinline
func encoded(ctx context.Context, enc Encoder, sink, topic string, rec runtime.Record) (runtime.Record, error) {
	err := encode(ctx, enc, sink, topic, &rec)
	return rec, err
}

// KafkaSink is one sink subtask; it implements runtime.Operator.
type KafkaSink struct {
	cfg    Config
	client *kgo.Client
	logger *slog.Logger

	mu       sync.Mutex // guards firstErr
	firstErr error
}

// New returns the sink subtask cfg describes; it connects in Open.
func New(cfg Config) *KafkaSink {
	if cfg.Delivery == "" {
		cfg.Delivery = AtLeastOnce
	}
	return &KafkaSink{cfg: cfg, logger: cfg.Logger.With("sink", cfg.Name, "subtask", cfg.Subtask)}
}

// Open implements runtime.Operator: it creates the producer client.
func (s *KafkaSink) Open(context.Context) error {
	opts := append([]kgo.Opt{}, s.cfg.ClientOpts...)
	opts = append(opts, kgo.DefaultProduceTopic(s.cfg.Topic))
	if s.cfg.Delivery == None {
		opts = append(opts, kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite())
	} else {
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("sink %s: client: %w", s.cfg.Name, err)
	}
	s.client = cl
	return nil
}

// ProcessRecord implements runtime.Operator: it hands the record to the
// producer as Config.Changelog writes it (an upsert sink drops a -U),
// blocking while the producer's buffer is full (back-pressure). It
// returns the first write failure seen so far, which fails the job.
func (s *KafkaSink) ProcessRecord(ctx context.Context, _ int, rec runtime.Record) error {
	if err := s.err(); err != nil {
		return err
	}
	if s.cfg.Changelog == ChangelogUpsert && rec.Change == runtime.ChangeUpdateBefore {
		return nil // the +U that follows replaces the row
	}
	if s.cfg.Encode != nil && encodesValue(s.cfg.Changelog, &rec) {
		var err error
		if rec, err = encoded(ctx, s.cfg.Encode, s.cfg.Name, s.cfg.Topic, rec); err != nil {
			return err
		}
	}
	kr := &kgo.Record{}
	changelogRecord(s.cfg.Changelog, kr, &rec)
	s.client.Produce(ctx, kr, s.promise)
	return nil
}

func (s *KafkaSink) promise(r *kgo.Record, err error) {
	if err == nil {
		if s.cfg.RecordsOut != nil {
			s.cfg.RecordsOut.Inc()
		}
		return
	}
	if s.cfg.Delivery == None {
		s.logger.Debug("record dropped", "topic", r.Topic, "err", err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.firstErr == nil {
		s.firstErr = fmt.Errorf("sink %s: write to topic %q: %w", s.cfg.Name, r.Topic, err)
	}
}

func (s *KafkaSink) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.firstErr
}

// SnapshotState implements runtime.Snapshotter: at-least-once means every
// record before the barrier is acknowledged by the broker before the
// checkpoint that covers it can complete, so it flushes here. The sink has
// no state of its own.
func (s *KafkaSink) SnapshotState(ctx context.Context, _ *runtime.Barrier) (runtime.SnapshotFinisher, error) {
	if s.cfg.Delivery != None {
		if err := s.client.Flush(ctx); err != nil {
			return nil, fmt.Errorf("sink %s: flush: %w", s.cfg.Name, err)
		}
		if err := s.err(); err != nil {
			return nil, err
		}
	}
	return func(context.Context) (runtime.TaskSnapshot, error) { return runtime.TaskSnapshot{}, nil }, nil
}

// EndInput implements runtime.Operator: it waits until every record was
// acknowledged (or failed) and returns the first failure.
func (s *KafkaSink) EndInput(ctx context.Context) error {
	if err := s.client.Flush(ctx); err != nil {
		return fmt.Errorf("sink %s: flush: %w", s.cfg.Name, err)
	}
	return s.err()
}

// Close implements runtime.Operator: it closes the client, abandoning
// records not yet acknowledged (EndInput flushed them on a clean stop).
func (s *KafkaSink) Close() error {
	if s.client != nil {
		s.client.Close()
	}
	return nil
}

// kafkaHeaders converts a record's headers for the producer; nil for none.
func kafkaHeaders(hs []runtime.Header) []kgo.RecordHeader {
	if len(hs) == 0 {
		return nil
	}
	out := make([]kgo.RecordHeader, len(hs))
	for i, h := range hs {
		out[i] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
	}
	return out
}
