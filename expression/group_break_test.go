package expression

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

// gbreakAtoms are the leaves of gbreakExpr's programs: a few fields read
// by many programs (so that most subexpressions repeat across a group),
// constants of every kind and the reserved names.
var gbreakAtoms = []string{`a`, `b`, `bid.price`, `bid.price`, `s`, `bid.s`, `1`, `-1`, `0`, `2.5`, `-0.0`, `9223372036854775807`, `"x"`, `null`, `true`, `key`, `timestamp`}

// gbreakExpr returns a random expression of the direct evaluator's
// forms (arithmetic, comparisons, logic, ?:, negation, double(),
// string(), size()) of at most depth levels over gbreakAtoms.
func gbreakExpr(r *rand.Rand, depth int) string {
	if depth == 0 || r.IntN(4) == 0 {
		return gbreakAtoms[r.IntN(len(gbreakAtoms))]
	}
	x := func() string { return gbreakExpr(r, depth-1) }
	switch r.IntN(9) {
	case 0, 1:
		ops := []string{"+", "-", "*", "/", "%"}
		return "(" + x() + " " + ops[r.IntN(len(ops))] + " " + x() + ")"
	case 2, 3:
		ops := []string{"<", "<=", ">", ">=", "==", "!="}
		return "(" + x() + " " + ops[r.IntN(len(ops))] + " " + x() + ")"
	case 4:
		ops := []string{"&&", "||"}
		return "(" + x() + " " + ops[r.IntN(len(ops))] + " " + x() + ")"
	case 5:
		return "(" + x() + " ? " + x() + " : " + x() + ")"
	case 6:
		return "-" + x()
	case 7:
		return "!" + x()
	default:
		fns := []string{"double", "string", "size", "int"}
		return fns[r.IntN(len(fns))] + "(" + x() + ")"
	}
}

// gbreakRecords are records whose fields take the number forms of
// ebreakNumberForms (signed zeros, exponents, past 2^53 and the int64
// limits), strings, null, objects and absence.
func gbreakRecords(r *rand.Rand, n int) []string {
	form := func() string { return ebreakNumberForms[r.IntN(len(ebreakNumberForms))] }
	var recs []string
	for range n {
		var f []string
		if r.IntN(8) != 0 {
			f = append(f, `"a":`+form())
		}
		if r.IntN(8) != 0 {
			f = append(f, `"b":`+form())
		}
		if r.IntN(6) != 0 {
			f = append(f, fmt.Sprintf(`"s":"%s"`, []string{"", "x", "ab", "\u00e9"}[r.IntN(4)]))
		}
		switch r.IntN(6) {
		case 0: // no bid
		case 1:
			f = append(f, `"bid":null`)
		default:
			f = append(f, `"bid":{"price":`+form()+`,"s":"`+[]string{"", "x", "yy"}[r.IntN(3)]+`"}`)
		}
		recs = append(recs, "{"+strings.Join(f, ",")+"}")
	}
	return recs
}

// gbreakResults is every result and error of p on env, as text: Eval,
// EvalJSON, EvalBool and EvalInt64, in that order on one Env.
func gbreakResults(p *Program, env *Env) string {
	v, err := p.Eval(env)
	j, _, _, jerr := p.EvalJSON(nil, env)
	b, berr := p.EvalBool(env)
	n, isInt, nv, nerr := p.EvalInt64(env)
	return fmt.Sprintf("%#v %v | %s %v | %v %v | %d %t %#v %v", v, err, j, jerr, b, berr, n, isInt, nv, nerr)
}

// TestGroupedRandomProgramsAgreeWithCEL checks Grouped against CEL's
// interpreter on random programs that share most of their
// subexpressions, over records whose numbers take every JSON form: two
// groups (as two aggregates of one chain would make) and the original
// programs (memos of their own) are evaluated on one Env, interleaved
// in a random order on each record, the Env Reset from record to record
// and also Reset to the same record's bytes again (a source reusing its
// buffer); every result and error of every member equals CEL's on an Env
// of its own.
func TestGroupedRandomProgramsAgreeWithCEL(t *testing.T) {
	r := rand.New(rand.NewPCG(46, 17))
	var orig []*Program
	for len(orig) < 60 {
		p, err := Compile(gbreakExpr(r, 3))
		if err != nil || p.direct == nil || p.tracked {
			continue
		}
		orig = append(orig, p)
	}
	g1, g2 := Grouped(orig[:30]), Grouped(orig[30:])
	grouped := append(append([]*Program{}, g1...), g2...)
	shared := 0
	for _, p := range grouped {
		if p.direct.group != nil {
			shared++
		}
	}
	if g1[0].direct.group == g2[0].direct.group || shared < 40 {
		t.Fatalf("%d of %d programs grouped (two groups: %t); want most, in two groups", shared, len(grouped), g1[0].direct.group != g2[0].direct.group)
	}
	general := make([]*Program, len(orig))
	for i, p := range orig {
		g := *p
		g.direct = nil
		general[i] = &g
	}
	recs := gbreakRecords(r, 150)
	var env Env
	buf := make([]byte, 0, 256)
	checked := 0
	for _, rec := range recs {
		// The record in a buffer reused from record to record, as a
		// source's decode does: a result kept from the record before
		// would read this one's bytes or the old ones' values.
		buf = append(buf[:0], rec...)
		env.Reset(&Input{Doc: NewValidDoc(buf), Key: []byte("k"), Timestamp: time.UnixMilli(5)})
		for _, i := range r.Perm(2 * len(orig)) {
			k, p := i%len(orig), grouped[i%len(orig)]
			if i >= len(orig) {
				p = orig[k]
			}
			want := gbreakResults(general[k], NewEnv(&Input{Doc: NewValidDoc([]byte(rec)), Key: []byte("k"), Timestamp: time.UnixMilli(5)}))
			if got := gbreakResults(p, &env); got != want {
				t.Fatalf("%s on %s (grouped %t): %s\nCEL: %s", orig[k].Source(), rec, p.direct.group != nil, got, want)
			}
			checked++
		}
	}
	if checked != 150*120 {
		t.Fatalf("%d evaluations checked", checked)
	}
}

// TestGroupedConcurrent groups the same programs on several goroutines
// at once (each parallel instance of an aggregate groups its own) and
// evaluates the groups on Envs of their own: the results are each
// record's, for the race detector to watch the shared nodes.
func TestGroupedConcurrent(t *testing.T) {
	ps := []*Program{mustCompile(t, `bid.price < 10000 ? 1 : 0`), mustCompile(t, `bid.price >= 10000 ? 1 : 0`), mustCompile(t, `bid.price`), mustCompile(t, `bid.price * 2 + bid.price`)}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gs := Grouped(ps)
			var env Env
			for i := range 500 {
				price := int64(i*37 + w*10000)
				env.Reset(&Input{Doc: NewValidDoc([]byte(fmt.Sprintf(`{"bid":{"price":%d}}`, price)))})
				var got [4]int64
				for k, p := range gs {
					n, isInt, _, err := p.EvalInt64(&env)
					if !isInt || err != nil {
						errs <- fmt.Sprintf("%s: %v %v", p.Source(), isInt, err)
						return
					}
					got[k] = n
				}
				lo := int64(0)
				if price < 10000 {
					lo = 1
				}
				if want := [4]int64{lo, 1 - lo, price, 3 * price}; got != want {
					errs <- fmt.Sprintf("price %d: %v, want %v", price, got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// FuzzGroupedEqualsCEL is TestGroupedRandomProgramsAgreeWithCEL with the
// programs drawn from seed and the JSON text of a, b and bid.price
// fuzzed: twelve random programs grouped, evaluated in a seed's order on
// two records through one Env (the second record's values swapped), each
// result and error CEL's.
func FuzzGroupedEqualsCEL(f *testing.F) {
	for i, v := range ebreakNumberForms {
		f.Add(uint64(i%6), v, `3`)
		f.Add(uint64(i%6), `-9223372036854775808`, v)
	}
	type set struct{ orig, general, grouped []*Program }
	sets := map[uint64]set{} // by seed: compiling is most of the work
	f.Fuzz(func(t *testing.T, seed uint64, a, b string) {
		r := rand.New(rand.NewPCG(seed, 46))
		s, ok := sets[seed]
		for tries := 0; !ok && len(s.orig) < 12 && tries < 200; tries++ {
			p, err := Compile(gbreakExpr(r, 3))
			if err != nil || p.direct == nil || p.tracked {
				continue
			}
			g := *p
			g.direct = nil
			s.orig, s.general = append(s.orig, p), append(s.general, &g)
		}
		if !ok {
			s.grouped = Grouped(s.orig)
			sets[seed] = s
		}
		orig, general, grouped := s.orig, s.general, s.grouped
		order := rand.New(rand.NewPCG(seed, 47)) // apart from r: the same whether the programs were cached
		recs := [][]byte{
			[]byte(`{"a":` + a + `,"b":` + b + `,"s":"x","bid":{"price":` + b + `,"s":` + a + `}}`),
			[]byte(`{"a":` + b + `,"b":` + a + `,"bid":{"price":` + a + `}}`),
		}
		var env Env
		for _, rec := range recs {
			in := func() *Input { return &Input{JSON: rec, Key: []byte("k")} }
			env.Reset(in())
			for _, i := range order.Perm(len(orig)) {
				want := gbreakResults(general[i], NewEnv(in()))
				if got := gbreakResults(grouped[i], &env); got != want {
					t.Fatalf("%s on %s: grouped %s\nCEL: %s", orig[i].Source(), rec, got, want)
				}
			}
		}
	})
}
