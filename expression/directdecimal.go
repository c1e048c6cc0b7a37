package expression

import (
	"strconv"

	"cel.dev/cel-go/common/operators"
)

// This file is the direct evaluator's decimal quotients: double(x) /
// 10^k for an int x and k from 1 to 6 (Nexmark q1's and q14's euro price,
// double(bid.price * 908) / 1000.0) gives the double CEL gives and, for
// |x| < 10^15, remembers x and k (dval.scale), so that a map literal
// writes its JSON as the decimal x / 10^k (41.768) without
// strconv.AppendFloat's search for the shortest text. That text is the
// same: the double is the one nearest to x / 10^k (both operands are
// exact doubles and the division is correctly rounded), so that decimal
// reads back as it; a decimal of at most 15 significant digits is the
// only one of at most 15 that reads back as its nearest double (each
// such decimal survives the round trip through a double: DBL_DIG), so no
// shorter text exists; and 10^-6 <= |x / 10^k| < 10^15 is written without
// an exponent. TestAppendDecimal compares the two.

// decimalPowers are 10^k, k from 0 to 6, as ints and exact doubles.
var decimalPowers = [...]int64{1, 10, 100, 1000, 10000, 100000, 1000000}

// maxDecimal is the bound below which |x| has at most 15 digits.
const maxDecimal = 1_000_000_000_000_000

// ddecimal is double(x) / p, p = 10^k a double literal, k from 1 to 6.
type ddecimal struct {
	x dnode // x of double(x)
	p float64
	k uint8
}

// decimalQuotient returns the ddecimal of fn with args, the direct
// operands of a binary arithmetic call, when fn is / of double(x) and
// a double literal 10^k, k from 1 to 6; nil otherwise.
func decimalQuotient(fn string, args []dnode) dnode {
	if fn != operators.Divide {
		return nil
	}
	d, ok := unmemo(args[0]).(*ddouble)
	if !ok {
		return nil
	}
	c, ok := args[1].(dconst)
	if !ok || c.v.k != dDouble {
		return nil
	}
	for k := 1; k < len(decimalPowers); k++ {
		if c.v.f == float64(decimalPowers[k]) {
			return &ddecimal{x: d.x, p: c.v.f, k: uint8(k)}
		}
	}
	return nil
}

// eval is darith's double(x) / p: ddouble's conversion of an int or a
// double x, then the IEEE division.
func (n *ddecimal) eval(a *activation) dval {
	v := n.x.eval(a)
	switch v.k {
	case dInt:
		r := dval{k: dDouble, f: float64(v.i) / n.p}
		if v.i > -maxDecimal && v.i < maxDecimal {
			r.i, r.scale = v.i, n.k
		}
		return r
	case dDouble:
		return dval{k: dDouble, f: v.f / n.p}
	}
	return dval{}
}

// appendDecimal appends the decimal x / 10^k, |x| < 10^15, k from 1
// to 6, as strconv.AppendFloat(b, float64(x)/10^k, 'f', -1, 64) writes
// it: no trailing zero in the fraction, no point when there is none, a
// zero before the point, a minus sign when x < 0.
func appendDecimal(b []byte, x int64, k uint8) []byte {
	if x < 0 {
		b = append(b, '-')
		x = -x
	}
	p := decimalPowers[k]
	b = strconv.AppendInt(b, x/p, 10)
	frac := x % p
	if frac == 0 {
		return b
	}
	digits := int(k)
	for frac%10 == 0 {
		frac /= 10
		digits--
	}
	b = append(b, '.')
	var d [6]byte
	for i := digits - 1; i >= 0; i-- {
		d[i] = byte('0' + frac%10)
		frac /= 10
	}
	return append(b, d[:digits]...)
}
