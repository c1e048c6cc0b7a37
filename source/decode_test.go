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
		wantValue  string // the value after decoding, when set
		wantErr    string // decode fails the subtask with this error
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
		// A Decoder replaces the format's check: it transforms the value
		// (and the check then sees the decoded value), its
		// *runtime.RecordError gives the reason and detail, and any other
		// error fails the subtask.
		{name: "decoder transforms", cfg: Config{Format: FormatString, Decoder: hexDecoder{}, Check: check}, value: []byte("7b2262616422..."),
			wantValue: `{"ok":true}`},
		{name: "decoder transforms, check sees the decoded value", cfg: Config{Decoder: hexDecoder{}, Check: check}, value: []byte("bad"),
			wantReason: ReasonInvalid, wantDetail: `rule "R9": no second shape`},
		{name: "decoder refuses", cfg: Config{Decoder: hexDecoder{}}, value: []byte("unknown"), wantReason: "schema_not_found", wantDetail: "schema id 42"},
		{name: "decoder fails", cfg: Config{Name: "in", Decoder: hexDecoder{}}, value: []byte("down"),
			wantErr: "source in: decode t/3@9: registry unreachable"},
		{name: "decoder not asked for a null", cfg: Config{Decoder: hexDecoder{}}, value: nil, wantReason: ReasonEmptyValue, wantDetail: "the value is null"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &KafkaSource{cfg: tc.cfg}
			rec := &runtime.Record{Value: tc.value, Origin: runtime.Origin{Topic: "t", Partition: 3, Offset: 9}}
			reason, detail, err := s.decode(context.Background(), rec)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("decode(%q) error %v, want %q", tc.value, err, tc.wantErr)
				}
				return
			}
			if err != nil || reason != tc.wantReason || detail != tc.wantDetail {
				t.Fatalf("decode(%q) = %q, %q, %v; want %q, %q", tc.value, reason, detail, err, tc.wantReason, tc.wantDetail)
			}
			if tc.wantValue != "" && (string(rec.Value) != tc.wantValue || rec.Format != runtime.FormatJSON) {
				t.Fatalf("decoded value %q (format %v), want %q as JSON", rec.Value, rec.Format, tc.wantValue)
			}
		})
	}
}

// hexDecoder is a test Decoder: "bad" decodes to {"bad":true}, "unknown"
// is a bad record with reason schema_not_found, "down" an error, and
// anything else decodes to {"ok":true}.
type hexDecoder struct{}

func (hexDecoder) Decode(_ context.Context, rec *runtime.Record) error {
	switch string(rec.Value) {
	case "bad":
		rec.Value = []byte(`{"bad":true}`)
	case "unknown":
		return &runtime.RecordError{Reason: "schema_not_found", Detail: "schema id 42"}
	case "down":
		return errors.New("registry unreachable")
	default:
		rec.Value = []byte(`{"ok":true}`)
	}
	rec.Format = runtime.FormatJSON
	return nil
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
