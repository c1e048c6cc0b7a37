package operators

import (
	"errors"
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/runtime"
)

// TestTimestampAssignerBounds: the assigner's time in each unit, and the
// values that cannot be an epoch time in that unit: event_time_out_of_range
// (a µs or ns value of today as ms, int64's extremes, a negative time, a
// time before 1970 or a double past the bounds), while a result that is no
// time at all stays eval_error.
func TestTimestampAssignerBounds(t *testing.T) {
	for _, tc := range []struct {
		unit   TimestampUnit
		value  string
		want   int64  // ms, when reason is ""
		reason string // the RecordError's reason, "" for none
	}{
		{TimestampMillis, `1733000000000`, 1733000000000, ""},
		{"", `0`, 0, ""},
		{TimestampMillis, `253402300799999`, 253402300799999, ""},
		{TimestampMillis, `1733000000000.4`, 1733000000000, ""},
		{TimestampMillis, `1733000000000000`, 0, runtime.ReasonEventTimeOutOfRange},    // µs
		{TimestampMillis, `1733000000000000000`, 0, runtime.ReasonEventTimeOutOfRange}, // ns
		{TimestampMillis, `9223372036854775807`, 0, runtime.ReasonEventTimeOutOfRange},
		{TimestampMillis, `-9223372036854775808`, 0, runtime.ReasonEventTimeOutOfRange},
		{TimestampMillis, `18446744073709551615`, 0, runtime.ReasonEventTimeOutOfRange},
		{TimestampMillis, `-1`, 0, runtime.ReasonEventTimeOutOfRange},
		{TimestampMillis, `253402300800000`, 0, runtime.ReasonEventTimeOutOfRange},
		{TimestampMillis, `1e300`, 0, runtime.ReasonEventTimeOutOfRange},
		{TimestampSeconds, `1733000000.25`, 1733000000250, ""},
		{TimestampSeconds, `1733000000000`, 0, runtime.ReasonEventTimeOutOfRange}, // ms as s
		{TimestampSeconds, `9223372036854775807`, 0, runtime.ReasonEventTimeOutOfRange},
		{TimestampSeconds, `-0.5`, 0, runtime.ReasonEventTimeOutOfRange},
		{TimestampRFC3339, `"2024-11-30T20:53:20.250Z"`, 1733000000250, ""},
		{TimestampRFC3339, `"1969-12-31T23:59:59Z"`, 0, runtime.ReasonEventTimeOutOfRange},
		{TimestampRFC3339, `"9999-12-31T23:59:59.999Z"`, 253402300799999, ""},
		{TimestampRFC3339, `"9999-12-31T23:59:59Z"`, 253402300799000, ""},
		{TimestampRFC3339, `"9999-12-31T23:00:00-01:00"`, 0, runtime.ReasonEventTimeOutOfRange},
		{TimestampMillis, `"1733000000000"`, 0, runtime.ReasonEvalError},
		{TimestampRFC3339, `1733000000000`, 0, runtime.ReasonEvalError},
	} {
		assign := NewTimestampAssigner(compiled(t, "ts"), tc.unit)
		ts, err := assign(&runtime.Record{Value: []byte(`{"ts":` + tc.value + `}`)})
		if tc.reason == "" {
			if err != nil || ts.UnixMilli() != tc.want {
				t.Errorf("%s %s: %v, %v; want %d ms", tc.unit, tc.value, ts.UnixMilli(), err, tc.want)
			}
			continue
		}
		var re *runtime.RecordError
		if !errors.As(err, &re) || re.Reason != tc.reason {
			t.Errorf("%s %s: %v, %v; want reason %s", tc.unit, tc.value, ts, err, tc.reason)
			continue
		}
		if tc.reason == runtime.ReasonEventTimeOutOfRange && !strings.HasPrefix(re.Detail, `timestamp expression "ts" gave `) {
			t.Errorf("%s %s: detail %q", tc.unit, tc.value, re.Detail)
		}
	}
}
