package source

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/runtime"
)

// TestUpsertChangelogSourceHeadersAfterBadRecords: an upsert changelog
// source (changelog: upsert_header) strips the changelog mode header and
// the change header from scratch (ownHeaders); a record whose headers
// stay as fetched (no header stripped) keeps a copy of its own while bad
// records (a change header that is no change kind, a value that is no
// JSON; skipped) and later records fill the scratch again. Every record
// is read from the channel only after all were emitted.
func TestUpsertChangelogSourceHeadersAfterBadRecords(t *testing.T) {
	ch := runtime.NewChannel(64)
	s := New(Config{Name: "upserts", Topic: "t", Partitions: 1, Only: []int32{0}, Changelog: true, UpsertChangelog: true,
		Decoder: connector.JSONFormat{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Output: runtime.NewOutput(nil, runtime.NewWriter([]runtime.Channel{ch}, runtime.ForwardPartitioner{}))})
	s.wms = newWatermarks(WatermarkConfig{})
	mode := runtime.ChangelogModeHeader
	rec := func(off int64, value string, hs ...string) *kgo.Record {
		kr := &kgo.Record{Topic: "t", Offset: off, Key: fmt.Appendf(nil, "k%d", off), Value: []byte(value), Timestamp: time.UnixMilli(1000 + off)}
		for j := 0; j < len(hs); j += 2 {
			kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: hs[j], Value: []byte(hs[j+1])})
		}
		return kr
	}
	in := []*kgo.Record{
		rec(0, `{"a":0}`, mode, runtime.UpsertChangelogMode, runtime.ChangeHeader, "+U", "h", "a0"),
		rec(1, `{"a":1}`, "h", "b1", "g", "b2"),                                          // nothing stripped: a copy
		rec(2, `{"a":2}`, "h", "c1", runtime.ChangeHeader, "+X", "g", "c2"),              // bad change kind: skipped
		rec(3, `{"a":`, "h", "d1", "g", "d2", "f", "d3"),                                 // no JSON, nothing stripped: skipped
		rec(4, `{"a":4}`, "x", "e1"),                                                     // nothing stripped: a copy
		rec(5, `{"a":5}`, runtime.ChangeHeader, "-D", mode, runtime.UpsertChangelogMode), // only changelog headers
		rec(6, `{"a":6}`, "y", "f1", "y", "f2", "y", "f3", "y", "f4"),                    // more headers than the scratch held
	}
	ctx := context.Background()
	for _, kr := range in {
		if err := s.emitFetched(ctx, kr); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{
		"k0 +U [h=a0]",
		"k1 +I [h=b1 g=b2]",
		"k4 +I [x=e1]",
		"k5 -D []",
		"k6 +I [y=f1 y=f2 y=f3 y=f4]",
	}
	var recs []runtime.Record
	for range want {
		recs = append(recs, (<-ch).Record)
	}
	if n := len(ch); n != 0 {
		t.Fatalf("%d records more than %d", n, len(want))
	}
	var got []string
	for _, r := range recs {
		var hs []string
		for _, h := range r.Headers {
			hs = append(hs, h.Key+"="+string(h.Value))
		}
		got = append(got, fmt.Sprintf("%s %s %v", r.Key, r.Change, hs))
		if len(r.Headers) == 0 && r.Headers != nil {
			t.Errorf("record %s: empty non-nil headers", r.Key)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("records\n%q\nwant\n%q", got, want)
	}
	if slices.ContainsFunc(s.exchange.recHeaders, func(h runtime.Header) bool { return h.Key != "" || h.Value != nil }) {
		t.Errorf("the scratch still refers to fetched headers: %v", s.exchange.recHeaders)
	}
}
