package demo

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestIDsContinueAcrossStarts checks that the demo's item ids go on from
// the highest id on the items topic (not from 1 at every start), stepping
// over records that are not items, and start at 1 on an empty topic.
func TestIDsContinueAcrossStarts(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "items", "empty", "rules"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	opts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
	cl, err := kgo.NewClient(append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	item := func(p int32, v string) *kgo.Record {
		return &kgo.Record{Topic: "items", Partition: p, Value: []byte(v)}
	}
	if err := cl.ProduceSync(ctx,
		item(0, `{"id":3,"color":"red","shape":"CIRCLE"}`), item(0, `{"id":41,"color":"red","shape":"CIRCLE"}`),
		item(1, `{"id":7,"color":"blue","shape":"CIRCLE"}`), item(1, `{not json`),
		item(2, `{"id":40,"color":"green","shape":"CIRCLE"}`),
	).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for topic, want := range map[string]int64{"items": 41, "empty": 0} {
		if got, err := LastItemID(ctx, opts, topic); err != nil || got != want {
			t.Fatalf("LastItemID(%s) = %d, %v; want %d", topic, got, err, want)
		}
	}

	// A demo started now writes 42, 43, ...
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- Run(runCtx, Config{ClientOpts: opts, ItemsTopic: "items", RulesTopic: "rules", ItemsPerSecond: 100, Logger: slog.New(slog.DiscardHandler)})
	}()
	var ids []int64 // every item id on the topic
	if !testkit.Poll(20*time.Second, func() bool {
		ids = nil
		for _, r := range testkit.ReadTopic(t, c.ListenAddrs(), "items", 5*time.Second) {
			var it Item
			if json.Unmarshal(r.Value, &it) == nil {
				ids = append(ids, it.ID)
			}
		}
		return len(ids) >= 4+3
	}) {
		t.Fatalf("the demo wrote %v after 20s, want at least 3 new items", ids)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	for i, id := range ids {
		want := int64(42 + i - 4)
		if i < 4 {
			want = []int64{3, 7, 40, 41}[i]
		}
		if id != want {
			t.Fatalf("item ids %v, want the 4 written before (3, 7, 40, 41), then 42, 43, ... in a row", ids)
		}
	}
}
