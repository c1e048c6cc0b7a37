package source

import (
	"context"
	"fmt"

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
		if err := s.emitData(ctx, &x.kr); err != nil {
			return err
		}
	}
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
