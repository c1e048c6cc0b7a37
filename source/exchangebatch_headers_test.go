package source

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/runtime"
)

// TestChangelogSourceRecordsOwnTheirHeaders: a changelog source (a
// repartition source) converts a record's headers into a scratch slice
// before it strips the change header, and every record it emits carries
// either no headers (only the change header, stripped) or a copy of its
// own: a record kept downstream keeps its headers while later records,
// of a batch or single, are emitted (and a bad record's headers, kept by
// the policy, are its own too).
func TestChangelogSourceRecordsOwnTheirHeaders(t *testing.T) {
	ch := runtime.NewChannel(64)
	s := New(Config{Name: "repartition.1", Topic: "rep", Partitions: 1, Only: []int32{0}, Upstream: []string{"0/0"}, Changelog: true,
		Decoder: connector.JSONFormat{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Output: runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{}))})
	if err := s.assignMarkers(); err != nil {
		t.Fatal(err)
	}
	s.wms = newWatermarks(WatermarkConfig{})
	var batch runtime.ExchangeBatch
	add := func(i int, change string, hs ...string) {
		batch.Append(time.UnixMilli(int64(1000+i)), fmt.Appendf(nil, "k%d", i), fmt.Appendf(nil, `{"i":%d}`, i), len(hs)/2+1)
		for j := 0; j < len(hs); j += 2 {
			batch.AppendHeader(hs[j], []byte(hs[j+1]))
		}
		batch.AppendHeader(runtime.ChangeHeader, []byte(change))
	}
	add(0, "+I")
	add(1, "+U", "h", "x1")
	add(2, "-U", "h", "x2", "g", "y2")
	add(3, "-D")
	ctx := context.Background()
	r := &kgo.Record{Topic: "rep", Offset: 7, Value: batch.Take(0), Timestamp: time.UnixMilli(1),
		Headers: []kgo.RecordHeader{{Key: runtime.MarkerHeader, Value: []byte(runtime.ExchangeBatchMarker)}}}
	if err := s.emitFetched(ctx, r); err != nil {
		t.Fatal(err)
	}
	// Records of the format before batches: one with the change header
	// and another header, one with a header and no change header.
	single := func(off int64, hs ...string) *kgo.Record {
		kr := &kgo.Record{Topic: "rep", Offset: off, Key: []byte("s"), Value: []byte(`{"s":1}`), Timestamp: time.UnixMilli(2000)}
		for j := 0; j < len(hs); j += 2 {
			kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: hs[j], Value: []byte(hs[j+1])})
		}
		return kr
	}
	for _, kr := range []*kgo.Record{single(8, "h", "s1", runtime.ChangeHeader, "+I"), single(9, "h", "s2"), single(10, runtime.ChangeHeader, "-D")} {
		if err := s.emitFetched(ctx, kr); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{
		"k0 +I []",
		"k1 +U [h=x1]",
		"k2 -U [h=x2 g=y2]",
		"k3 -D []",
		"s +I [h=s1]",
		"s +I [h=s2]",
		"s -D []",
	}
	var got []string
	var recs []runtime.Record
	for range want {
		e := <-ch
		recs = append(recs, e.Record)
	}
	// Every record read only now, after all were emitted: none shares
	// the headers of a later one.
	for _, rec := range recs {
		var hs []string
		for _, h := range rec.Headers {
			hs = append(hs, h.Key+"="+string(h.Value))
		}
		got = append(got, fmt.Sprintf("%s %s %v", rec.Key, rec.Change, hs))
		if len(rec.Headers) == 0 && rec.Headers != nil {
			t.Errorf("record %s: empty non-nil headers", rec.Key)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("records\n%q\nwant\n%q", got, want)
	}
	for i, rec := range recs {
		for j := range i {
			if len(rec.Headers) > 0 && len(recs[j].Headers) > 0 && &rec.Headers[0] == &recs[j].Headers[0] {
				t.Fatalf("records %d and %d share their headers", j, i)
			}
		}
	}
}
