package operators

import (
	"fmt"
	"math"
	"time"

	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/runtime"
)

// TimestampUnit says how a source's timestamp expression result is read.
type TimestampUnit string

// The values of TimestampUnit.
const (
	// TimestampMillis: a number of milliseconds since the Unix epoch (the
	// default).
	TimestampMillis TimestampUnit = "ms"
	// TimestampSeconds: a number of seconds since the Unix epoch; a
	// fraction gives milliseconds.
	TimestampSeconds TimestampUnit = "s"
	// TimestampRFC3339: a string such as "2024-05-01T12:00:00.250Z".
	TimestampRFC3339 TimestampUnit = "rfc3339"
)

// UnmarshalText implements encoding.TextUnmarshaler, refusing an unknown
// unit.
func (u *TimestampUnit) UnmarshalText(text []byte) error {
	return setEnum(u, text, TimestampMillis, TimestampSeconds, TimestampRFC3339)
}

// NewTimestampAssigner returns the function that reads a record's event
// time from expression e, its result in unit ("" means ms) (Flink's
// TimestampAssigner). The function's errors are *runtime.RecordError: with
// reason eval_error when the expression failed, or its result is not a
// number (ms, s) or an RFC 3339 string (rfc3339); with reason
// event_time_out_of_range when the time it gives is outside
// [runtime.MinEventTime, runtime.MaxEventTime] (before the epoch, after
// 9999-12-31, NaN or infinite: a microsecond or nanosecond value read as
// ms). A fraction of a millisecond is rounded to the nearest. It is not
// safe for concurrent use: each source subtask gets its own.
func NewTimestampAssigner(e Expression, unit TimestampUnit) func(rec *runtime.Record) (time.Time, error) {
	var env RecordEnv
	what := fmt.Sprintf("timestamp expression %q", e.String())
	if unit == "" {
		unit = TimestampMillis
	}
	return func(rec *runtime.Record) (time.Time, error) {
		// An int result (ms or s) comes unboxed: no allocation per
		// record for the usual timestamp field.
		i, isInt, v, err := e.Program().EvalInt64(env.Reset(rec))
		if err != nil {
			return time.Time{}, EvalRecordError(err)
		}
		env.Keep(rec) // the operators after the source read what it read
		if isInt {
			if unit == TimestampMillis {
				if re := runtime.CheckEventTime(i, what); re != nil {
					return time.Time{}, re
				}
				return time.UnixMilli(i), nil
			}
			v = i // s: as a number below; rfc3339: refused below
		}
		bad := func(msg string) (time.Time, error) {
			return time.Time{}, resultError(e, "timestamp", msg)
		}
		if unit == TimestampRFC3339 {
			s, ok := v.(string)
			if !ok {
				return bad("needs an RFC 3339 string, got " + expression.TypeName(v))
			}
			t, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				return bad(fmt.Sprintf("is not RFC 3339: %q", s))
			}
			if re := runtime.CheckEventTime(t.UnixMilli(), what); re != nil {
				return time.Time{}, re
			}
			return t, nil
		}
		var f float64
		switch x := v.(type) {
		case int64:
			if unit == TimestampMillis {
				if re := runtime.CheckEventTime(x, what); re != nil {
					return time.Time{}, re
				}
				return time.UnixMilli(x), nil
			}
			f = float64(x)
		case uint64:
			f = float64(x)
		case float64:
			f = x
		default:
			return bad("needs a number, got " + expression.TypeName(v))
		}
		if unit == TimestampSeconds {
			f *= 1000
		}
		// NaN fails both comparisons; the bounds are exact in float64.
		if !(f >= float64(runtime.MinEventTime)-0.5 && f < float64(runtime.MaxEventTime)+0.5) {
			return time.Time{}, runtime.EventTimeOutOfRange(what, fmt.Sprintf("%v %s", v, unit))
		}
		return time.UnixMilli(int64(math.Round(f))), nil
	}
}
