package expression

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestAppendDecimal checks appendDecimal against strconv's shortest text
// of the double nearest to x / 10^k (what jsonAppender.float writes for
// such a double), for x at the bounds, at powers of ten and their
// neighbours, and random x of every length, for k from 1 to 6.
func TestAppendDecimal(t *testing.T) {
	xs := []int64{0, 1, -1, 5, 10, 999, 1000, 1001, maxDecimal - 1, -(maxDecimal - 1), 4540000, 41768, 9007199254740}
	for p := int64(1); p < maxDecimal; p *= 10 {
		xs = append(xs, p, p-1, p+1, -p, 3*p, 7*p+3)
	}
	rng := rand.New(rand.NewPCG(25, 43))
	for range 200_000 {
		x := rng.Int64N(decimalPowers[0] * int64(pow10(1+rng.IntN(15))))
		if rng.IntN(4) == 0 {
			x = -x
		}
		xs = append(xs, x)
	}
	for _, x := range xs {
		for k := 1; k < len(decimalPowers); k++ {
			f := float64(x) / float64(decimalPowers[k])
			want := string(strconv.AppendFloat(nil, f, 'f', -1, 64))
			var e jsonAppender
			if !e.float(f) || string(e.buf) != want {
				t.Fatalf("jsonAppender.float(%d / 10^%d) = %q, want strconv's %q", x, k, e.buf, want)
			}
			if got := string(appendDecimal([]byte("p"), x, uint8(k))); got != "p"+want {
				t.Fatalf("appendDecimal(%d, %d) = %q, want %q", x, k, got[1:], want)
			}
		}
	}
}

func pow10(n int) int64 {
	p := int64(1)
	for range n {
		p *= 10
	}
	return p
}

// TestDecimalQuotientForms checks which divisions take ddecimal: double
// of an int or a double divided by 10^k literal, k from 1 to 6, and no
// other (the general darith then).
func TestDecimalQuotientForms(t *testing.T) {
	for src, want := range map[string]bool{
		`double(bid.price * 908) / 1000.0`: true, `double(amount) / 10.0`: true, `double(amount) / 1000000.0`: true,
		`double(amount) / 10000000.0`: false, `double(amount) / 1.0`: false, `double(amount) / 3.0`: false,
		`d / 1000.0`: false, `double(amount) * 1000.0`: false, `double(amount) / double(10)`: false,
	} {
		p := mustCompile(t, src)
		if p.direct == nil {
			t.Fatalf("%s: no direct form", src)
		}
		if _, got := unmemo(p.direct.root).(*ddecimal); got != want {
			t.Errorf("%s: ddecimal %v, want %v", src, got, want)
		}
	}
}
