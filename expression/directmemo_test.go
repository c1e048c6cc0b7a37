package expression

import (
	"bytes"
	"fmt"
	"testing"
)

// TestDirectMemoSlots checks which subexpressions the direct form of
// Nexmark q14's, q21's and q22's maps computes once per evaluation
// (directmemo.go): each subexpression the program holds more than once and
// compiles to a node of its own, and no other.
func TestDirectMemoSlots(t *testing.T) {
	for src, want := range map[string]int{
		nexmarkStateless[1]:                   4, // bid.dateTime (also written), bid.dateTime / 3600000 and its % 24, bid.extra
		nexmarkStateless[3]:                   3, // bid.channel, bid.channel.lowerAscii() (unused: dlowerEq reads bid.channel), bid.url
		nexmarkStateless[4]:                   2, // bid.url, size(bid.url.split('/'))
		`amount < 500`:                        0,
		`{"a": amount, "b": amount}`:          1,
		`amount + 1 > 2 && amount + 1 < 9`:    2, // amount, amount + 1
		`{"a": amount / 0, "b": amount / 0}`:  2,
		`{"a": note.size(), "b": size(note)}`: 1, // two functions: only note shared
	} {
		p := mustCompile(t, src)
		if p.direct == nil {
			t.Fatalf("%s: no direct form", src)
		}
		if p.direct.slots != want {
			t.Errorf("%s: %d repeated subexpressions, want %d", src, p.direct.slots, want)
		}
	}
}

// TestDirectMemoAcrossRecords evaluates every direct program through one
// Env reset from record to record, several programs on each record (as a
// chain's operators share a record's Env), and checks every result
// against CEL's on an Env of its own: a repeated subexpression's result
// of an earlier evaluation (of another program, or of the same one on an
// earlier record) is never read again.
func TestDirectMemoAcrossRecords(t *testing.T) {
	records := []string{
		`{"event_type":2,"bid":{"auction":1107,"bidder":1,"price":3345118,"channel":"Facebook","url":"https://www.nexmark.com/mqt/zsr/aoh/item.htm?query=1&channel_id=1030750208","dateTime":1700000000123,"extra":"cchkc"}}`,
		`{"event_type":2,"bid":{"auction":1000,"bidder":2,"price":490,"channel":"channel-1050","url":"channel_id=5&x","dateTime":1700028000123,"extra":""}}`,
		`{"event_type":2,"bid":{"auction":7,"bidder":3,"price":21917745,"channel":"BAIDU","url":"a/b","dateTime":-5,"extra":"\u00e9c"}}`,
		`{"amount":317,"note":"xXab","url":"A/b\u00e9/c","d":2.5}`,
		`{"amount":-3,"note":"ab","url":"ab","d":-0.0}`,
		`{"amount":"x","note":1,"url":null}`,
		`{"event_type":2,"bid":{"auction":2,"price":5000,"channel":"Apple","url":"/x/y/z/w/v","dateTime":86399999,"extra":"c"}}`,
	}
	programs := append(append([]string{}, directPrograms...), nexmarkStateless...)
	fast := make([]*Program, len(programs))
	general := make([]*Program, len(programs))
	for i, src := range programs {
		fast[i] = mustCompile(t, src)
		g := *fast[i]
		g.direct = nil
		general[i] = &g
	}
	var env Env
	for round := range 3 {
		for r, rec := range records {
			doc := NewValidDoc([]byte(rec))
			env.Reset(&Input{Doc: doc})
			for k := range fast {
				i := (k*7 + r + round) % len(fast) // a different order of programs per record
				in := &Input{Doc: NewValidDoc([]byte(rec))}
				gv, gerr := general[i].Eval(NewEnv(in))
				fv, ferr := fast[i].Eval(&env)
				if fmt.Sprintf("%#v %v", gv, gerr) != fmt.Sprintf("%#v %v", fv, ferr) {
					t.Fatalf("%s on %s: Eval through a shared Env %#v, %v; CEL %#v, %v", programs[i], rec, fv, ferr, gv, gerr)
				}
				gj, _, _, gerr := general[i].EvalJSON(nil, NewEnv(in))
				fj, _, _, ferr := fast[i].EvalJSON(nil, &env)
				if !bytes.Equal(gj, fj) || fmt.Sprint(gerr) != fmt.Sprint(ferr) {
					t.Fatalf("%s on %s: EvalJSON through a shared Env %s, %v; CEL %s, %v", programs[i], rec, fj, ferr, gj, gerr)
				}
				gb, gerr := general[i].EvalBool(NewEnv(in))
				fb, ferr := fast[i].EvalBool(&env)
				if gb != fb || fmt.Sprint(gerr) != fmt.Sprint(ferr) {
					t.Fatalf("%s on %s: EvalBool through a shared Env %v, %v; CEL %v, %v", programs[i], rec, fb, ferr, gb, gerr)
				}
			}
		}
	}
}

// TestIsPlainText checks isPlainText byte by byte against what
// jsonAppender.string writes: a plain string is written between quotes as
// it is, so the direct evaluator copies it (dval.plain).
func TestIsPlainText(t *testing.T) {
	for c := 0; c < 256; c++ {
		s := string([]byte{'a', byte(c), 'z'})
		var e jsonAppender
		e.string(s)
		if verbatim := string(e.buf) == `"`+s+`"`; isPlainText(s) && !verbatim {
			t.Errorf("byte %#x: isPlainText, but written %q", c, e.buf)
		} else if !isPlainText(s) && c < 0x80 && verbatim {
			t.Errorf("byte %#x: an ASCII byte written as it is, but not isPlainText", c)
		}
	}
}

// TestDirectMemoConcurrentEnvs shares every program with repeated
// subexpressions between two Envs in lockstep and between goroutines,
// each evaluating records through an Env of its own in its own order, and checks every EvalJSON result
// against CEL's computed beforehand (s43-ebreak's attack on the memo: the
// results live in the Env, never in the shared Program; under -race a
// result kept in the Program would also be a data race).
func TestDirectMemoConcurrentEnvs(t *testing.T) {
	records := []string{
		`{"event_type":2,"bid":{"auction":1107,"bidder":1,"price":3345118,"channel":"Facebook","url":"https://www.nexmark.com/mqt/zsr/aoh/item.htm?query=1&channel_id=1030750208","dateTime":1700000000123,"extra":"cchkc"}}`,
		`{"event_type":2,"bid":{"auction":7,"bidder":3,"price":21917745,"channel":"BAIDU","url":"a/b","dateTime":-5,"extra":"\u00e9c"}}`,
		`{"amount":317,"note":"xXab","url":"A/b\u00e9/c","d":2.5}`,
		`{"amount":0,"note":"aaaa\u00e9\u00e9xx","url":"/A/b\u00e9/c<&>"}`,
		`{"amount":-3,"note":"ab","url":"ab","d":-0.0}`,
		`{"amount":2,"note":"x","url":"a/b/c"}`,
	}
	var programs []*Program
	for _, src := range append(append([]string{}, directPrograms...), nexmarkStateless...) {
		if p := mustCompile(t, src); p.direct != nil && p.direct.slots > 0 {
			programs = append(programs, p)
		}
	}
	if len(programs) < 20 {
		t.Fatalf("%d programs with repeated subexpressions, want at least 20", len(programs))
	}
	want := make([][]string, len(programs))
	for i, p := range programs {
		g := *p
		g.direct = nil
		for _, rec := range records {
			b, _, _, err := g.EvalJSON(nil, NewEnv(&Input{Doc: NewValidDoc([]byte(rec))}))
			want[i] = append(want[i], fmt.Sprintf("%s %v", b, err))
		}
	}
	// Two Envs in lockstep on one goroutine: their generations are equal
	// at every evaluation, so a result kept by generation in the Program
	// would be read by the other Env on another record.
	var envs [2]Env
	for k := range len(records) * len(programs) {
		i := k % len(programs)
		for j := range envs {
			r := (k/len(programs) + j) % len(records)
			envs[j].Reset(&Input{Doc: NewValidDoc([]byte(records[r]))})
			b, _, _, err := programs[i].EvalJSON(nil, &envs[j])
			if got := fmt.Sprintf("%s %v", b, err); got != want[i][r] {
				t.Fatalf("%s on %s through Env %d: %s, CEL %s", programs[i].Source(), records[r], j, got, want[i][r])
			}
		}
	}
	const workers = 4
	errs := make(chan string, workers)
	for w := range workers {
		go func() {
			var env Env
			var bad string
			for round := range 20 {
				for k := range len(records) * len(programs) {
					r := (k + w + round) % len(records)
					i := (k*(w+3) + round) % len(programs)
					env.Reset(&Input{Doc: NewValidDoc([]byte(records[r]))})
					b, _, _, err := programs[i].EvalJSON(nil, &env)
					if got := fmt.Sprintf("%s %v", b, err); got != want[i][r] && bad == "" {
						bad = fmt.Sprintf("%s on %s: %s, CEL %s", programs[i].Source(), records[r], got, want[i][r])
					}
				}
			}
			errs <- bad
		}()
	}
	for range workers {
		if bad := <-errs; bad != "" {
			t.Error(bad)
		}
	}
}
