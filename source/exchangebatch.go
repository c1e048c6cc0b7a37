package source

import (
	"context"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/runtime"
)

// exchangeReader is what a repartition source reuses from one exchange
// batch record to the next: the decoded record, the Kafka record emit
// reads and its headers. Only the subtask goroutine uses it.
type exchangeReader struct {
	rec     runtime.ExchangeBatchRecord
	kr      kgo.Record
	headers []kgo.RecordHeader
	// inBatch is true while emitData emits a record of an exchange batch:
	// decode then skips the format's JSON check (trustsBatchJSON).
	inBatch bool
	// recHeaders is where a changelog source's emitData converts a
	// record's headers before it strips the changelog ones
	// (scratchHeaders, ownHeaders).
	recHeaders []runtime.Header
}

// scratchHeaders returns n headers of x's scratch for emitData to fill:
// valid until the next call, so the record must not keep them
// (ownHeaders).
func (x *exchangeReader) scratchHeaders(n int) []runtime.Header {
	if cap(x.recHeaders) < n {
		x.recHeaders = make([]runtime.Header, n)
	}
	return x.recHeaders[:n]
}

// ownHeaders gives rec headers of its own when they are still
// scratchHeaders' (no changelog header was stripped, which would have
// made new ones or none): a copy, since the record may be kept
// downstream. A changelog source's records, a repartition source's
// among them (every record of an exchange batch carries the change
// header, runtime.ChangeHeader, and mostly nothing else), then carry no
// header slice of their own: no allocation per record, where they had
// one before the strip.
func (x *exchangeReader) ownHeaders(rec *runtime.Record) {
	if len(rec.Headers) > 0 && len(x.recHeaders) > 0 && &rec.Headers[0] == &x.recHeaders[0] {
		rec.Headers = slices.Clone(rec.Headers)
	}
	clear(x.recHeaders) // drop the references to the fetched bytes
}

// emitFetched emits a fetched record: a repartition source's (Config.Upstream)
// exchange batch (a record whose runtime.MarkerHeader is
// runtime.ExchangeBatchMarker, written by a repartition sink) record by record, in order, each as the Kafka record
// of the format before batches would have been (the batch's topic,
// partition and offset; its own key, value, headers and timestamp, else
// the batch's); every other record, a record of the format before
// batches or a marker included, as it is. A batch's records are data,
// never markers, whatever their headers (emitData): a record carries the
// headers of the input record it came from, so a "kstreamd-marker" header
// of the job's input must not be taken for a marker of an upstream unit
// (TestRepartitionSourceBatchRecordsAreNeverMarkers). A malformed batch fails the
// subtask, as a malformed marker does: the repartition topic is written by
// kstreamd only. A source of any other topic never reads a batch.
func (s *KafkaSource) emitFetched(ctx context.Context, r *kgo.Record) error {
	if s.markers == nil || !isExchangeBatch(r) {
		return s.emit(ctx, r)
	}
	rd, err := runtime.NewExchangeBatchReader(r.Value)
	if err != nil {
		return fmt.Errorf("source %s: %s/%d@%d: %w", s.cfg.Name, r.Topic, r.Partition, r.Offset, err)
	}
	x := &s.exchange
	for {
		ok, err := rd.Next(&x.rec)
		if err != nil {
			return fmt.Errorf("source %s: %s/%d@%d: %w", s.cfg.Name, r.Topic, r.Partition, r.Offset, err)
		}
		if !ok {
			return nil
		}
		x.headers = x.headers[:0]
		for _, h := range x.rec.Headers {
			x.headers = append(x.headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
		}
		x.kr = kgo.Record{
			Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, LeaderEpoch: r.LeaderEpoch,
			Key: x.rec.Key, Value: x.rec.Value, Headers: x.headers, Timestamp: x.rec.Timestamp,
		}
		if x.kr.Timestamp.IsZero() {
			x.kr.Timestamp = r.Timestamp
		}
		x.inBatch = true
		err = s.emitData(ctx, &x.kr)
		x.inBatch = false
		if err != nil {
			return err
		}
	}
}

// trustsBatchJSON reports whether decode skips the JSON check of the
// record being emitted: a record of an exchange batch (emitFetched) read by
// a source whose format's check is the JSON check only (checkedJSON: the
// json format, or a Decoder that is a JSONChecker, whose Decode of a valid
// JSON value only marks it runtime.FormatJSON). Such a record's value was
// checked once already, upstream: an exchange batch is written only by a
// kstreamd repartition sink (a repartition topic is kstreamd's own, and
// only a repartition source, Config.Upstream, reads batches), and the
// repartition source inherits the format of the job source its records
// come from (graph.Split), whose check each value passed, or an operator
// of the upstream stage made the value from JSON it encoded itself; in a
// single process the same record would reach the downstream operators
// with no check either. Kafka Streams and Flink likewise never validate
// their own internal exchange again. A record of the format before
// batches (one Kafka record each, from a kstreamd not yet upgraded) is
// checked as before, and so is every record of a job's own input topics,
// whose sources read no batch.
func (s *KafkaSource) trustsBatchJSON(n int) bool {
	return s.exchange.inBatch && s.checkedJSON(n, runtime.FormatJSON)
}

// isExchangeBatch reports whether r is an exchange batch
// (runtime.IsExchangeBatch on its headers).
func isExchangeBatch(r *kgo.Record) bool {
	for _, h := range r.Headers {
		if h.Key == runtime.MarkerHeader {
			return string(h.Value) == runtime.ExchangeBatchMarker
		}
	}
	return false
}
