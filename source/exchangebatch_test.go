package source

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/runtime"
)

// exchangeTopic makes a one-partition topic "rep" and returns the client
// options and a function producing Kafka records into it.
func exchangeTopic(t *testing.T) ([]kgo.Opt, func(...*kgo.Record)) {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "rep"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	opts := []kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}
	prod, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic("rep"), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	return opts, func(recs ...*kgo.Record) {
		t.Helper()
		for _, r := range recs {
			if err := prod.ProduceSync(context.Background(), r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// exchangeBatchRecord returns a Kafka record holding recs as an exchange
// batch, as a repartition sink writes it.
func exchangeBatchRecord(value []byte) *kgo.Record {
	return &kgo.Record{Value: value, Headers: []kgo.RecordHeader{{Key: runtime.MarkerHeader, Value: []byte(runtime.ExchangeBatchMarker)}}, Timestamp: time.UnixMilli(777)}
}

// runExchangeSource runs a changelog source of partition 0 of "rep"
// (a repartition source when upstream is not empty) until it emitted n
// records, or failed; it returns each record as "offset value ts change
// headers" and the error Run returned, if it ended.
func runExchangeSource(t *testing.T, opts []kgo.Opt, upstream []string, n int) ([]string, error) {
	t.Helper()
	return runExchangeSourceWith(t, opts, upstream, n, nil)
}

// runExchangeSourceWith is runExchangeSource with the source's Config
// changed by set (if not nil).
func runExchangeSourceWith(t *testing.T, opts []kgo.Opt, upstream []string, n int, set func(*Config)) ([]string, error) {
	t.Helper()
	ch := runtime.NewChannel(64)
	cfg := Config{
		Name: "repartition.1", Topic: "rep", Partitions: 1, Subtask: 0, Parallelism: 1, Only: []int32{0},
		Upstream: upstream, Changelog: true,
		ClientOpts: opts, Responder: &snapRecorder{snap: make(chan runtime.TaskSnapshot, 1)}, Format: FormatJSON,
		Output: runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{})),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if set != nil {
		set(&cfg)
	}
	src := New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, nil) }()
	var got []string
	deadline := time.After(time.Minute)
	for len(got) < n {
		select {
		case el := <-ch:
			if el.Kind != runtime.KindRecord {
				continue
			}
			r := el.Record
			var hs []string
			for _, h := range r.Headers {
				hs = append(hs, h.Key+"="+string(h.Value))
			}
			got = append(got, fmt.Sprintf("@%d %s ts=%d %v key=%s %v", r.Origin.Offset, r.Value, r.Timestamp.UnixMilli(), r.Change, r.Key, hs))
		case err := <-done:
			return got, err
		case <-deadline:
			t.Fatalf("emitted %q, want %d records", got, n)
		}
	}
	cancel()
	<-done
	return got, nil
}

// TestRepartitionSourceReadsBothFormats: a repartition source reads, in
// one partition, records of the format before exchange batches (what a
// topic holds when its daemons are upgraded) and exchange batches after
// them, in order: each batch record emits its records with their own
// key, value, change kind, headers and timestamp (the batch's when they
// have none) at the batch's offset; a marker between them is no record.
func TestRepartitionSourceReadsBothFormats(t *testing.T) {
	opts, produce := exchangeTopic(t)
	old := func(v string, ts int64, change string) *kgo.Record {
		return &kgo.Record{Key: []byte("k"), Value: []byte(v), Timestamp: time.UnixMilli(ts), Headers: []kgo.RecordHeader{{Key: runtime.ChangeHeader, Value: []byte(change)}}}
	}
	var b runtime.ExchangeBatch
	b.Append(time.UnixMilli(300), []byte("a"), []byte(`"b1"`), 1)
	b.AppendHeader(runtime.ChangeHeader, []byte("-U"))
	b.Append(time.Time{}, []byte("b"), []byte(`"b2"`), 2)
	b.AppendHeader("trace", []byte("t"))
	b.AppendHeader(runtime.ChangeHeader, []byte("+U"))
	first := b.Take(0)
	b.Append(time.UnixMilli(500), nil, []byte(`"b3"`), 1)
	b.AppendHeader(runtime.ChangeHeader, []byte("+I"))
	second := b.Take(0)
	wm := runtime.Marker{Kind: runtime.MarkerWatermark, Unit: "0/0", Watermark: time.UnixMilli(250)}.Record()
	marker := &kgo.Record{Value: wm.Value, Timestamp: wm.Timestamp}
	for _, h := range wm.Headers {
		marker.Headers = append(marker.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	produce(
		old(`"o1"`, 100, "+I"),      // 0
		old(`"o2"`, 200, "-D"),      // 1
		marker,                      // 2
		exchangeBatchRecord(first),  // 3
		old(`"o3"`, 400, "+I"),      // 4: a daemon not yet upgraded
		exchangeBatchRecord(second), // 5
	)
	got, err := runExchangeSource(t, opts, []string{"0/0"}, 6)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`@0 "o1" ts=100 +I key=k []`,
		`@1 "o2" ts=200 -D key=k []`,
		`@3 "b1" ts=300 -U key=a []`,
		`@3 "b2" ts=777 +U key=b [trace=t]`,
		`@4 "o3" ts=400 +I key=k []`,
		`@5 "b3" ts=500 +I key= []`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("repartition source emitted\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

}

// TestRepartitionSourceRefusesBadBatch: an exchange batch of another
// version, or a truncated one, fails the repartition source naming the
// record, wrapping runtime.ErrExchangeBatch, after the records before it.
func TestRepartitionSourceRefusesBadBatch(t *testing.T) {
	for _, tc := range []struct {
		name  string
		value []byte
	}{
		{"version 3", []byte{3, 0, 0}},
		{"truncated", []byte{runtime.ExchangeBatchVersion, 2, 10, '"'}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts, produce := exchangeTopic(t)
			produce(&kgo.Record{Key: []byte("k"), Value: []byte(`"o1"`), Timestamp: time.UnixMilli(100), Headers: []kgo.RecordHeader{{Key: runtime.ChangeHeader, Value: []byte("+I")}}},
				exchangeBatchRecord(tc.value))
			got, err := runExchangeSource(t, opts, []string{"0/0"}, 2)
			if len(got) != 1 || !errors.Is(err, runtime.ErrExchangeBatch) || !strings.Contains(err.Error(), "source repartition.1: rep/0@1: ") {
				t.Errorf("emitted %q, err %v; want one record, then rep/0@1's ErrExchangeBatch", got, err)
			}
		})
	}
}
