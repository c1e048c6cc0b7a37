package source

import (
	"errors"
	"testing"

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
