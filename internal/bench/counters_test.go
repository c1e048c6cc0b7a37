package bench

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/kstreamd/kstreamd/job"
	kruntime "github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/source"
)

// gatherSum is the reader the bench used before counterTap: a Gather of
// the whole registry, filtered to family and operator.
func gatherSum(t testing.TB, reg *prometheus.Registry, family, operator string) int64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != family {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "operator" && l.GetValue() == operator {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return int64(n)
}

// TestCounterTapMatchesGather checks that the tap's reader returns what a
// whole-registry Gather returns for the runtime's operator counters, at
// several points of a job's progress, with the scrape-time collectors
// (Go runtime, process) registered beside them.
func TestCounterTapMatchesGather(t *testing.T) {
	reg := prometheus.NewRegistry()
	tap := newCounterTap(reg)
	tap.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := kruntime.NewMetrics(tap)
	if err != nil {
		t.Fatal(err)
	}
	// A second counter with the same label values in another family must
	// not count.
	other := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kstreamd_other_total", Help: "x"}, []string{"operator", "subtask"})
	tap.MustRegister(other)

	check := func(step string, wantOut, wantIn, wantMap int64) {
		t.Helper()
		for _, c := range []struct {
			family, operator string
			want             int64
		}{
			{recordsOutFamily, "sink", wantOut},
			{recordsInFamily, "sink", wantIn},
			{recordsInFamily, "map", wantMap},
			{recordsInFamily, "absent", 0},
		} {
			got, ref := tap.sum(c.family, c.operator), gatherSum(t, reg, c.family, c.operator)
			if got != c.want || ref != c.want {
				t.Errorf("%s: %s{operator=%q}: tap %d, Gather %d, want %d", step, c.family, c.operator, got, ref, c.want)
			}
		}
	}
	check("empty", 0, 0, 0)
	m.RecordsIn("sink", 0).Add(5)
	m.RecordsIn("sink", 1).Add(7)
	m.RecordsIn("map", 0).Add(3)
	other.WithLabelValues("sink", "0").Add(100)
	check("written", 0, 12, 3)
	m.RecordsOut("sink", 0).Add(5)
	m.RecordsOut("sink", 1).Add(2)
	m.RecordsOut("map", 0).Add(3)
	check("committed", 7, 12, 3)
	m.RecordsIn("sink", 2).Add(1000000)
	m.RecordsOut("sink", 2).Add(999999)
	check("more subtasks", 1000006, 1000012, 3)

	if !tap.Unregister(other) {
		t.Fatal("Unregister: false")
	}
	if err := tap.Register(other); err != nil {
		t.Fatalf("re-Register after Unregister: %v", err)
	}
	if _, err := kruntime.NewMetrics(tap); err == nil {
		t.Fatal("registering the runtime metrics twice: no error")
	}
	check("after a refused registration", 1000006, 1000012, 3)
}

// BenchmarkProgressSample measures one progress sample of a job with 2
// operators x 2 subtasks registered the way the bench's job registers
// them (job.NewMetrics, no open Pebble state): the tap's reader against
// the whole-registry Gather it replaced.
func BenchmarkProgressSample(b *testing.B) {
	reg := prometheus.NewRegistry()
	tap := newCounterTap(reg)
	if _, err := job.NewMetrics(tap); err != nil {
		b.Fatal(err)
	}
	for _, f := range []string{recordsInFamily, recordsOutFamily} {
		for _, op := range []string{"source", "sink"} {
			for _, s := range []string{"0", "1"} {
				tap.taps[f][0].(*prometheus.CounterVec).WithLabelValues(op, s).Inc()
			}
		}
	}
	b.Run("tap", func(b *testing.B) {
		for range b.N {
			tap.sum(recordsOutFamily, "sink")
		}
	})
	b.Run("gather", func(b *testing.B) {
		for range b.N {
			gatherSum(b, reg, recordsOutFamily, "sink")
		}
	})
}

// BenchmarkRSSSample measures the peak-RSS sample the bench takes every
// 100 ms (a read of /proc/self/status).
func BenchmarkRSSSample(b *testing.B) {
	m := newRSSMeter()
	for range b.N {
		m.Sample()
	}
}

// TestCounterTapSpread checks the tap's reader of the partitions' event
// time gauges (the input's watermark skew): the largest minus the least
// of the gauges of one source, how many there were, other sources and
// families left out.
func TestCounterTapSpread(t *testing.T) {
	reg := prometheus.NewRegistry()
	tap := newCounterTap(reg)
	// The source's own metrics register the family with the tap (its
	// gauges appear with a source's first poll).
	if _, err := source.NewMetrics(tap); err != nil {
		t.Fatal(err)
	}
	if len(tap.taps[eventTimeFamily]) != 1 {
		t.Fatalf("the tap kept %d collectors of %s, want the source's one", len(tap.taps[eventTimeFamily]), eventTimeFamily)
	}
	// Values through a vector of the same family in a second tap.
	reg2 := prometheus.NewRegistry()
	tap2 := newCounterTap(reg2)
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: eventTimeFamily, Help: "x"}, []string{"source", "partition"})
	tap2.MustRegister(g)
	other := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kstreamd_other_ms", Help: "x"}, []string{"source", "partition"})
	tap2.MustRegister(other)
	if d, n := tap2.spread(eventTimeFamily, "in"); d != 0 || n != 0 {
		t.Fatalf("empty: spread %v over %d, want 0 over 0", d, n)
	}
	g.WithLabelValues("in", "0").Set(1_000_120)
	if d, n := tap2.spread(eventTimeFamily, "in"); d != 0 || n != 1 {
		t.Fatalf("one partition: spread %v over %d, want 0 over 1", d, n)
	}
	g.WithLabelValues("in", "1").Set(1_000_050)
	g.WithLabelValues("in", "2").Set(1_000_200)
	g.WithLabelValues("rules", "0").Set(5)
	other.WithLabelValues("in", "3").Set(1)
	if d, n := tap2.spread(eventTimeFamily, "in"); d != 150 || n != 3 {
		t.Fatalf("spread %v over %d, want 150 over 3 (rules and the other family left out)", d, n)
	}
	if d, n := tap.spread(eventTimeFamily, "in"); d != 0 || n != 0 {
		t.Fatalf("a source's metrics before any poll: spread %v over %d, want 0 over 0", d, n)
	}
}
