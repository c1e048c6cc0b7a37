package bench

import (
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kstreamd/kstreamd/source"
)

// Families the bench samples while a job runs (runtime's operator
// counters, labelled operator and subtask).
const (
	recordsInFamily  = "kstreamd_operator_records_in_total"
	recordsOutFamily = "kstreamd_operator_records_out_total"
	// eventTimeFamily is the sources' per-partition largest event time
	// (source.PartitionEventTimeFamily), sampled for the input's
	// watermark skew.
	eventTimeFamily = source.PartitionEventTimeFamily
)

// counterTap is the prometheus.Registerer a bench job registers its
// metrics with: it registers every collector with the job's registry, as
// before, and keeps aside the collectors that describe the two operator
// record counters, so that the bench's 20 ms progress samples collect
// only those (a few dozen counters) instead of a whole-registry Gather,
// which also walks every other family and the collectors that compute
// their values on scrape, and whose CPU counted in every run's cpu_s/M.
type counterTap struct {
	reg *prometheus.Registry

	mu    sync.Mutex
	taps  map[string][]prometheus.Collector // family name -> its collectors
	descs map[*prometheus.Desc]string       // a kept collector's Desc -> its family
}

func newCounterTap(reg *prometheus.Registry) *counterTap {
	return &counterTap{reg: reg, taps: map[string][]prometheus.Collector{}, descs: map[*prometheus.Desc]string{}}
}

// Register registers c with the job's registry and, when that succeeds
// and c describes one of the sampled families, keeps c.
func (t *counterTap) Register(c prometheus.Collector) error {
	if err := t.reg.Register(c); err != nil {
		return err
	}
	ch := make(chan *prometheus.Desc, 8)
	go func() { c.Describe(ch); close(ch) }()
	var names []string
	descs := map[*prometheus.Desc]string{}
	for d := range ch {
		// Desc has no name accessor; its String form starts
		// `Desc{fqName: "name", ...`.
		for _, f := range []string{recordsInFamily, recordsOutFamily, eventTimeFamily} {
			if strings.Contains(d.String(), `fqName: "`+f+`"`) {
				names = append(names, f)
				descs[d] = f
			}
		}
	}
	t.mu.Lock()
	for _, f := range names {
		t.taps[f] = append(t.taps[f], c)
	}
	for d, f := range descs {
		t.descs[d] = f
	}
	t.mu.Unlock()
	return nil
}

// MustRegister registers cs, panicking on the first error, as
// prometheus.Registry.MustRegister does.
func (t *counterTap) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := t.Register(c); err != nil {
			panic(err)
		}
	}
}

// Unregister unregisters c from the job's registry and forgets it.
func (t *counterTap) Unregister(c prometheus.Collector) bool {
	t.mu.Lock()
	for f, cs := range t.taps {
		for i, x := range cs {
			if x == c {
				t.taps[f] = append(cs[:i:i], cs[i+1:]...)
				break
			}
		}
	}
	t.mu.Unlock()
	return t.reg.Unregister(c)
}

// each calls fn with every metric of family whose label name has the
// value value, over every registered collector, under the tap's lock
// (registrations are rare: held over the collection). fn's metric is
// reused between calls.
func (t *counterTap) each(family, name, value string, fn func(m *dto.Metric)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	cs, descs := t.taps[family], t.descs
	var m dto.Metric
	for _, c := range cs {
		ch := make(chan prometheus.Metric, 64)
		go func() { c.Collect(ch); close(ch) }()
		for x := range ch {
			if descs[x.Desc()] != family {
				continue
			}
			m.Reset()
			if x.Write(&m) != nil {
				continue
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == name && l.GetValue() == value {
					fn(&m)
				}
			}
		}
	}
}

// sum returns the sum of family's counters whose operator label is
// operator, over every subtask: what a Gather of the job's registry
// filtered the same way returns.
func (t *counterTap) sum(family, operator string) int64 {
	var n float64
	t.each(family, "operator", operator, func(m *dto.Metric) {
		if m.Counter != nil {
			n += m.GetCounter().GetValue()
		}
	})
	return int64(n)
}

// spread returns the largest minus the least of family's gauges whose
// source label is src, and how many such gauges there were (the spread
// is 0 below two).
func (t *counterTap) spread(family, src string) (float64, int) {
	lo, hi, n := 0.0, 0.0, 0
	t.each(family, "source", src, func(m *dto.Metric) {
		if m.Gauge == nil {
			return
		}
		v := m.GetGauge().GetValue()
		if n == 0 {
			lo, hi = v, v
		}
		lo, hi, n = min(lo, v), max(hi, v), n+1
	})
	return hi - lo, n
}
