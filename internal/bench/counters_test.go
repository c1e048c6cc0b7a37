package bench

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	kruntime "github.com/kstreamd/kstreamd/runtime"
)

// gatherSum is the reader the bench used before counterTap: a Gather of
// the whole registry, filtered to family and operator.
func gatherSum(t *testing.T, reg *prometheus.Registry, family, operator string) int64 {
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
