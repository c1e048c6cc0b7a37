package sink

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/runtime"
)

// markerLog is a TwoPhaseCommitter and MarkerWriter that logs what is
// written into its transactions.
type markerLog struct{ log []string }

func (m *markerLog) BeginTransaction(context.Context) error { return nil }
func (m *markerLog) Write(_ context.Context, rec runtime.Record) error {
	m.log = append(m.log, "rec:"+string(rec.Value))
	return nil
}
func (m *markerLog) WriteMarker(_ context.Context, mk runtime.Marker) error {
	if mk.Unit != "0/1" {
		return fmt.Errorf("marker of unit %q", mk.Unit)
	}
	if mk.Kind == runtime.MarkerWatermark {
		m.log = append(m.log, fmt.Sprintf("wm:%d", mk.Watermark.UnixMilli()))
	} else {
		m.log = append(m.log, string(mk.Kind))
	}
	return nil
}
func (m *markerLog) PreCommit(_ context.Context, id int64) (Committable, error) {
	m.log = append(m.log, fmt.Sprintf("precommit:%d", id))
	return Committable{CheckpointID: id}, nil
}
func (m *markerLog) Commit(context.Context, Committable) error { return nil }
func (m *markerLog) AbortOpen(context.Context) error           { return nil }
func (m *markerLog) Snapshotted(int64)                         {}
func (m *markerLog) CheckpointCompleted(int64)                 {}
func (m *markerLog) Close() error                              { return nil }

// TestTwoPhaseCommitSinkMarkers drives a repartition sink with markers
// (interval 200ms, a fake clock) and asserts exactly what goes into its
// transactions: a watermark at most once per interval, the held-back one
// at the barrier before the pre-commit and before idle, an unchanged one
// never again, active before the first record or watermark after idle.
func TestTwoPhaseCommitSinkMarkers(t *testing.T) {
	ctx := context.Background()
	c := &markerLog{}
	s, kc := newKafkaSink("repartition.1", 0, c, nil, slog.New(slog.DiscardHandler))
	now := time.UnixMilli(0)
	if err := kc.EnableMarkers(MarkerConfig{Unit: "0/1", Interval: 200 * time.Millisecond, Clock: func() time.Time { return now }}); err != nil {
		t.Fatal(err)
	}
	ms := func(n int64) time.Time { return time.UnixMilli(n) }
	steps := []struct {
		at   int64 // processing time, ms
		op   string
		arg  int64
		want []string
	}{
		{0, "wm", 10, []string{"wm:10"}},                      // first: at once
		{50, "rec", 1, []string{"rec:1"}},                     //
		{100, "wm", 20, nil},                                  // within the interval: held back
		{150, "wm", 30, nil},                                  // still held back
		{200, "wm", 40, []string{"wm:40"}},                    // the interval passed
		{210, "wm", 50, nil},                                  // held back ...
		{220, "barrier", 1, []string{"wm:50", "precommit:1"}}, // ... until the barrier
		{230, "barrier", 2, []string{"precommit:2"}},          // unchanged: not written again
		{240, "wm", 60, nil},                                  // held back ...
		{250, "idle", 0, []string{"wm:60", "idle"}},           // ... until idle
		{260, "idle", 0, nil},                                 // once
		{270, "barrier", 3, []string{"precommit:3"}},          // idle: nothing
		{280, "rec", 2, []string{"active", "rec:2"}},          // a record ends idle
		{290, "idle", 0, []string{"idle"}},                    // nothing held back
		{600, "wm", 70, []string{"active", "wm:70"}},          // a watermark ends idle too
		{610, "barrier", 4, []string{"precommit:4"}},          // written already
	}
	for i, st := range steps {
		now = ms(st.at)
		c.log = nil
		var err error
		switch st.op {
		case "wm":
			err = s.ProcessWatermark(ctx, ms(st.arg))
		case "rec":
			err = s.ProcessRecord(ctx, 0, runtime.Record{Value: fmt.Append(nil, st.arg)})
		case "idle":
			err = s.ProcessIdle(ctx)
		case "barrier":
			_, err = s.SnapshotState(ctx, &runtime.Barrier{CheckpointID: st.arg})
		}
		if err != nil {
			t.Fatalf("step %d %+v: %v", i, st, err)
		}
		if !slices.Equal(c.log, st.want) {
			t.Fatalf("step %d %+v: wrote %q, want %q", i, st, c.log, st.want)
		}
	}

	// Without markers the sink writes none; a committer that cannot write
	// them is refused.
	plainLog := &markerLog{}
	plain, _ := newKafkaSink("out", 0, plainLog, nil, slog.New(slog.DiscardHandler))
	if err := plain.ProcessWatermark(ctx, ms(5)); err != nil {
		t.Fatal(err)
	}
	if err := plain.ProcessIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if log := plainLog.log; len(log) != 0 {
		t.Errorf("a sink without markers wrote %q", log)
	}
	type noMarkers struct{ TwoPhaseCommitter }
	_, nm := newKafkaSink("out", 0, noMarkers{&markerLog{}}, nil, slog.New(slog.DiscardHandler))
	err := nm.EnableMarkers(MarkerConfig{Unit: "0/0"})
	if err == nil || err.Error() != "sink out: markers need a committer that writes them (a repartition sink), not sink.noMarkers" {
		t.Errorf("EnableMarkers on a committer without WriteMarker: %v", err)
	}
}

// TestKafkaTxnCommitterWriteMarker: a marker goes into every partition of
// the topic inside the open transaction (read_committed sees it only after
// the commit), counts as a record of the transaction but not as a record
// out, and only a repartition sink can write one.
func TestKafkaTxnCommitterWriteMarker(t *testing.T) {
	opts := newCluster(t)
	ctx := context.Background()
	out := prometheus.NewCounter(prometheus.CounterOpts{Name: "records_out"})
	logger, _ := testLogger()
	k := NewKafkaTxnCommitter(KafkaTxnConfig{
		Name: "repartition.1", Topic: testTopic, TransactionalIDPrefix: "markers", TransactionTimeout: time.Minute,
		ClientOpts: opts, RecordsOut: out, Logger: logger,
		Partition: func([]byte) int32 { return 1 }, Partitions: 3,
	})
	defer k.Close()
	if err := k.BeginTransaction(ctx); err != nil {
		t.Fatal(err)
	}
	if err := k.Write(ctx, runtime.Record{Key: []byte("k"), Value: []byte(`{"a":1}`), Timestamp: time.UnixMilli(1000)}); err != nil {
		t.Fatal(err)
	}
	if err := k.WriteMarker(ctx, runtime.Marker{Kind: runtime.MarkerWatermark, Unit: "0/2", Watermark: time.UnixMilli(999)}); err != nil {
		t.Fatal(err)
	}
	c, err := k.PreCommit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if c.Records != 4 {
		t.Errorf("committable records %d, want 4 (1 record, 3 markers)", c.Records)
	}
	if n := len(testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), testTopic, 10*time.Second)); n != 0 {
		t.Errorf("read_committed sees %d records before the commit", n)
	}
	if err := k.Commit(ctx, c); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range expandExchange(t, testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), testTopic, 10*time.Second)) {
		var hs []string
		for _, h := range r.Headers {
			hs = append(hs, h.Key+"="+string(h.Value))
		}
		got = append(got, fmt.Sprintf("p%d key=%s value=%s ts=%d %v", r.Partition, r.Key, r.Value, r.Timestamp.UnixMilli(), hs))
	}
	want := []string{
		"p0 key= value=999 ts=999 [kstreamd-marker=watermark kstreamd-unit=0/2]",
		`p1 key=k value={"a":1} ts=1000 []`,
		"p1 key= value=999 ts=999 [kstreamd-marker=watermark kstreamd-unit=0/2]",
		"p2 key= value=999 ts=999 [kstreamd-marker=watermark kstreamd-unit=0/2]",
	}
	if !slices.Equal(got, want) {
		t.Errorf("topic holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var pb dto.Metric
	if err := out.Write(&pb); err != nil {
		t.Fatal(err)
	}
	if v := pb.GetCounter().GetValue(); v != 1 {
		t.Errorf("records out %v, want 1 (markers are not counted)", v)
	}

	plain := NewKafkaTxnCommitter(KafkaTxnConfig{Name: "out", Topic: testTopic, TransactionalIDPrefix: "plain", TransactionTimeout: time.Minute, ClientOpts: opts, Logger: logger})
	defer plain.Close()
	if err := plain.BeginTransaction(ctx); err != nil {
		t.Fatal(err)
	}
	err = plain.WriteMarker(ctx, runtime.Marker{Kind: runtime.MarkerIdle, Unit: "0/0"})
	if err == nil || err.Error() != "sink out: markers need a repartition sink (partitioned by key group, with a partition count)" {
		t.Errorf("WriteMarker without partitions: %v", err)
	}
	if err := plain.AbortOpen(ctx); err != nil {
		t.Fatal(err)
	}
}
