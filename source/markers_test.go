package source

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/runtime"
)

// snapRecorder is a runtime.CheckpointResponder keeping the last snapshot.
type snapRecorder struct{ snap chan runtime.TaskSnapshot }

func (s *snapRecorder) Acknowledge(_ runtime.TaskID, _ int64, snap runtime.TaskSnapshot) {
	s.snap <- snap
}
func (s *snapRecorder) Decline(runtime.TaskID, int64, error)                   {}
func (s *snapRecorder) AlignmentDuration(runtime.TaskID, int64, time.Duration) {}

// TestRepartitionSourceMarkers runs a repartition source (partition 1 of
// a 2-partition topic, upstream units 0/0 and 0/1) over records and
// markers and asserts exactly what it emits: the data records only, the
// minimum over the non-idle upstream units, nothing before both were
// heard from; its checkpoint holds the per-upstream state in the split,
// and a source restored from it emits the restored watermark first and
// goes on from there.
func TestRepartitionSourceMarkers(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "rep"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	opts := []kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}
	prod, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic("rep"), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	produce := func(p int32, recs ...runtime.Record) {
		t.Helper()
		for _, r := range recs {
			kr := &kgo.Record{Partition: p, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}
			for _, h := range r.Headers {
				kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
			}
			if err := prod.ProduceSync(context.Background(), kr).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	data := func(v string, ts int64) runtime.Record {
		return runtime.Record{Key: []byte("k"), Value: []byte(v), Timestamp: time.UnixMilli(ts)}
	}
	mk := func(kind runtime.MarkerKind, unit string, wm int64) runtime.Record {
		return runtime.Marker{Kind: kind, Unit: unit, Watermark: time.UnixMilli(wm)}.Record()
	}
	produce(0, mk(runtime.MarkerWatermark, "0/0", 1000)) // another unit's partition: not read
	produce(1,
		data(`"d1"`, 100),
		mk(runtime.MarkerWatermark, "0/0", 50), // 0/1 not heard from
		mk(runtime.MarkerIdle, "0/1", 0),       // heard from both: 50
		data(`"d2"`, 110),
		mk(runtime.MarkerWatermark, "0/0", 120), // 120
		mk(runtime.MarkerActive, "0/1", 0),      // 0/1 active without time: holds, nothing emitted
		mk(runtime.MarkerWatermark, "0/1", 90),  // below 120: no regression
		mk(runtime.MarkerWatermark, "0/1", 200), // min(120, 200)
		mk(runtime.MarkerWatermark, "0/0", 300), // min(300, 200) = 200
	)

	run := func(restored *Restored, want []string) (runtime.TaskSnapshot, func()) {
		t.Helper()
		ch := runtime.NewChannel(64)
		resp := &snapRecorder{snap: make(chan runtime.TaskSnapshot, 1)}
		src := New(Config{
			Name: "repartition.1", Topic: "rep", Partitions: 2, Subtask: 0, Parallelism: 1, Only: []int32{1},
			Upstream: []string{"0/0", "0/1"}, Restored: restored,
			ClientOpts: opts, Responder: resp, Format: FormatJSON,
			Output: runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{})),
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- src.Run(ctx, nil) }()
		var got []string
		deadline := time.After(time.Minute)
		for len(got) < len(want) {
			select {
			case el := <-ch:
				switch {
				case el.Kind == runtime.KindRecord:
					got = append(got, "rec:"+string(el.Record.Value))
				case el.Kind == runtime.KindWatermark && el.Idle:
					got = append(got, "idle")
				case el.Kind == runtime.KindWatermark:
					got = append(got, fmt.Sprintf("wm:%d", el.Watermark.UnixMilli()))
				}
			case <-deadline:
				t.Fatalf("emitted %q, want %q", got, want)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("emitted %q, want %q", got, want)
		}
		src.TriggerCheckpoint(&runtime.Barrier{CheckpointID: 1})
		var snap runtime.TaskSnapshot
		select {
		case snap = <-resp.snap:
		case <-time.After(time.Minute):
			t.Fatal("no checkpoint acknowledged")
		}
		return snap, func() {
			cancel()
			<-done
			for len(ch) > 0 {
				el := <-ch
				if el.Kind == runtime.KindRecord || el.Kind == runtime.KindWatermark {
					t.Errorf("emitted %+v after the expected elements", el)
				}
			}
		}
	}
	snap, stop := run(nil, []string{`rec:"d1"`, "wm:50", `rec:"d2"`, "wm:120", "wm:200"})
	stop()
	var ts checkpoint.TaskState
	if err := json.Unmarshal(snap.State, &ts); err != nil {
		t.Fatal(err)
	}
	entries := ts.Operator[SplitsState].Entries
	if len(entries) != 1 {
		t.Fatalf("splits %q, want one", entries)
	}
	if want := `{"topic":"rep","partition":1,"offset":9,"max_timestamp":110,"upstream":{"current":200,"units":[{"unit":"0/0","watermark":300},{"unit":"0/1","watermark":200}]}}`; string(entries[0]) != want {
		t.Errorf("split %s, want %s", entries[0], want)
	}
	var sp Split
	if err := json.Unmarshal(entries[0], &sp); err != nil {
		t.Fatal(err)
	}

	// Restored: the watermark first, then 0/1 idle leaves 0/0's 300, and
	// 0/0 idle too makes the source idle.
	produce(1, mk(runtime.MarkerIdle, "0/1", 0), mk(runtime.MarkerIdle, "0/0", 0))
	_, stop = run(&Restored{Splits: []Split{sp}, Known: []int32{0, 1}}, []string{"wm:200", "wm:300", "idle"})
	stop()
}
