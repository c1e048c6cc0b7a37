package source

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/runtime"
)

// TestDecodeDetails checks the reason and the exact detail decode gives
// each bad value (the kstreamd.error header of a dead-lettered record is
// "reason: detail"): every reason the source itself reports has one.
func TestDecodeDetails(t *testing.T) {
	check := func(_, value []byte) error {
		if string(value) == `{"bad":true}` {
			return errors.New(`rule "R9": no second shape`)
		}
		return nil
	}
	for _, tc := range []struct {
		name       string
		cfg        Config
		value      []byte
		wantReason string
		wantDetail string
	}{
		{name: "good", cfg: Config{Format: FormatJSON}, value: []byte(`{"a":1}`)},
		{name: "null", cfg: Config{Format: FormatJSON}, value: nil, wantReason: ReasonEmptyValue, wantDetail: "the value is null"},
		{name: "empty", cfg: Config{Format: FormatJSON}, value: []byte{}, wantReason: ReasonEmptyValue, wantDetail: "the value is 0 bytes"},
		{name: "too large", cfg: Config{Format: FormatJSON, MaxRecordBytes: 4}, value: []byte(`{"a":1}`), wantReason: ReasonTooLarge, wantDetail: "7 bytes, limit 4"},
		{name: "malformed", cfg: Config{Format: FormatJSON}, value: []byte(`{"a":}`), wantReason: ReasonMalformedJSON,
			wantDetail: "invalid character '}' looking for beginning of value at offset 6"},
		{name: "truncated", cfg: Config{Format: FormatJSON}, value: []byte(`[1,2`), wantReason: ReasonMalformedJSON,
			wantDetail: "unexpected end of JSON input at offset 4"},
		{name: "not json, string format", cfg: Config{Format: FormatString}, value: []byte(`{"a":}`)},
		{name: "invalid rule", cfg: Config{Format: FormatJSON, Check: check}, value: []byte(`{"bad":true}`), wantReason: ReasonInvalid,
			wantDetail: `rule "R9": no second shape`},
		{name: "tombstone", cfg: Config{Format: FormatJSON, Tombstones: true, Check: check}, value: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &KafkaSource{cfg: tc.cfg}
			reason, detail := s.decode(&runtime.Record{Value: tc.value})
			if reason != tc.wantReason || detail != tc.wantDetail {
				t.Fatalf("decode(%q) = %q, %q; want %q, %q", tc.value, reason, detail, tc.wantReason, tc.wantDetail)
			}
		})
	}
}

// TestCommitGroupHonoursCancellation: the monitoring group's offset commit
// runs with the subtask's ctx: a cancelled job commits nothing (nor waits
// up to 5 s for the broker), logs so and forgets the checkpoint's offsets;
// a live one commits them.
func TestCommitGroupHonoursCancellation(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "items"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var log testkit.SyncBuffer
	s := &KafkaSource{cfg: Config{Name: "items", Topic: "items", Group: "kstreamd-items"}, cl: cl,
		logger: slog.New(slog.NewTextHandler(&log, nil)), committed: map[int64]map[int32]int64{3: {0: 42}}}
	committed := func() (int64, bool) {
		offs, err := kadm.NewClient(cl).FetchOffsets(context.Background(), "kstreamd-items")
		if errors.Is(err, kerr.GroupIDNotFound) {
			return 0, false
		}
		if err != nil {
			t.Fatal(err)
		}
		o, ok := offs.Lookup("items", 0)
		return o.At, ok
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s.commitGroup(ctx, 3)
	if got := log.String(); !strings.Contains(got, `msg="not committing checkpoint offsets to the monitoring group: the job is cancelled" group=kstreamd-items checkpoint_id=3`) {
		t.Fatalf("log %q, want the skipped commit", got)
	}
	if at, ok := committed(); ok || len(s.committed) != 0 {
		t.Fatalf("after a cancelled commit: group offset %d (%v), remembered %v; want none and checkpoint 3 forgotten", at, ok, s.committed)
	}

	s.committed = map[int64]map[int32]int64{4: {0: 42}}
	s.commitGroup(context.Background(), 4)
	if at, ok := committed(); !ok || at != 42 {
		t.Fatalf("after a live commit: group offset %d (%v), want 42", at, ok)
	}
}
