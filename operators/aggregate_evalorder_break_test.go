package operators

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/runtime"
)

// evalOrderWant are the rows (an update's -U and +U) and bad-record errors of
// TestAggregateSharedOfEvalOrder, as the base code (a9c897c, before an of
// repeated across aggregates was evaluated once) gives them.
var evalOrderWant = map[string]string{
	"last,sum,count_distinct,min": `{"key":"k","n":1,"a":1,"z":1,"b":1,"c":1,"d":1}
ERR bad record: eval_error: expression "amount + 0": 1:8: no operator + for string and int
ERR bad record: eval_error: expression "amount + 0": 1:8: no operator + for map and int
ERR bad record: eval_error: expression "amount": 1:1: no field "amount" in the record value
{"key":"k","n":1,"a":1,"z":1,"b":1,"c":1,"d":1}
{"key":"k","n":2,"a":4,"z":5,"b":5,"c":2,"d":1}
ERR bad record: eval_error: expression "amount + 0": 1:8: no operator + for null_type and int
ERR bad record: eval_error: expression "amount + 0": 1:8: no operator + for list and int
`,
	"count_distinct,first,max,avg": `{"key":"k","n":1,"a":1,"z":1,"b":1,"c":1,"d":1}
ERR bad record: eval_error: expression "amount + 0": 1:8: no operator + for string and int
ERR bad record: eval_error: expression "amount + 0": 1:8: no operator + for map and int
ERR bad record: eval_error: expression "amount": 1:1: no field "amount" in the record value
{"key":"k","n":1,"a":1,"z":1,"b":1,"c":1,"d":1}
{"key":"k","n":2,"a":2,"z":5,"b":1,"c":4,"d":2.5}
ERR bad record: eval_error: expression "amount + 0": 1:8: no operator + for null_type and int
ERR bad record: eval_error: expression "amount + 0": 1:8: no operator + for list and int
`,
	"first,last,count_distinct": `{"key":"k","n":1,"a":1,"z":1,"b":1,"c":1}
ERR bad record: eval_error: expression "amount + 0": 1:8: no operator + for string and int
ERR bad record: eval_error: expression "amount + 0": 1:8: no operator + for map and int
ERR bad record: eval_error: expression "amount": 1:1: no field "amount" in the record value
{"key":"k","n":1,"a":1,"z":1,"b":1,"c":1}
{"key":"k","n":2,"a":1,"z":5,"b":4,"c":2}
ERR bad record: eval_error: expression "amount + 0": 1:8: no operator + for null_type and int
ERR bad record: eval_error: expression "amount + 0": 1:8: no operator + for list and int
`,
	"min,count_distinct,sum": `{"key":"k","n":1,"a":1,"z":1,"b":1,"c":1}
ERR bad record: eval_error: expression "amount": aggregate a (min) needs a finite number, got string
ERR bad record: eval_error: expression "amount": aggregate a (min) needs a finite number, got map
ERR bad record: eval_error: expression "amount": 1:1: no field "amount" in the record value
{"key":"k","n":1,"a":1,"z":1,"b":1,"c":1}
{"key":"k","n":2,"a":1,"z":5,"b":2,"c":5}
ERR bad record: eval_error: expression "amount": aggregate a (min) needs a finite number, got null
ERR bad record: eval_error: expression "amount": aggregate a (min) needs a finite number, got list
`,
}

// TestAggregateSharedOfEvalOrder: configs without filter whose of is
// repeated across aggregates of every fn reject the records the base code
// rejected, with the same first error (order and message), and fold the
// rest to the same rows.
func TestAggregateSharedOfEvalOrder(t *testing.T) {
	amounts := []string{`1`, `"x"`, `{"y":1}`, `MISSING`, `4`, `null`, `[1]`}
	for _, order := range []string{"last,sum,count_distinct,min", "count_distinct,first,max,avg", "first,last,count_distinct", "min,count_distinct,sum"} {
		t.Run(order, func(t *testing.T) {
			specs := []AggregateSpec{{Name: "n", Fn: AggCount}}
			for i, fn := range strings.Split(order, ",") {
				specs = append(specs, AggregateSpec{Name: string(rune('a' + i)), Fn: AggregateFn(fn), Of: compiled(t, "amount")})
				if i == 0 { // an other of between the shared ones
					specs = append(specs, AggregateSpec{Name: "z", Fn: AggSum, Of: compiled(t, "amount + 0")})
				}
			}
			h := newHarness(t, "hashmap", t.TempDir(), nil, NewAggregate(AggregateParams{Aggregates: specs}, false), 64)
			bad := &recordErrors{}
			var got strings.Builder
			for _, a := range amounts {
				v := fmt.Sprintf(`{"amount":%s}`, a)
				if a == "MISSING" {
					v = `{"other":1}`
				}
				h.feed(bad, runtime.Record{Key: []byte("k"), Value: []byte(v)})
				for _, rec := range h.emitted() {
					got.WriteString(string(rec.Value) + "\n")
				}
				for _, e := range bad.errs {
					got.WriteString("ERR " + e.Error() + "\n")
				}
				bad.errs = nil
			}
			if got.String() != evalOrderWant[order] {
				t.Fatalf("rows and errors\n%s\nwant (the base's)\n%s", got.String(), evalOrderWant[order])
			}
		})
	}
}
