package operators

import (
	"errors"
	"fmt"
	"testing"

	"github.com/kstreamd/kstreamd/runtime"
)

// TestAggregateDistinctFilterDirectAgrees: a count_distinct filter's
// verdict through Program.EvalBool (the direct evaluator, evalFilters'
// first try) is the verdict of Program.Eval (CEL's interpreter, what
// evalFilters took before): for every filter of comparisons, arithmetic,
// logic and membership over int, double, string, bool, null, huge and
// missing fields and nested objects, EvalBool returns a bool exactly when
// Eval returns that bool without error; on any other outcome evalFilters
// fails the record with an eval_error, as before.
func TestAggregateDistinctFilterDirectAgrees(t *testing.T) {
	filters := []string{
		"amount < 7", "amount < 7.5", "amount >= 7.0", "amount == 3", "amount != 3", "amount == 3.0", "3 < amount",
		"user == 'u1'", "user < 'u2'", "user != 'u1'", "amount > 2 && user == 'u1'", "amount > 2 || missing > 1",
		"missing > 1 || amount > 2", "missing > 1 && amount > 100", "missing > 1", "amount", "user", "amount == 'x'",
		"amount + 1 > 4", "amount * 2 >= 6", "amount - 1 < 0", "amount / 2 == 1", "amount % 2 == 1", "amount / 0 > 1",
		"size(user) > 1", "has(nested.x)", "nested.x == 1", "nested.x > 0.5", "amount in [3, 9]", "!(amount < 7)",
		"double(amount) > 2.5", "int(amount) > 2", "amount > 9223372036854775807", "amount > 18446744073709551615u",
		"flag", "flag == true", "!flag", "amount == null", "user == null", "amount > -1 ? true : false",
		"user.startsWith('u')", "amount >= 5 && amount < 15",
	}
	values := []string{
		`{"amount":3,"user":"u1","flag":true,"nested":{"x":1}}`,
		`{"amount":9,"user":"u2","flag":false,"nested":{"x":0.7}}`,
		`{"amount":2.5,"user":"u10","nested":{}}`,
		`{"amount":-4,"user":""}`,
		`{"amount":"3","user":3}`,
		`{"amount":null,"user":null,"flag":null,"nested":null}`,
		`{"amount":9223372036854775807,"user":"u1"}`,
		`{"amount":18446744073709551615,"user":"u1"}`,
		`{"amount":1e300,"user":"u1","flag":1}`,
		`{"amount":true,"user":["u1"]}`,
		`{"user":"u1"}`,
		`{}`,
	}
	for _, src := range filters {
		f := boolCompiled(t, src)
		agg := NewAggregate(AggregateParams{Aggregates: []AggregateSpec{
			{Name: "d", Fn: AggCountDistinct, Of: compiled(t, "1"), Filter: f},
		}}, false)
		for _, v := range values {
			rec := runtime.Record{Key: []byte("k"), Value: []byte(v)}
			want, wantErr := "", ""
			out, err := agg.filters[0].Program().Eval(agg.env.Reset(&rec))
			switch b, ok := out.(bool); {
			case err != nil:
				wantErr = "eval"
			case !ok:
				wantErr = "not a bool"
			default:
				want = fmt.Sprint(b)
			}
			got, gotErr := "", ""
			if err := agg.evalFilters(agg.env.Reset(&rec)); err != nil {
				var re *runtime.RecordError
				if !errors.As(err, &re) || re.Reason != runtime.ReasonEvalError {
					t.Fatalf("filter %s on %s: error %v, want an eval_error", src, v, err)
				}
				gotErr = "error"
			} else {
				got = fmt.Sprint(agg.passes[0])
			}
			if (wantErr != "") != (gotErr != "") || got != want {
				t.Errorf("filter %s on %s: %q (error %q), want (Eval) %q (error %q)", src, v, got, gotErr, want, wantErr)
			}
		}
	}
}
