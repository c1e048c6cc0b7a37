package bench

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// checkpointDurationMetric is the daemons' histogram of checkpoint
// durations (trigger to commit; every unit of a daemon observes it).
const checkpointDurationMetric = "kstreamd_checkpoint_duration_seconds"

// histogram is a cumulative Prometheus histogram: counts[i] observations
// at or below bounds[i] (ascending, the last +Inf).
type histogram struct {
	bounds []float64
	counts []uint64
}

// parseHistogram reads the histogram name from a Prometheus text
// exposition; the series of every label set are summed. A histogram that
// is absent is empty, not an error.
func parseHistogram(r io.Reader, name string) (histogram, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return histogram{}, err
	}
	var h histogram
	fam := fams[name]
	if fam == nil {
		return h, nil
	}
	for _, m := range fam.GetMetric() {
		hist := m.GetHistogram()
		if hist == nil {
			return histogram{}, fmt.Errorf("bench: %s is not a histogram", name)
		}
		var add histogram
		for _, b := range hist.GetBucket() {
			add.bounds = append(add.bounds, b.GetUpperBound())
			add.counts = append(add.counts, b.GetCumulativeCount())
		}
		if n := len(add.bounds); n == 0 || add.bounds[n-1] != inf {
			add.bounds = append(add.bounds, inf)
			add.counts = append(add.counts, hist.GetSampleCount())
		}
		if h, err = h.plus(add); err != nil {
			return histogram{}, err
		}
	}
	return h, nil
}

var inf = math.Inf(1)

// plus returns h + o (o's bounds when h is empty); the bounds must match.
func (h histogram) plus(o histogram) (histogram, error) {
	if len(h.bounds) == 0 {
		return histogram{bounds: append([]float64(nil), o.bounds...), counts: append([]uint64(nil), o.counts...)}, nil
	}
	if len(h.bounds) != len(o.bounds) {
		return histogram{}, fmt.Errorf("bench: histograms with %d and %d buckets", len(h.bounds), len(o.bounds))
	}
	out := histogram{bounds: h.bounds, counts: make([]uint64, len(h.counts))}
	for i := range h.counts {
		out.counts[i] = h.counts[i] + o.counts[i]
	}
	return out, nil
}

// minus returns the observations of h that are not in earlier, an
// earlier reading of the same histogram (empty earlier: h).
func (h histogram) minus(earlier histogram) histogram {
	if len(earlier.counts) != len(h.counts) {
		return h
	}
	out := histogram{bounds: h.bounds, counts: make([]uint64, len(h.counts))}
	for i := range h.counts {
		out.counts[i] = h.counts[i] - min(earlier.counts[i], h.counts[i])
	}
	return out
}

// quantile returns the q quantile, interpolated linearly within its
// bucket as Prometheus' histogram_quantile does (the +Inf bucket answers
// its lower bound); 0 when empty.
func (h histogram) quantile(q float64) time.Duration {
	if len(h.counts) == 0 || h.counts[len(h.counts)-1] == 0 {
		return 0
	}
	rank := q * float64(h.counts[len(h.counts)-1])
	lower, below := 0.0, uint64(0)
	for i, c := range h.counts {
		if float64(c) >= rank {
			if h.bounds[i] == inf {
				return time.Duration(lower * float64(time.Second))
			}
			in := float64(c - below)
			v := h.bounds[i]
			if in > 0 {
				v = lower + (h.bounds[i]-lower)*(rank-float64(below))/in
			}
			return time.Duration(v * float64(time.Second))
		}
		lower, below = h.bounds[i], c
	}
	return 0
}

// scrapeHistogram sums the histogram name over the daemons' /metrics.
func scrapeHistogram(addrs []string, name string) (histogram, error) {
	var sum histogram
	for _, a := range addrs {
		resp, err := http.Get("http://" + a + "/metrics")
		if err != nil {
			return histogram{}, err
		}
		h, err := parseHistogram(resp.Body, name)
		resp.Body.Close()
		if err != nil {
			return histogram{}, fmt.Errorf("bench: metrics of %s: %w", a, err)
		}
		if sum, err = sum.plus(h); err != nil {
			return histogram{}, err
		}
	}
	return sum, nil
}
