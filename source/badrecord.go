package source

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/runtime"
)

// PolicyConfig configures a BadRecordPolicy: the on_error policy of one
// source, applied to its records wherever they turn out bad (in the source
// itself, in a key selector, or in an operator's expression).
type PolicyConfig struct {
	// Source is the source's configured name (metric label, error text).
	Source string
	// OnError is the policy; "" means OnErrorSkip.
	OnError OnError
	// DeadLetterTopic receives bad records under OnErrorDeadLetter.
	DeadLetterTopic string
	// Producer writes dead-lettered records; required under
	// OnErrorDeadLetter unless Writer is set (SetProducer may set it
	// later). It is shared, not owned: the policy never closes it.
	Producer *kgo.Client
	// Writer, if not nil, is the transactional dead-letter writer of the
	// task (exactly-once jobs): dead letters go into its open transaction,
	// which the task pre-commits at every checkpoint barrier and commits
	// when the checkpoint completes, instead of a direct write through
	// Producer. It is owned by the task, not the policy.
	Writer DeadLetterWriter
	// Metrics counts skipped and dead-lettered records; may be nil.
	Metrics *Metrics
	// Logger receives the (rate-limited) bad-record warnings.
	Logger *slog.Logger
}

// DeadLetterVertex returns the name the dead-letter writer of vertex v (a
// source or operator whose bad-record policies write dead letters
// transactionally) is checkpointed under, as an operator of its own:
// "<v>.dead-letters". Its transactional ids are those of a sink with the
// prefix "kstreamd-<job>-<v>.dead-letters".
func DeadLetterVertex(v string) string { return v + DeadLetterSuffix }

// DeadLetterSuffix ends every DeadLetterVertex name.
const DeadLetterSuffix = ".dead-letters"

// DeadLetterWriter is the transactional dead-letter writer of one task of an
// exactly-once job (connector.TwoPhaseCommitSink over a sink.KafkaTxnCommitter):
// a side output of the task (runtime.SideOutput), whose WriteTo writes a
// record to a dead-letter topic inside the open transaction. Flink's side
// output to a transactional sink.
type DeadLetterWriter interface {
	runtime.SideOutputOperator
	WriteTo(ctx context.Context, topic string, rec runtime.Record) error
}

// BadRecordPolicy applies a source's on_error policy; it implements
// runtime.BadRecordHandler. One policy belongs to one subtask goroutine (its
// log rate limit is not synchronised); the producer may be shared.
type BadRecordPolicy struct {
	cfg        PolicyConfig
	lastLog    time.Time
	suppressed int
}

// NewBadRecordPolicy returns the policy cfg describes.
func NewBadRecordPolicy(cfg PolicyConfig) *BadRecordPolicy {
	if cfg.OnError == "" {
		cfg.OnError = OnErrorSkip
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &BadRecordPolicy{cfg: cfg}
}

// SetProducer sets the client dead-letter writes go through.
func (p *BadRecordPolicy) SetProducer(cl *kgo.Client) { p.cfg.Producer = cl }

// HandleBadRecord implements runtime.BadRecordHandler. Under OnErrorFail it
// returns a *BadRecordError naming the record's origin; under OnErrorSkip it
// counts the record in kstreamd_source_records_skipped_total{reason} and
// returns nil; under OnErrorDeadLetter it writes rec (value, key, timestamp
// and headers, plus HeaderError, HeaderTopic, HeaderPartition and
// HeaderOffset from rec.Origin) to the dead-letter topic and counts it:
// into the open transaction of PolicyConfig.Writer when set (visible to
// read_committed readers once the checkpoint after it completed, exactly
// once across restores), else directly, retrying with back-off until the
// broker acknowledges it or ctx ends (at least once: a replay after a
// restore writes it again).
func (p *BadRecordPolicy) HandleBadRecord(ctx context.Context, rec runtime.Record, re *runtime.RecordError) error {
	o := rec.Origin
	switch p.cfg.OnError {
	case OnErrorFail:
		return &BadRecordError{Source: p.cfg.Source, Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, Reason: re.Reason, Detail: re.Detail}
	case OnErrorDeadLetter:
		return p.deadLetter(ctx, rec, re)
	}
	if p.cfg.Metrics != nil {
		p.cfg.Metrics.Skipped(p.cfg.Source, re.Reason).Inc()
	}
	p.logBad("skipped bad record", o, re)
	return nil
}

// deadLetter writes rec with error headers to the dead-letter topic and
// waits for the broker's acknowledgement, retrying with back-off while it
// fails (the record is never dropped).
func (p *BadRecordPolicy) deadLetter(ctx context.Context, rec runtime.Record, re *runtime.RecordError) error {
	msg := re.Reason
	if re.Detail != "" {
		msg += ": " + re.Detail
	}
	o := rec.Origin
	headers := make([]runtime.Header, 0, len(rec.Headers)+4)
	headers = append(headers, rec.Headers...)
	headers = append(headers,
		runtime.Header{Key: HeaderError, Value: []byte(msg)},
		runtime.Header{Key: HeaderTopic, Value: []byte(o.Topic)},
		runtime.Header{Key: HeaderPartition, Value: []byte(strconv.Itoa(int(o.Partition)))},
		runtime.Header{Key: HeaderOffset, Value: []byte(strconv.FormatInt(o.Offset, 10))},
	)
	if rec.Change != runtime.ChangeInsert {
		// A changelog record (an operator's input) keeps its kind, so that
		// a -U is not mistaken for a new fact when the topic is replayed.
		headers = append(headers, runtime.Header{Key: runtime.ChangeHeader, Value: []byte(rec.Change.String())})
	}
	var err error
	switch {
	case p.cfg.Writer != nil:
		err = p.cfg.Writer.WriteTo(ctx, p.cfg.DeadLetterTopic, runtime.Record{Key: rec.Key, Value: rec.Value, Timestamp: rec.Timestamp, Headers: headers})
	case p.cfg.Producer == nil:
		return fmt.Errorf("source %s: dead-letter %s: no producer", p.cfg.Source, o)
	default:
		khs := make([]kgo.RecordHeader, len(headers))
		for i, h := range headers {
			khs[i] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
		}
		dl := &kgo.Record{Topic: p.cfg.DeadLetterTopic, Key: rec.Key, Value: rec.Value, Timestamp: rec.Timestamp, Headers: khs}
		err = retry(ctx, p.cfg.Logger, "dead-letter write", func(ctx context.Context) error {
			return p.cfg.Producer.ProduceSync(ctx, dl).FirstErr()
		})
	}
	if err != nil {
		return fmt.Errorf("source %s: dead-letter %s to %q: %w", p.cfg.Source, o, p.cfg.DeadLetterTopic, err)
	}
	if p.cfg.Metrics != nil {
		p.cfg.Metrics.DeadLettered(p.cfg.Source, re.Reason).Inc()
	}
	p.logBad("dead-lettered bad record", o, re)
	return nil
}

// logBad logs a bad record at Warn, at most once a second per policy (with
// the number of bad records not logged since).
func (p *BadRecordPolicy) logBad(msg string, o runtime.Origin, re *runtime.RecordError) {
	if now := time.Now(); now.Sub(p.lastLog) >= time.Second {
		p.cfg.Logger.Warn(msg, "topic", o.Topic, "partition", o.Partition, "offset", o.Offset, "reason", re.Reason, "detail", re.Detail, "suppressed_since_last_log", p.suppressed)
		p.lastLog = now
		p.suppressed = 0
		return
	}
	p.suppressed++
}
