package job

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// TestSignalWindow: a figure is the change from the oldest of the last
// signalSamples samples to now, per second of that span. A subtask busy
// for 3 s, then back-pressured, read at 5 s with samples at 0..4 s kept
// (the one at 0 dropped when the sixth arrives), shows exactly busy 500,
// back-pressured 500, idle 0 ms/s over 1..5 s; records in and out per
// second are the counters' change over the same span; the busy seconds
// counter holds the busy time sampled; the watermark and a state size are
// passed on, and vertex totals sum the rates, take the highest times and
// the lowest watermark only when every subtask has one.
func TestSignalWindow(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	meter := runtime.NewIOTimes(nil, nil)
	meter.SetClock(clock)
	in := prometheus.NewCounter(prometheus.CounterOpts{Name: "in"})
	out := prometheus.NewCounter(prometheus.CounterOpts{Name: "out"})
	busy := prometheus.NewCounter(prometheus.CounterOpts{Name: "busy"})
	wms, err := runtime.NewWatermarkMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	wm := wms.Gauge(runtime.TaskID{Operator: "op"})
	m := &Metrics{stateSize: &stateSizes{users: map[[2]string]state.DiskUser{}}}
	m.stateSize.users[[2]string{"op", "0"}] = fixedSize(4096)
	ss := &subtaskSignal{vertex: "op", index: 0, times: meter, in: in, out: out, wm: wm, busySecs: busy}
	s := &signals{interval: time.Second, metrics: m, subs: []*subtaskSignal{ss}}

	meter.Start()
	s.sample() // t=0
	for sec := 1; sec <= 5; sec++ {
		if sec == 4 {
			meter.BeginBackPressure() // from 3 s on
		}
		now = now.Add(time.Second)
		in.Add(100 * float64(sec)) // 100, 200, ... per second
		out.Add(10)
		if sec < 5 {
			s.sample() // t=1..4: the ring holds 0..4
		}
	}
	// Busy 0..3, back-pressured 3..5 (the wait began in the 4th second at
	// 3 s: the clock moved after BeginBackPressure).
	figs := s.read()
	if len(figs) != 1 {
		t.Fatalf("figures %+v", figs)
	}
	got := figs[0].sub
	// Span 0..5 (the ring's oldest is t=0): busy 3 s, bp 2 s over 5 s.
	if got.BusyMsPerS != 600 || got.BackPressuredMsPerS != 400 || got.IdleMsPerS != 0 {
		t.Fatalf("window 0..5 s: %+v, want busy 600, back-pressured 400, idle 0", got)
	}
	if got.RecordsInPerS != 300 || got.RecordsOutPerS != 10 {
		t.Fatalf("rates %+v, want 1500/5 = 300 in and 10 out per second", got)
	}
	if got.WatermarkMs != nil || got.StateBytes == nil || *got.StateBytes != 4096 {
		t.Fatalf("watermark %v, state %v: want none and 4096", got.WatermarkMs, got.StateBytes)
	}
	s.sample() // t=5: the ring holds 1..5
	now = now.Add(time.Second)
	s.sample() // t=6: 2..6
	wm.Set(time.UnixMilli(1234))
	got = s.read()[0].sub
	// Span 2..6: busy 2..3, bp 3..6.
	if got.BusyMsPerS != 250 || got.BackPressuredMsPerS != 750 || got.IdleMsPerS != 0 {
		t.Fatalf("window 2..6 s: %+v, want busy 250, back-pressured 750", got)
	}
	if got.RecordsInPerS != (300+400+500)/4.0 || got.WatermarkMs == nil || *got.WatermarkMs != 1234 {
		t.Fatalf("window 2..6 s: %+v, want 300 records in per second and watermark 1234", got)
	}
	if v := counterValue(busy); v != 3 {
		t.Fatalf("busy seconds counter %v, want 3", v)
	}

	w1, w2 := int64(50), int64(40)
	v := VertexStatus{Subtasks: []SubtaskStatus{
		{BusyMsPerS: 100, BackPressuredMsPerS: 900, RecordsInPerS: 10.25, RecordsOutPerS: 1, WatermarkMs: &w1},
		{BusyMsPerS: 700, BackPressuredMsPerS: 0, RecordsInPerS: 20.5, RecordsOutPerS: 2, WatermarkMs: &w2},
	}}
	v.totals()
	if v.BusyMsPerS != 700 || v.BackPressuredMsPerS != 900 || v.RecordsInPerS != 30.8 || v.RecordsOutPerS != 3 || v.WatermarkMs == nil || *v.WatermarkMs != 40 || v.StateBytes != nil {
		t.Fatalf("totals %+v", v)
	}
	v = VertexStatus{Subtasks: []SubtaskStatus{{WatermarkMs: &w1}, {}}}
	v.totals()
	if v.WatermarkMs != nil {
		t.Fatalf("vertex watermark %v with a subtask without one, want none", *v.WatermarkMs)
	}
}

// fixedSize is a state of a fixed disk size.
type fixedSize uint64

func (f fixedSize) DiskSpaceUsage() (uint64, bool) { return uint64(f), true }

// TestSignalGaugesMergeUnits: two cluster-mode units of one stage in a
// process both report operator op subtask 0; the gauges hold one series
// each, the highest busy and back-pressured and the lowest idle time,
// and the registry gathers without a duplicate error.
func TestSignalGaugesMergeUnits(t *testing.T) {
	reg := prometheus.NewRegistry()
	sm, err := newSignalMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	unit := func(idle bool) *signals {
		meter := runtime.NewIOTimes(nil, nil)
		meter.SetClock(func() time.Time { return now })
		meter.Start()
		if idle {
			meter.BeginIdle()
		}
		s := &signals{interval: time.Second, metrics: &Metrics{stateSize: &stateSizes{users: map[[2]string]state.DiskUser{}}},
			subs: []*subtaskSignal{{vertex: "op", times: meter, busySecs: prometheus.NewCounter(prometheus.CounterOpts{Name: "b"})}}}
		s.sample()
		sm.add(s)
		return s
	}
	unit(true)
	unit(false)
	now = now.Add(2 * time.Second)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			got[mf.GetName()] = append(got[mf.GetName()], m.GetGauge().GetValue())
		}
	}
	for name, want := range map[string]float64{
		"kstreamd_operator_busy_time_ms_per_second":          1000,
		"kstreamd_operator_backpressured_time_ms_per_second": 0,
		"kstreamd_operator_idle_time_ms_per_second":          0,
	} {
		if v := got[name]; len(v) != 1 || v[0] != want {
			t.Errorf("%s = %v, want one series of %v", name, v, want)
		}
	}
}
