package sink

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// changelogInput is an aggregate's changelog of two keys: a's row 1, its
// update to 2, b's row 1 and its deletion, carrying a header of their own.
func changelogInput() []runtime.Record {
	rec := func(c runtime.ChangeKind, key, v string) runtime.Record {
		return runtime.Record{Key: []byte(key), Value: []byte(v), Timestamp: time.UnixMilli(1000), Change: c,
			Headers: []runtime.Header{{Key: "trace", Value: []byte(key + v)}}}
	}
	return []runtime.Record{
		rec(runtime.ChangeInsert, "a", "1"), rec(runtime.ChangeUpdateBefore, "a", "1"), rec(runtime.ChangeUpdateAfter, "a", "2"),
		rec(runtime.ChangeInsert, "b", "1"), rec(runtime.ChangeDelete, "b", "1"),
	}
}

// sinkText renders the records read back per key, in offset order (one
// key lives in one partition), as "<key>=<value or null> [<header>...]".
func sinkText(recs []*kgo.Record) map[string][]string {
	out := map[string][]string{}
	for _, r := range recs {
		v := "null"
		if r.Value != nil {
			v = string(r.Value)
		}
		s := string(r.Key) + "=" + v
		for _, h := range r.Headers {
			s += " " + h.Key + ":" + string(h.Value)
		}
		out[string(r.Key)] = append(out[string(r.Key)], s)
	}
	return out
}

// upsertWant and headerWant are what the two modes write for
// changelogInput.
var (
	upsertWant = map[string][]string{
		"a": {"a=1 trace:a1", "a=2 trace:a2"},
		"b": {"b=1 trace:b1", "b=null trace:b1"},
	}
	headerWant = map[string][]string{
		"a": {"a=1 trace:a1 kstreamd-change:+I", "a=1 trace:a1 kstreamd-change:-U", "a=2 trace:a2 kstreamd-change:+U"},
		"b": {"b=1 trace:b1 kstreamd-change:+I", "b=1 trace:b1 kstreamd-change:-D"},
	}
	upsertHeaderWant = map[string][]string{
		"a": {"a=1 trace:a1 kstreamd-change:+I kstreamd-changelog:upsert", "a=1 trace:a1 kstreamd-change:-U kstreamd-changelog:upsert", "a=2 trace:a2 kstreamd-change:+U kstreamd-changelog:upsert"},
		"b": {"b=1 trace:b1 kstreamd-change:+I kstreamd-changelog:upsert", "b=1 trace:b1 kstreamd-change:-D kstreamd-changelog:upsert"},
	}
)

// TestChangelogRecordModeHeader: a header-mode sink writes one
// kstreamd-changelog header, "upsert", on every record in
// ChangelogUpsertHeader mode and none in ChangelogHeader mode, whatever
// the record carried in (a table source keeps a topic's headers, so a
// record may arrive with a stale mark or kind).
func TestChangelogRecordModeHeader(t *testing.T) {
	rec := runtime.Record{Key: []byte("u1"), Value: []byte(`{"country":"DE"}`), Change: runtime.ChangeUpdateAfter, Headers: []runtime.Header{
		{Key: runtime.ChangelogModeHeader, Value: []byte("upsert")}, {Key: "trace", Value: []byte("t")}, {Key: runtime.ChangeHeader, Value: []byte("+I")},
	}}
	for mode, want := range map[ChangelogMode]string{
		ChangelogHeader:       "u1={\"country\":\"DE\"} trace:t kstreamd-change:+U",
		ChangelogUpsertHeader: "u1={\"country\":\"DE\"} trace:t kstreamd-change:+U kstreamd-changelog:upsert",
	} {
		var kr kgo.Record
		if !changelogRecord(mode, &kr, &rec) {
			t.Fatalf("%v: record dropped", mode)
		}
		if got := sinkText([]*kgo.Record{&kr})["u1"]; !slices.Equal(got, []string{want}) {
			t.Errorf("%v: wrote %q, want %q", mode, got, want)
		}
	}
}

// TestKafkaTxnChangelogModes writes a changelog through the exactly-once
// committer in both modes and reads it back read_committed: upsert drops
// the -U and writes the -D as a tombstone; header writes every record with
// its kind in the kstreamd-change header after the record's own headers.
func TestKafkaTxnChangelogModes(t *testing.T) {
	for _, c := range []struct {
		mode ChangelogMode
		want map[string][]string
	}{{ChangelogUpsert, upsertWant}, {ChangelogHeader, headerWant}, {ChangelogUpsertHeader, upsertHeaderWant}} {
		t.Run(fmt.Sprint(c.mode), func(t *testing.T) {
			opts := newCluster(t)
			logger, _ := testLogger()
			ctx := context.Background()
			k := NewKafkaTxnCommitter(KafkaTxnConfig{
				Name: "out", Topic: testTopic, TransactionalIDPrefix: "p", PoolSize: 3, Changelog: c.mode,
				TransactionTimeout: time.Minute, ClientOpts: opts, Logger: logger,
			})
			defer k.Close()
			if err := k.BeginTransaction(ctx); err != nil {
				t.Fatal(err)
			}
			for _, r := range changelogInput() {
				if err := k.Write(ctx, r); err != nil {
					t.Fatal(err)
				}
			}
			cm, err := k.PreCommit(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			if err := k.Commit(ctx, cm); err != nil {
				t.Fatal(err)
			}
			got := sinkText(testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), testTopic, 10*time.Second))
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("read back %q, want %q", got, c.want)
			}
		})
	}
}

// TestBufferingSinkKeepsChangeKind: a buffering sink's buffered changelog
// records keep their kind through a checkpoint and a restore: the restored
// sink writes them as the mode says (upsert: no -U, -D a tombstone;
// header: every kind in its header), not as inserts.
func TestBufferingSinkKeepsChangeKind(t *testing.T) {
	for _, c := range []struct {
		mode ChangelogMode
		want map[string][]string
	}{{ChangelogUpsert, upsertWant}, {ChangelogHeader, headerWant}} {
		t.Run(fmt.Sprint(c.mode), func(t *testing.T) {
			opts := newCluster(t)
			logger, _ := testLogger()
			ctx := context.Background()
			newSink := func(restored map[string]state.OperatorListSnapshot) *BufferingSink {
				return NewBufferingSink(New(Config{Name: "out", Topic: testTopic, Changelog: c.mode, ClientOpts: opts, Logger: logger}), 100, restored)
			}
			b := newSink(nil)
			if err := b.Open(ctx); err != nil {
				t.Fatal(err)
			}
			for _, r := range changelogInput() {
				if err := b.ProcessRecord(ctx, 0, r); err != nil {
					t.Fatal(err)
				}
			}
			fin, err := b.SnapshotState(ctx, &runtime.Barrier{CheckpointID: 1})
			if err != nil {
				t.Fatal(err)
			}
			snap, err := fin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			b.Close() // crash: the buffer lives only in the snapshot
			var ts checkpoint.TaskState
			if err := json.Unmarshal(snap.State, &ts); err != nil {
				t.Fatal(err)
			}
			r := newSink(map[string]state.OperatorListSnapshot{BufferedState: ts.Operator[BufferedState]})
			if err := r.Open(ctx); err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if err := r.NotifyCheckpointComplete(ctx, 2); err != nil {
				t.Fatal(err)
			}
			got := sinkText(testkit.ReadTopicWith(t, opts, kgo.ReadCommitted(), testTopic, 10*time.Second))
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("read back %q, want %q", got, c.want)
			}
		})
	}
}

// TestBufferedRecordOldFormat: a buffered record written before changelogs
// (no "change" field) restores as an insert.
func TestBufferedRecordOldFormat(t *testing.T) {
	var r bufferedRecord
	if err := json.Unmarshal([]byte(`{"key":"YQ==","value":"MQ==","timestamp":"1970-01-01T00:00:01Z"}`), &r); err != nil {
		t.Fatal(err)
	}
	if r.Change != runtime.ChangeInsert || string(r.Key) != "a" || string(r.Value) != "1" {
		t.Fatalf("decoded %+v", r)
	}
	e, _ := json.Marshal(bufferedRecord{Value: []byte("1"), Change: runtime.ChangeDelete})
	if !slices.Contains([]string{`{"value":"MQ==","timestamp":"0001-01-01T00:00:00Z","change":3}`}, string(e)) {
		t.Fatalf("encoded %s", e)
	}
}
