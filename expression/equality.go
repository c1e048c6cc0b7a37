package expression

import (
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/parser"
)

// EqualsConstant reports whether p is the comparison of an operand with a
// constant, `e == c` or `c == e`, c an int or string literal and e built
// only from identifiers, field selections, literals and the arithmetic
// operators + - * / %, neither with a worst-case cost above the limit;
// then it returns e compiled on its own under p's cost limit, and c as an
// int64 or a string. For an index of many filters over one operand (the
// rules operator's routing stage, Flink's DynamicKeyFunction over rules
// keyed by one field): when e evaluates to an int64 (CEL int) or a string,
// p is true exactly when that value equals c, so e can be evaluated once
// for all of them; other results, and errors, need p itself (CEL's
// heterogeneous equality, p's error message).
func (p *Program) EqualsConstant() (e *Program, c any, ok bool) {
	root := p.ast.NativeRep().Expr()
	if root.Kind() != celast.CallKind || root.AsCall().FunctionName() != operators.Equals || len(root.AsCall().Args()) != 2 {
		return nil, nil, false
	}
	args := root.AsCall().Args()
	operand, lit := args[0], args[1]
	if operand.Kind() == celast.LiteralKind {
		operand, lit = lit, operand
	}
	if p.tracked || lit.Kind() != celast.LiteralKind || !plainOperand(operand) {
		return nil, nil, false
	}
	switch v := lit.AsLiteral().(type) {
	case types.Int:
		c = int64(v)
	case types.String:
		c = string(v)
	default:
		return nil, nil, false
	}
	src, err := parser.Unparse(operand, p.ast.NativeRep().SourceInfo())
	if err != nil {
		return nil, nil, false
	}
	e, err = Compile(src, WithLimits(Limits{MaxCost: p.limit}))
	if err != nil || e.tracked {
		// Neither p nor e counts cost (their worst cases are within the
		// limit): e fails exactly when p does for the same reason.
		return nil, nil, false
	}
	return e, c, true
}

// plainOperand reports whether x is built only from identifiers, field
// selections (not presence tests), literals and + - * / %.
func plainOperand(x celast.Expr) bool {
	switch x.Kind() {
	case celast.IdentKind, celast.LiteralKind:
		return true
	case celast.SelectKind:
		s := x.AsSelect()
		return !s.IsTestOnly() && plainOperand(s.Operand())
	case celast.CallKind:
		c := x.AsCall()
		if c.IsMemberFunction() {
			return false
		}
		switch c.FunctionName() {
		case operators.Add, operators.Subtract, operators.Multiply, operators.Divide, operators.Modulo:
		default:
			return false
		}
		for _, a := range c.Args() {
			if !plainOperand(a) {
				return false
			}
		}
		return true
	}
	return false
}
