package expression

import (
	"strconv"
	"time"

	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/overloads"
	"cel.dev/cel-go/common/types"
)

// This file is the direct evaluator's date formatting and string(x) of an
// int or a string (q17's group key, string(bid.auction) + '|' + day), the
// forms Nexmark q15, q16 and q17 use for Flink's DATE_FORMAT(dateTime, 'yyyy-MM-dd')
// (and q16's 'HH:mm'): string(timestamp(x)), optionally followed by
// .substring(i, j) with int literals i and j (ext.Strings' substring). x
// is whole seconds since the Unix epoch (CEL's timestamp(int)); the text
// is CEL's string of that timestamp, RFC 3339 in UTC
// ("2006-01-02T15:04:05Z", no fraction for whole seconds), built without
// CEL's interpreter, its time.Format and its rune slices. Where CEL fails
// or would take another overload (x not an int, x outside CEL's range of
// years 1 to 9999) it gives up, and CEL evaluates the program.

// minTimestampSeconds and maxTimestampSeconds are CEL's range of
// timestamps (0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z), in seconds
// since the Unix epoch.
const (
	minTimestampSeconds = -62135596800
	maxTimestampSeconds = 253402300799
)

// timestampTextLen is the length of string(timestamp(x)) for an int x in
// CEL's range: "YYYY-MM-DDTHH:MM:SSZ".
const timestampTextLen = 20

// timeCall compiles c when it is string(x), string(timestamp(x)) or
// string(timestamp(x)).substring(i, j) with 0 <= i <= j <= 20 int
// literals: handled is true for such a call (n is then nil when x is not
// of the direct form), false for any other call.
func (dc *dcompiler) timeCall(c celast.CallExpr) (n dnode, handled bool) {
	from, to := 0, timestampTextLen
	if c.IsMemberFunction() {
		args := c.Args()
		if c.FunctionName() != "substring" || len(args) != 2 || c.Target().Kind() != celast.CallKind {
			return nil, false
		}
		i, iok := intLiteral(args[0])
		j, jok := intLiteral(args[1])
		if !iok || !jok || i < 0 || i > j || j > timestampTextLen {
			return nil, false
		}
		inner := c.Target().AsCall()
		if !isTimestampString(inner) {
			return nil, false
		}
		c, from, to = inner, int(i), int(j)
	} else if !isTimestampString(c) {
		if !c.IsMemberFunction() && c.FunctionName() == "string" && len(c.Args()) == 1 {
			x := dc.node(c.Args()[0])
			if x == nil {
				return nil, true
			}
			return &dstring{x}, true
		}
		return nil, false
	}
	if r := dc.refs[c.Args()[0].ID()]; r != nil && r.Value != nil {
		return nil, true
	}
	x := dc.node(c.Args()[0].AsCall().Args()[0])
	if x == nil {
		return nil, true
	}
	return &dtimeText{x: x, from: from, to: to}, true
}

// isTimestampString reports whether c is string(timestamp(x)): the global
// string conversion of one call to the global timestamp of one argument.
func isTimestampString(c celast.CallExpr) bool {
	if c.IsMemberFunction() || c.FunctionName() != "string" || len(c.Args()) != 1 || c.Args()[0].Kind() != celast.CallKind {
		return false
	}
	t := c.Args()[0].AsCall()
	return !t.IsMemberFunction() && t.FunctionName() == "timestamp" && len(t.Args()) == 1
}

// intLiteral returns the value of x when x is an int literal.
func intLiteral(x celast.Expr) (int64, bool) {
	if x.Kind() != celast.LiteralKind {
		return 0, false
	}
	v, ok := x.AsLiteral().(types.Int)
	return int64(v), ok
}

// dtimeText is string(timestamp(x)).substring(from, to) (from 0 and to 20
// for the whole text): bytes from..to of the RFC 3339 text of x seconds
// since the epoch in UTC, all ASCII, so bytes are runes.
type dtimeText struct {
	x        dnode
	from, to int
}

func (n *dtimeText) eval(a *activation) dval {
	v := n.x.eval(a)
	if v.k != dInt || v.i < minTimestampSeconds || v.i > maxTimestampSeconds {
		return dval{}
	}
	var b [timestampTextLen]byte
	appendTimestampText(b[:0], v.i)
	return dval{k: dString, s: string(b[n.from:n.to]), plain: true}
}

// appendTimestampText appends the RFC 3339 text of sec seconds since the
// epoch in UTC ("2006-01-02T15:04:05Z", 20 bytes) to b, for sec in CEL's
// range (a four-digit year).
func appendTimestampText(b []byte, sec int64) []byte {
	t := time.Unix(sec, 0).UTC()
	year, month, day := t.Date()
	hour, minute, second := t.Clock()
	b = appendDigits(b, year, 4)
	b = append(b, '-')
	b = appendDigits(b, int(month), 2)
	b = append(b, '-')
	b = appendDigits(b, day, 2)
	b = append(b, 'T')
	b = appendDigits(b, hour, 2)
	b = append(b, ':')
	b = appendDigits(b, minute, 2)
	b = append(b, ':')
	b = appendDigits(b, second, 2)
	return append(b, 'Z')
}

// appendDigits appends the width last decimal digits of v >= 0, zero
// padded.
func appendDigits(b []byte, v, width int) []byte {
	var d [4]byte
	for i := width - 1; i >= 0; i-- {
		d[i] = byte('0' + v%10)
		v /= 10
	}
	return append(b, d[:width]...)
}

// dstring is string(x) for an int x (its decimal text, as CEL's
// int-to-string) or a string x (itself); any other kind is given up.
type dstring struct{ x dnode }

func (n *dstring) eval(a *activation) dval {
	v := n.x.eval(a)
	switch v.k {
	case dInt:
		return dval{k: dString, s: strconv.FormatInt(v.i, 10), plain: true}
	case dString:
		return v
	}
	return dval{}
}

// timestampTextEstimate is the cost estimate of CEL's string of a
// timestamp (overload timestamp_to_string), for the estimators of
// compile.go, nil for any other overload: cost 1, as CEL's default for a
// call it does not know, and a result of 20 to 30 bytes (RFC 3339 in UTC,
// "2006-01-02T15:04:05Z" plus at most a 10-byte fraction). Without a
// result size CEL's estimate of a substring of it is unbounded, and such
// a program would be cost-tracked and have no direct form.
func timestampTextEstimate(overload string) *cost.CallEstimate {
	if overload != overloads.TimestampToString {
		return nil
	}
	return &cost.CallEstimate{CostEstimate: cost.FixedCostEstimate(1), ResultSize: &cost.SizeEstimate{Min: timestampTextLen, Max: timestampTextLen + 10}}
}
