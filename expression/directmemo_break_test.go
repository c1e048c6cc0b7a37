package expression

import (
	"fmt"
	"testing"
)

// TestDirectMemoSlotCountsThroughOneEnv evaluates, through one Env on one
// record and then the next, a program with five repeated subexpressions,
// one with none, one with four and the five-slot one again, in both
// orders of slot counts (5, 0, 4, 5 and 0, 4, 5, 0, 4): every result is the exact
// value of its own program on its own record (a slot of an earlier
// evaluation, of another program with other subexpressions at the same
// slot numbers, is never read; a program with no slots after one with
// some, and a memo regrown from 4 to 5 entries, keep every result right).
// A beginMemo that does not start a new generation fails it.
func TestDirectMemoSlotCountsThroughOneEnv(t *testing.T) {
	progs := map[string]string{
		"five": `{"a": amount + 1, "b": amount + 1, "c": note.size(), "d": size(note), "e": amount * 2, "f": amount * 2, "g": url, "h": url}`,
		"none": `amount * 10 + note.size()`,
		"four": `{"x": amount - 7, "y": amount - 7, "z": note + "!", "w": note + "!"}`,
	}
	want := map[string][2]string{
		"five": {`{"a":4,"b":4,"c":2,"d":2,"e":6,"f":6,"g":"u/1","h":"u/1"}`, `{"a":101,"b":101,"c":5,"d":5,"e":200,"f":200,"g":"v","h":"v"}`},
		"none": {`32`, `1005`},
		"four": {`{"w":"ab!","x":-4,"y":-4,"z":"ab!"}`, `{"w":"hello!","x":93,"y":93,"z":"hello!"}`},
	}
	wantSlots := map[string]int{"five": 5, "none": 0, "four": 4} // four: amount, amount - 7, note, note + "!"
	compiled := map[string]*Program{}
	for name, src := range progs {
		p := mustCompile(t, src)
		if p.direct == nil {
			t.Fatalf("%s: no direct form", src)
		}
		if w := wantSlots[name]; p.direct.slots != w {
			t.Fatalf("%s: %d slots, want %d", src, p.direct.slots, w)
		}
		compiled[name] = p
	}
	records := []string{`{"amount":3,"note":"ab","url":"u/1"}`, `{"amount":100,"note":"hello","url":"v"}`}
	for _, order := range [][]string{{"five", "none", "four", "five"}, {"none", "four", "five", "none", "four"}} {
		var env Env
		for r, rec := range records {
			env.Reset(&Input{Doc: NewValidDoc([]byte(rec))})
			for _, name := range order {
				b, _, _, err := compiled[name].EvalJSON(nil, &env)
				if got := fmt.Sprintf("%s %v", b, err); got != want[name][r]+" <nil>" {
					t.Fatalf("order %v, record %s, program %s: %s, want %s", order, rec, name, got, want[name][r])
				}
			}
		}
	}
}
