package expression

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// nexmarkQ17Inputs are the of expressions of Nexmark q17's aggregate
// (configs/nexmark/q17.yaml) that the aggregate operator evaluates per
// bid: four of them read bid.price.
var nexmarkQ17Inputs = []string{
	`bid.auction`,
	`string(timestamp(bid.dateTime / 1000)).substring(0, 10)`,
	`bid.price < 10000 ? 1 : 0`,
	`bid.price >= 10000 && bid.price < 1000000 ? 1 : 0`,
	`bid.price >= 1000000 ? 1 : 0`,
	`bid.price`,
}

// TestGroupedSlots checks what Grouped shares: q17's inputs share one
// node for bid.price (five occurrences in four programs), read through
// the group's one memo slot; programs with nothing in common across them
// are returned as they are, and so are a cost-tracked program and a
// program without a direct form (nil stays nil).
func TestGroupedSlots(t *testing.T) {
	var ps []*Program
	for _, src := range nexmarkQ17Inputs {
		ps = append(ps, mustCompile(t, src))
	}
	gs := Grouped(ps)
	g := gs[2].direct.group
	if g == nil || g.slots != 1 {
		t.Fatalf("q17: group %+v, want one slot (bid.price)", g)
	}
	for i, p := range gs {
		if p == ps[i] || p.direct.group != g {
			t.Errorf("%s: not a member of the group", ps[i].Source())
		}
		if ps[i].direct.group != nil {
			t.Errorf("%s: the original program was changed", ps[i].Source())
		}
	}
	price := gs[5].direct.root
	if _, ok := price.(*dmemo); !ok {
		t.Fatalf("bid.price compiled to %T, want the shared *dmemo", price)
	}
	rank3 := gs[4].direct.root.(*dcond)
	if c, ok := rank3.c.(*dcmp); !ok || c.l != price {
		t.Errorf("rank3's bid.price is not the node bid.price's program evaluates")
	}

	// Nothing shared across programs (amount + 1 is shared within one):
	// the programs as they were.
	own := []*Program{mustCompile(t, `amount + 1 > 2 && amount + 1 < 9`), mustCompile(t, `note == "x"`)}
	for i, p := range Grouped(own) {
		if p != own[i] {
			t.Errorf("%s: grouped with nothing to share across programs", own[i].Source())
		}
	}

	// A cost-tracked program (it walks a string of the record) keeps its
	// own bounded direct form; nil stays nil; the other two share note.
	tracked := mustCompile(t, `note.lowerAscii() == "x"`)
	if !tracked.tracked || tracked.direct == nil {
		t.Fatalf("%s: tracked %t, direct %v: want a cost-tracked direct program", tracked.Source(), tracked.tracked, tracked.direct)
	}
	mixed := []*Program{tracked, nil, mustCompile(t, `note == "x"`), mustCompile(t, `note < "m"`)}
	got := Grouped(mixed)
	if got[0] != tracked || got[1] != nil {
		t.Errorf("a cost-tracked program or nil was grouped: %v, %v", got[0], got[1])
	}
	if got[2].direct.group == nil || got[2].direct.group != got[3].direct.group || got[2].direct.group.slots != 1 {
		t.Errorf("note == \"x\" and note < \"m\" do not share note")
	}
}

// TestGroupedAgreesWithCEL evaluates every direct program of the
// package's tests and q17's inputs as one group, through one Env reset
// from record to record, the members in a different order on each
// record and each one also through its original program (whose own memo
// begins between the group's members), and checks every result and
// error of Eval, EvalJSON, EvalBool and EvalInt64 against CEL's on an Env
// of its own.
func TestGroupedAgreesWithCEL(t *testing.T) {
	records := []string{
		`{"event_type":2,"bid":{"auction":1107,"bidder":1,"price":3345118,"channel":"Facebook","url":"https://www.nexmark.com/mqt/zsr/aoh/item.htm?query=1&channel_id=1030750208","dateTime":1700000000123,"extra":"cchkc"}}`,
		`{"event_type":2,"bid":{"auction":1000,"bidder":2,"price":490,"channel":"channel-1050","url":"channel_id=5&x","dateTime":1700028000123,"extra":""}}`,
		`{"event_type":2,"bid":{"auction":7,"bidder":3,"price":21917745,"channel":"BAIDU","url":"a/b","dateTime":-5,"extra":"\u00e9c"}}`,
		`{"amount":317,"note":"xXab","url":"A/b\u00e9/c","d":2.5}`,
		`{"amount":-3,"note":"ab","url":"ab","d":-0.0}`,
		`{"amount":"x","note":1,"url":null}`,
		`{"event_type":2,"bid":{"auction":2,"price":5000,"channel":"Apple","url":"/x/y/z/w/v","dateTime":86399999,"extra":"c"}}`,
		`{"event_type":2,"bid":{"auction":3,"price":10000.5,"dateTime":1700000000000}}`,
		`{"event_type":2,"bid":{"auction":4,"price":"999","dateTime":"x"}}`,
		`{"event_type":2,"bid":null}`,
	}
	srcs := append(append(append([]string{}, directPrograms...), nexmarkStateless...), nexmarkQ17Inputs...)
	var orig []*Program
	for _, src := range srcs {
		if p := mustCompile(t, src); p.direct != nil {
			orig = append(orig, p)
		}
	}
	grouped := Grouped(orig)
	if g := grouped[len(grouped)-1].direct.group; g == nil || g.slots < 10 {
		t.Fatalf("group %+v: want at least 10 subexpressions shared", g)
	}
	general := make([]*Program, len(orig))
	for i, p := range orig {
		g := *p
		g.direct = nil
		general[i] = &g
	}
	want := func(i int, rec string) string {
		env := func() *Env { return NewEnv(&Input{Doc: NewValidDoc([]byte(rec))}) }
		v, err := general[i].Eval(env())
		j, _, _, jerr := general[i].EvalJSON(nil, env())
		b, berr := general[i].EvalBool(env())
		n, isInt, nv, nerr := general[i].EvalInt64(env())
		return fmt.Sprintf("%#v %v | %s %v | %v %v | %d %t %#v %v", v, err, j, jerr, b, berr, n, isInt, nv, nerr)
	}
	got := func(p *Program, env *Env) string {
		v, err := p.Eval(env)
		j, _, _, jerr := p.EvalJSON(nil, env)
		b, berr := p.EvalBool(env)
		n, isInt, nv, nerr := p.EvalInt64(env)
		return fmt.Sprintf("%#v %v | %s %v | %v %v | %d %t %#v %v", v, err, j, jerr, b, berr, n, isInt, nv, nerr)
	}
	var env Env
	for round := range 3 {
		for r, rec := range records {
			env.Reset(&Input{Doc: NewValidDoc([]byte(rec))})
			for k := range grouped {
				i := (k*7 + r + round) % len(grouped) // a different order per record
				w := want(i, rec)
				if g := got(grouped[i], &env); g != w {
					t.Fatalf("%s on %s: grouped %s; CEL %s", orig[i].Source(), rec, g, w)
				}
				if round > 0 { // the original, with a memo of its own, between members
					if g := got(orig[i], &env); g != w {
						t.Fatalf("%s on %s: original %s; CEL %s", orig[i].Source(), rec, g, w)
					}
				}
			}
		}
	}
}

// TestGroupedMemoEndsWithRecord checks the two ends of a group's results
// in an Env: a member evaluated first on a new record (the Env Reset)
// does not read the results of the record before, and a member evaluated
// after a program with a memo of its own on the same Env does not read
// that program's results as its group's.
func TestGroupedMemoEndsWithRecord(t *testing.T) {
	gs := Grouped([]*Program{mustCompile(t, `bid.price < 10000 ? 1 : 0`), mustCompile(t, `bid.price`), mustCompile(t, `bid.price + 1`)})
	if gs[0].direct.group == nil {
		t.Fatal("not grouped")
	}
	eval := func(p *Program, env *Env) string {
		v, err := p.Eval(env)
		return fmt.Sprintf("%v %v", v, err)
	}
	var env Env
	env.Reset(&Input{Doc: NewValidDoc([]byte(`{"bid":{"price":5}}`))})
	if got := eval(gs[0], &env); got != "1 <nil>" {
		t.Fatalf("rank on price 5: %s", got)
	}
	env.Reset(&Input{Doc: NewValidDoc([]byte(`{"bid":{"price":20000}}`))})
	if got := eval(gs[1], &env); got != "20000 <nil>" {
		t.Errorf("price on the next record: %s, want 20000 (the record before's 5 read again?)", got)
	}

	own := mustCompile(t, `{"a": amount, "b": amount}`) // amount in its own memo's slot 0
	if own.direct.slots != 1 {
		t.Fatalf("%s: %d slots, want 1", own.Source(), own.direct.slots)
	}
	env.Reset(&Input{Doc: NewValidDoc([]byte(`{"amount":7,"bid":{"price":3}}`))})
	if got := eval(gs[1], &env); got != "3 <nil>" {
		t.Fatalf("price: %s", got)
	}
	if j, _, _, err := own.EvalJSON(nil, &env); string(j) != `{"a":7,"b":7}` || err != nil {
		t.Fatalf("own: %s, %v", j, err)
	}
	if got := eval(gs[2], &env); got != "4 <nil>" {
		t.Errorf("price + 1 after a program of its own: %s, want 4 (its amount read as bid.price?)", got)
	}
}

// BenchmarkGroupedQ17 evaluates q17's aggregate inputs on one bid as the
// aggregate operator does, on their own and grouped (bid.price read
// once). cpu-ns/op is the process's CPU time per bid (getrusage), which
// a loaded machine distorts less than ns/op.
func BenchmarkGroupedQ17(b *testing.B) {
	rec := []byte(`{"event_type":2,"person":null,"auction":null,"bid":{"auction":1107,"bidder":1,"price":3345118,"channel":"Facebook","url":"https://www.nexmark.com/mqt/zsr/aoh/item.htm?query=1&channel_id=1030750208","dateTime":1700000000123,"extra":"cchkc"}}`)
	var ps []*Program
	for _, src := range nexmarkQ17Inputs {
		ps = append(ps, mustCompile(b, src))
	}
	for _, c := range []struct {
		name  string
		progs []*Program
	}{{"own", ps}, {"grouped", Grouped(ps)}} {
		b.Run(c.name, func(b *testing.B) {
			var env Env
			var doc Doc
			cpu := func() time.Duration {
				var ru syscall.Rusage
				if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
					b.Fatal(err)
				}
				return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			}
			b.ReportAllocs()
			b.ResetTimer()
			start := cpu()
			for range b.N {
				doc.Reset(rec, true)
				env.Reset(&Input{Doc: &doc})
				for i, p := range c.progs {
					if i >= 2 { // the numbers: as the aggregate reads them
						if _, isInt, _, err := p.EvalInt64(&env); !isInt || err != nil {
							b.Fatal(err)
						}
						continue
					}
					if _, err := p.Eval(&env); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(cpu()-start)/float64(b.N), "cpu-ns/op")
		})
	}
}
