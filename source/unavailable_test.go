package source

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/runtime"
)

// leaderless makes partition p of topic leaderless for every client of c:
// its metadata, offset listings and fetches answer LEADER_NOT_AVAILABLE
// until the returned function is called.
func leaderless(c *kfake.Cluster, topic string, p int32) func() {
	h := c.Fault(kfake.Fault{
		Keys:  []kmsg.Key{kmsg.Metadata, kmsg.ListOffsets, kmsg.Fetch},
		Topic: topic, Partitions: []int32{p}, Err: kerr.LeaderNotAvailable, Count: -1,
	})
	return h.Remove
}

// unavailSource is a running source subtask whose emitted records are
// collected by partition.
type unavailSource struct {
	src      *KafkaSource
	reg      *prometheus.Registry
	snaps    chan runtime.TaskSnapshot
	caughtUp chan struct{}
	mu       sync.Mutex
	offsets  map[int32][]int64 // partition -> offsets of the records emitted, in order
	stop     func() error
}

func (u *unavailSource) emitted(p int32) []int64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.offsets[p])
}

// startUnavailSource runs subtask 0 of 1 of a source over the 4 partitions
// of topic "events" on c.
func startUnavailSource(t *testing.T, c *kfake.Cluster, restored *Restored) *unavailSource {
	t.Helper()
	u := &unavailSource{reg: prometheus.NewRegistry(), snaps: make(chan runtime.TaskSnapshot, 16),
		caughtUp: make(chan struct{}), offsets: map[int32][]int64{}}
	m, err := NewMetrics(u.reg)
	if err != nil {
		t.Fatal(err)
	}
	m.Init("src")
	ch := runtime.NewChannel(64)
	u.src = New(Config{
		Name: "src", Topic: "events", Partitions: 4, Subtask: 0, Parallelism: 1, Restored: restored,
		ClientOpts: []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond })},
		Output:     runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{})),
		Responder:  &snapRecorder{snap: u.snaps},
		OnCaughtUp: func() { close(u.caughtUp) },
		Metrics:    m,
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for el := range ch {
			switch el.Kind {
			case runtime.KindRecord:
				u.mu.Lock()
				u.offsets[el.Record.Origin.Partition] = append(u.offsets[el.Record.Origin.Partition], el.Record.Origin.Offset)
				u.mu.Unlock()
			case runtime.KindEndOfInput:
				return
			}
		}
	}()
	stop := make(chan struct{})
	ran := make(chan error, 1)
	go func() { ran <- u.src.Run(context.Background(), stop) }()
	u.stop = sync.OnceValue(func() error {
		close(stop)
		err := <-ran
		<-drained
		return err
	})
	t.Cleanup(func() { _ = u.stop() })
	return u
}

// checkpointSplits triggers checkpoint id and returns the acknowledged
// splits by partition.
func (u *unavailSource) checkpointSplits(t *testing.T, id int64) map[int32]int64 {
	t.Helper()
	u.src.TriggerCheckpoint(&runtime.Barrier{CheckpointID: id})
	var snap runtime.TaskSnapshot
	select {
	case snap = <-u.snaps:
	case <-time.After(20 * time.Second):
		t.Fatalf("checkpoint %d not acknowledged within 20s", id)
	}
	var ts checkpoint.TaskState
	if err := json.Unmarshal(snap.State, &ts); err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	for _, e := range ts.Operator[SplitsState].Entries {
		var sp Split
		if err := json.Unmarshal(e, &sp); err != nil {
			t.Fatal(err)
		}
		out[sp.Partition] = sp.Offset
	}
	return out
}

func (u *unavailSource) unavailableGauge() float64 {
	mfs, _ := u.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "kstreamd_source_partitions_unavailable" {
			for _, m := range mf.GetMetric() {
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

func seq(from, to int64) []int64 {
	var out []int64
	for o := from; o < to; o++ {
		out = append(out, o)
	}
	return out
}

// TestUnavailablePartitionAtRestore restores a subtask reading 4
// partitions at offset 5 of 10 while partition 2 has no leader (metadata,
// ListOffsets and Fetch answer LEADER_NOT_AVAILABLE for it): the records
// 5..9 of partitions 0, 1 and 3 are emitted, checkpoints are acknowledged
// with partition 2 still at its restored offset 5, the subtask is not ready
// and names events/2, the unavailable gauge is 1 and the subtask has not
// caught up. Once the partition has a leader again its records 5..9 are
// emitted, each once, the gauge is 0, the subtask is ready and caught up.
func TestUnavailablePartitionAtRestore(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "events"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("events"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for p := int32(0); p < 4; p++ {
		for i := 0; i < 10; i++ {
			if err := prod.ProduceSync(context.Background(), &kgo.Record{Partition: p, Value: fmt.Appendf(nil, `{"p":%d,"i":%d}`, p, i)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	restore := leaderless(c, "events", 2)
	restored := &Restored{Known: []int32{0, 1, 2, 3}}
	for p := int32(0); p < 4; p++ {
		restored.Splits = append(restored.Splits, Split{Topic: "events", Partition: p, Offset: 5})
	}
	u := startUnavailSource(t, c, restored)

	others := func() bool {
		for _, p := range []int32{0, 1, 3} {
			if len(u.emitted(p)) < 5 {
				return false
			}
		}
		return true
	}
	if !testkit.Poll(20*time.Second, others) {
		t.Fatalf("while partition 2 has no leader: emitted %v %v %v, want offsets 5..9 of partitions 0, 1, 3", u.emitted(0), u.emitted(1), u.emitted(3))
	}
	var detail string
	if !testkit.Poll(20*time.Second, func() bool {
		var ready bool
		ready, detail = u.src.Readiness()
		return !ready && strings.Contains(detail, "partition events/2 unavailable") && u.unavailableGauge() == 1
	}) {
		t.Fatalf("readiness %q, gauge %v; want not ready naming events/2, gauge 1", detail, u.unavailableGauge())
	}
	t.Logf("readiness while partition 2 has no leader: %s", detail)
	for id := int64(1); id <= 3; id++ {
		splits := u.checkpointSplits(t, id)
		if want := map[int32]int64{0: 10, 1: 10, 2: 5, 3: 10}; !maps.Equal(splits, want) {
			t.Fatalf("checkpoint %d splits %v, want %v", id, splits, want)
		}
	}
	for _, p := range []int32{0, 1, 3} {
		if got := u.emitted(p); !slices.Equal(got, seq(5, 10)) {
			t.Errorf("partition %d emitted offsets %v, want 5..9", p, got)
		}
	}
	if got := u.emitted(2); len(got) != 0 {
		t.Fatalf("partition 2 emitted %v while it has no leader", got)
	}
	select {
	case <-u.caughtUp:
		t.Fatalf("caught up while partition 2's end offset is unknown")
	default:
	}

	restore()
	if !testkit.Poll(30*time.Second, func() bool { return len(u.emitted(2)) >= 5 }) {
		t.Fatalf("partition 2 emitted %v within 30s of getting its leader back, want 5..9", u.emitted(2))
	}
	if !testkit.Poll(20*time.Second, func() bool { r, _ := u.src.Readiness(); return r && u.unavailableGauge() == 0 }) {
		_, d := u.src.Readiness()
		t.Fatalf("readiness %q, gauge %v after partition 2 is back; want ready, 0", d, u.unavailableGauge())
	}
	select {
	case <-u.caughtUp:
	case <-time.After(20 * time.Second):
		t.Fatalf("not caught up 20s after partition 2 is back")
	}
	if splits := u.checkpointSplits(t, 4); !maps.Equal(splits, map[int32]int64{0: 10, 1: 10, 2: 10, 3: 10}) {
		t.Errorf("checkpoint 4 splits %v, want every partition at 10", splits)
	}
	if err := u.stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	for p := int32(0); p < 4; p++ {
		if got := u.emitted(p); !slices.Equal(got, seq(5, 10)) {
			t.Errorf("partition %d emitted offsets %v, want 5..9 once each", p, got)
		}
	}
	if g := u.unavailableGauge(); g != 0 {
		t.Errorf("unavailable gauge %v after stop, want 0", g)
	}
}

// TestUnavailablePartitionFreshStart starts a subtask fresh (earliest)
// while partition 1 has no leader: the others are read, the checkpoint
// keeps partition 1 as EarliestOffset (its start was never looked up) and
// the subtask is not ready, naming events/1; once it has a leader, its
// start offset is looked up and its records are read from 0.
func TestUnavailablePartitionFreshStart(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "events"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("events"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for p := int32(0); p < 4; p++ {
		for i := 0; i < 3; i++ {
			if err := prod.ProduceSync(context.Background(), &kgo.Record{Partition: p, Value: []byte(`{}`)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	restore := leaderless(c, "events", 1)
	u := startUnavailSource(t, c, nil)
	if !testkit.Poll(20*time.Second, func() bool {
		return len(u.emitted(0)) == 3 && len(u.emitted(2)) == 3 && len(u.emitted(3)) == 3
	}) {
		t.Fatalf("emitted %v %v %v, want 3 records of partitions 0, 2, 3", u.emitted(0), u.emitted(2), u.emitted(3))
	}
	if !testkit.Poll(20*time.Second, func() bool {
		r, d := u.src.Readiness()
		return !r && strings.Contains(d, "events/1")
	}) {
		_, d := u.src.Readiness()
		t.Fatalf("readiness %q, want not ready naming events/1", d)
	}
	if splits := u.checkpointSplits(t, 1); !maps.Equal(splits, map[int32]int64{0: 3, 1: EarliestOffset, 2: 3, 3: 3}) {
		t.Fatalf("checkpoint splits %v, want partition 1 at EarliestOffset and the others at 3", splits)
	}
	restore()
	if !testkit.Poll(30*time.Second, func() bool { return len(u.emitted(1)) >= 3 }) {
		t.Fatalf("partition 1 emitted %v within 30s of getting its leader back", u.emitted(1))
	}
	if !testkit.Poll(20*time.Second, func() bool { r, _ := u.src.Readiness(); return r }) {
		_, d := u.src.Readiness()
		t.Fatalf("readiness %q after partition 1 is back, want ready", d)
	}
	if err := u.stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if got := u.emitted(1); !slices.Equal(got, seq(0, 3)) {
		t.Errorf("partition 1 emitted offsets %v, want 0..2", got)
	}
}

// TestUnavailablePartitionWhileRunning makes partition 2 leaderless while
// the subtask reads: partitions 0, 1 and 3 go on (their next 5 records
// are emitted), a checkpoint holds partition 2 where it stood (5), the
// subtask is not ready naming events/2 and the gauge is 1; once it is back
// the records produced to it meanwhile are emitted, once each.
func TestUnavailablePartitionWhileRunning(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "events"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("events"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	produceTo := func(parts []int32, n int) {
		t.Helper()
		for _, p := range parts {
			for i := 0; i < n; i++ {
				if err := prod.ProduceSync(context.Background(), &kgo.Record{Partition: p, Value: []byte(`{}`)}).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	produceTo([]int32{0, 1, 2, 3}, 5)
	u := startUnavailSource(t, c, nil)
	all := func(n int, parts ...int32) func() bool {
		return func() bool {
			for _, p := range parts {
				if len(u.emitted(p)) < n {
					return false
				}
			}
			return true
		}
	}
	if !testkit.Poll(20*time.Second, all(5, 0, 1, 2, 3)) {
		t.Fatalf("the first 5 records of each partition were not emitted")
	}
	restore := leaderless(c, "events", 2)
	produceTo([]int32{0, 1, 3}, 5)
	if !testkit.Poll(20*time.Second, all(10, 0, 1, 3)) {
		t.Fatalf("partitions 0, 1, 3 emitted %v %v %v while partition 2 has no leader, want 10 each", u.emitted(0), u.emitted(1), u.emitted(3))
	}
	if !testkit.Poll(20*time.Second, func() bool {
		r, d := u.src.Readiness()
		return !r && strings.Contains(d, "partition events/2 unavailable") && u.unavailableGauge() == 1
	}) {
		_, d := u.src.Readiness()
		t.Fatalf("readiness %q, gauge %v; want not ready naming events/2, gauge 1", d, u.unavailableGauge())
	}
	if splits := u.checkpointSplits(t, 1); !maps.Equal(splits, map[int32]int64{0: 10, 1: 10, 2: 5, 3: 10}) {
		t.Fatalf("checkpoint splits %v, want partition 2 at 5 and the others at 10", splits)
	}
	restore()
	produceTo([]int32{2}, 5)
	if !testkit.Poll(30*time.Second, all(10, 2)) {
		t.Fatalf("partition 2 emitted %v within 30s of getting its leader back, want 0..9", u.emitted(2))
	}
	if !testkit.Poll(20*time.Second, func() bool { r, _ := u.src.Readiness(); return r && u.unavailableGauge() == 0 }) {
		_, d := u.src.Readiness()
		t.Fatalf("readiness %q, gauge %v after partition 2 is back; want ready, 0", d, u.unavailableGauge())
	}
	if err := u.stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	for p := int32(0); p < 4; p++ {
		if got := u.emitted(p); !slices.Equal(got, seq(0, 10)) {
			t.Errorf("partition %d emitted offsets %v, want 0..9 once each", p, got)
		}
	}
}
