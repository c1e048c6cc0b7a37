package operators

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/runtime"
)

// TestTimestampAssignerAsEval attacks the unboxed int timestamp
// (expression.Program.EvalInt64): for every unit and expressions giving
// ints (in and out of bounds, at int64's ends, through arithmetic that
// overflows), uints, doubles (fractions, NaN via division, exponents),
// nulls, strings, lists and missing fields, on records of each kind, the
// assigner returns exactly the time and the error text of the assigner
// that evaluated with Eval (evalTimestampAssigner, 706ff2d's code).
func TestTimestampAssignerAsEval(t *testing.T) {
	exprs := []string{
		`ts`, `ts + 1`, `ts * 1000`, `ts * 1000000000000`, `ts - 9223372036854775807`, `-ts`,
		`uint(ts)`, `u`, `d`, `d * 1000.0`, `ts / 1000`, `double(ts) / 0.0`, `0.0 / 0.0`,
		`s`, `n`, `l`, `missing`, `has(ts) ? ts : 0`, `int(s)`, `timestamp(s)`, `ts > 0 ? ts : d`,
		`event_type == 0 ? person.dateTime : event_type == 1 ? auction.dateTime : bid.dateTime`,
	}
	recs := []string{
		`{"ts":1700000000123,"u":1700000000,"d":1700000000.5,"s":"2023-11-14T22:13:20.5Z","n":null,"l":[1],"event_type":2,"bid":{"dateTime":1700000000999}}`,
		`{"ts":1700000000,"u":18446744073709551615,"d":-1.5e300,"s":"1700000000","event_type":0,"person":{"dateTime":-62135596800001}}`,
		`{"ts":9223372036854775807,"u":0,"d":0.49999999999999994,"s":"x","event_type":1,"auction":{"dateTime":253402300800000}}`,
		`{"ts":-9223372036854775808,"d":1e-320,"s":"","event_type":1,"auction":{"dateTime":253402300799999}}`,
		`{"ts":0,"u":1,"d":2.5,"s":"2023-11-14T22:13:20Z","event_type":2,"bid":{"dateTime":1.5}}`,
		`{"ts":1.5e3,"event_type":2,"bid":{"dateTime":"1700000000000"}}`,
		`{"ts":"12","event_type":2,"bid":null}`,
		`[]`, `null`,
	}
	n := 0
	for _, src := range exprs {
		e, err := CompileExpression(src)
		if err != nil {
			continue // not an expression this language takes
		}
		for _, unit := range []TimestampUnit{"", TimestampMillis, TimestampSeconds, TimestampRFC3339} {
			got, want := NewTimestampAssigner(e, unit), evalTimestampAssigner(e, unit)
			for _, v := range recs {
				r1, r2 := testRecord(v), testRecord(v)
				t1, err1 := got(&r1)
				t2, err2 := want(&r2)
				if !t1.Equal(t2) || fmt.Sprint(err1) != fmt.Sprint(err2) || fmt.Sprintf("%T", err1) != fmt.Sprintf("%T", err2) {
					t.Errorf("%s (%q) on %s: %v, %v; Eval's assigner: %v, %v", src, unit, v, t1, err1, t2, err2)
				}
				n++
			}
		}
	}
	if n < 500 {
		t.Fatalf("only %d cases compiled", n)
	}
}

// evalTimestampAssigner is NewTimestampAssigner as 706ff2d had it,
// evaluating with Program.Eval (the result boxed), as the reference.
func evalTimestampAssigner(e Expression, unit TimestampUnit) func(rec *runtime.Record) (time.Time, error) {
	var env RecordEnv
	what := fmt.Sprintf("timestamp expression %q", e.String())
	if unit == "" {
		unit = TimestampMillis
	}
	return func(rec *runtime.Record) (time.Time, error) {
		v, err := e.Program().Eval(env.Reset(rec))
		if err != nil {
			return time.Time{}, EvalRecordError(err)
		}
		env.Keep(rec) // the operators after the source read what it read
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
