package sink

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestBulkHistogramMatchesPrometheus: ObserveSince over a transaction's
// timestamps exposes what prometheus.Histogram.Observe of each latency
// does: the same cumulative buckets (bounds inclusive, values on a bound
// included), count and sum.
func TestBulkHistogramMatchesPrometheus(t *testing.T) {
	upper := prometheus.ExponentialBuckets(0.01, 2, 14)
	bulk := newBulkHistogram(prometheus.NewDesc("h", "h", nil, nil), upper)
	ref := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h", Help: "h", Buckets: upper})
	const now = int64(1_000_000_000_000)
	// On, just below and just above bounds, below the first, past the last.
	nanos := []int64{0, 1, 9_999_999, 10_000_000, 10_000_001, 20_000_000, 30_000_000, 80_000_000,
		163_840_000, 163_840_001, 81_920_000_000, 81_920_000_001, 500_000_000_000}
	for round := range 2 {
		var ts []int64
		for _, n := range nanos {
			ts = append(ts, now-n-int64(round))
			ref.Observe(float64(n+int64(round)) / 1e9)
		}
		bulk.ObserveSince(now, ts)
	}
	bulk.ObserveSince(now, nil)
	got, want := collect(t, bulk), collect(t, ref)
	if got.GetSampleCount() != want.GetSampleCount() || got.GetSampleSum() != want.GetSampleSum() {
		t.Fatalf("count %d sum %v, want %d and %v", got.GetSampleCount(), got.GetSampleSum(), want.GetSampleCount(), want.GetSampleSum())
	}
	cum := func(h *dto.Histogram) []uint64 {
		var out []uint64
		for _, b := range h.GetBucket() {
			out = append(out, b.GetCumulativeCount())
		}
		return out
	}
	if !slices.Equal(cum(got), cum(want)) {
		t.Fatalf("cumulative buckets %v, want %v", cum(got), cum(want))
	}
	if len(got.GetBucket()) != len(upper) || got.GetBucket()[0].GetUpperBound() != 0.01 {
		t.Fatalf("buckets %v, want the %d bounds from 0.01", got.GetBucket(), len(upper))
	}
}

func collect(t *testing.T, c prometheus.Collector) *dto.Histogram {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var m dto.Metric
	if err := (<-ch).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram()
}
