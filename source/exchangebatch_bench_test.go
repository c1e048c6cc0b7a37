package source

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/runtime"
)

// BenchmarkEmitExchangeBatch measures a repartition source (Upstream, the
// json format's Decoder as a job builds it) emitting one exchange batch of
// 64 records of ~100 bytes, each +I with a key: the stage-after-repartition
// source path of a cluster unit.
func BenchmarkEmitExchangeBatch(b *testing.B) {
	const n = 64
	ch := runtime.NewChannel(n)
	s := New(Config{Name: "repartition.1", Topic: "rep", Partitions: 1, Only: []int32{0}, Upstream: []string{"0/0"}, Changelog: true,
		Decoder: connector.JSONFormat{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Output: runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{}))})
	if err := s.assignMarkers(); err != nil {
		b.Fatal(err)
	}
	s.wms = newWatermarks(WatermarkConfig{})
	var batch runtime.ExchangeBatch
	for i := range n {
		batch.Append(time.UnixMilli(int64(1000+i)), []byte("k-"+strconv.Itoa(i)),
			[]byte(`{"id":`+strconv.Itoa(10000+i)+`,"user":"u-1234","amount":17.5,"currency":"EUR","ts":1700000000000,"tags":["a","b"]}`), 1)
		batch.AppendHeader(runtime.ChangeHeader, []byte("+I"))
	}
	r := &kgo.Record{Topic: "rep", Offset: 7, Value: batch.Take(0), Timestamp: time.UnixMilli(1),
		Headers: []kgo.RecordHeader{{Key: runtime.MarkerHeader, Value: []byte(runtime.ExchangeBatchMarker)}}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := s.emitFetched(ctx, r); err != nil {
			b.Fatal(err)
		}
		for range n {
			<-ch
		}
	}
}
