package pipeline

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/operators"
)

// OperatorInputConfig is one input of a two-input operator, under
// operators[].inputs.<role> (the roles are the type's,
// operators.Traits.Inputs, such as left and right):
//
//	inputs:
//	  left:  {from: orders, key_by: order_id}
//	  right: {from: payments, key_by: order_id}
type OperatorInputConfig struct {
	// From is the name of the source or operator (or "<operator>.<side
	// output>") whose records this role reads. Required.
	From string `yaml:"from"`
	// KeyBy keys this input as operators[].key_by keys a one-input
	// operator's: records of both inputs are routed by the key group of
	// their key, so equal keys of either input meet on one subtask and in
	// one key's state. Required.
	KeyBy string `yaml:"key_by"`
}

// twoInput returns the factory of op when its type reads two inputs
// (operators.Traits.Inputs).
func (c *Config) twoInput(op *OperatorConfig) (*operators.Factory, bool) {
	f, ok := c.registry().Lookup(op.Type)
	if !ok || !f.Traits.TwoInput() {
		return nil, false
	}
	return f, true
}

// opInputs returns the input names op reads: its input, or, for a
// two-input type, each role's from in the type's role order (roles not
// configured are left out).
func (c *Config) opInputs(op *OperatorConfig) []string {
	f, ok := c.twoInput(op)
	if !ok {
		return []string{op.Input}
	}
	var out []string
	for _, r := range f.Traits.Roles() {
		if in, ok := op.Inputs[r]; ok {
			out = append(out, in.From)
		}
	}
	return out
}

// mainInput returns the input name of op's logical input 0: its input,
// or its first role's from.
func (c *Config) mainInput(op *OperatorConfig) string {
	if ins := c.opInputs(op); len(ins) > 0 {
		return ins[0]
	}
	return ""
}

// validateSides checks the inputs of operator op (at path p) of the
// two-input type f: input and key_by do not apply; every role is listed
// with a from naming a source or operator (or a declared side output) and
// a key_by that compiles; no other role is; a type on event time reads no
// input stamped with processing time.
func (c *Config) validateSides(v *validator, p string, i int, op *OperatorConfig, f *operators.Factory, stages map[string]stage) {
	roles := f.Traits.Roles()
	list := strings.Join(roles, " and ")
	if op.Input != "" {
		v.errorf(p+".input", "operator type %s reads two inputs, listed by role under inputs (%s); input does not apply", op.Type, list)
	}
	if op.KeyBy != "" {
		v.errorf(p+".key_by", "operator type %s keys each input by its own inputs.<role>.key_by; key_by does not apply", op.Type)
	}
	if op.Inputs == nil {
		if op.Input == "" {
			v.errorf(p+".inputs", "required for operator type %s: its %s inputs, e.g. inputs: {%s: {from: orders, key_by: id}, %s: {from: payments, key_by: order_id}}", op.Type, list, roles[0], roles[1])
		}
		return
	}
	keys := make([]string, 0, len(op.Inputs))
	for k := range op.Inputs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	suggested := map[string]bool{} // a misspelt role is not also reported missing
	for _, k := range keys {
		if slices.Contains(roles, k) {
			continue
		}
		if s := suggest(k, roles); s != "" {
			suggested[s] = true
			v.errorf(p+".inputs."+k, "unknown role %q of operator type %s (did you mean %q?); its roles are %s", k, op.Type, s, list)
		} else {
			v.errorf(p+".inputs."+k, "unknown role %q of operator type %s; its roles are %s", k, op.Type, list)
		}
	}
	for _, r := range roles {
		rp := p + ".inputs." + r
		in, ok := op.Inputs[r]
		if !ok && suggested[r] {
			continue
		}
		if !ok {
			v.errorf(rp, "missing role %s of operator type %s: {from: <source or operator>, key_by: <key>}", r, op.Type)
			continue
		}
		vin, side := c.SplitInput(in.From)
		switch st, ok := stages[vin]; {
		case in.From == "":
			v.required(rp + ".from")
		case !ok:
			v.unknownRef(rp+".from", in.From, "source or operator", stages)
		case st.kind == "sink":
			v.errorf(rp+".from", "%q is a sink (%s); an input must be a source or an operator", in.From, st.path)
		case st.kind == "operator" && st.index == i:
			v.errorf(rp+".from", "an operator cannot read its own output")
		case side != "":
			c.checkSideOutput(v, rp+".from", vin, side)
		}
		if in.KeyBy == "" {
			v.errorf(rp+".key_by", "required for the %s input of operator type %s: a field path (such as user.id) or an expression giving the key", r, op.Type)
		} else if _, err := c.keySelector(in.KeyBy); err != nil {
			v.errorf(rp+".key_by", "%v", err)
		}
	}
}

// processingTimeUpstream returns a description of the first operator at
// or upstream of input name that stamps its output with processing time
// (operators.ProcessingTimeOutput), "" when there is none.
func (c *Config) processingTimeUpstream(name string) string {
	seen := map[string]bool{}
	var walk func(name string) string
	walk = func(name string) string {
		vin, side := c.SplitInput(name)
		if seen[vin] {
			return ""
		}
		seen[vin] = true
		op, ok := c.OperatorByName(vin)
		if !ok {
			return ""
		}
		if pt, ok := c.params[op.Name].(operators.ProcessingTimeOutput); ok && pt.ProcessingTimeOutput() && side == "" {
			return fmt.Sprintf("operator %q, type %s on processing time", op.Name, op.Type)
		}
		for _, in := range c.opInputs(op) {
			if d := walk(in); d != "" {
				return d
			}
		}
		return ""
	}
	return walk(name)
}

// validateTwoInputGraph checks, once every operator's params are decoded,
// what spans operators for two-input types: an input of a type on event
// time (operators.Traits.EventTime) whose records carry processing time,
// and a cycle through a second input (validateGraph follows main inputs
// only), at that input's from.
func (c *Config) validateTwoInputGraph(v *validator) {
	for i := range c.Operators {
		op := &c.Operators[i]
		f, ok := c.twoInput(op)
		if !ok {
			continue
		}
		for _, r := range f.Traits.Roles() {
			in, ok := op.Inputs[r]
			if !ok || in.From == "" || !f.Traits.EventTime {
				continue
			}
			if via := c.processingTimeUpstream(in.From); via != "" {
				v.errorf(fmt.Sprintf("operators[%d].inputs.%s.from", i, r), "the %s input reads records stamped with processing time (%s); operator type %s joins on event time: read an event-time stream", r, via, op.Type)
			}
		}
		for _, r := range f.Traits.Roles()[1:] {
			in, ok := op.Inputs[r]
			if !ok {
				continue
			}
			if path := c.pathTo(in.From, op.Name, map[string]bool{}); path != nil {
				v.errorf(fmt.Sprintf("operators[%d].inputs.%s.from", i, r), "cycle: %s -> %s", op.Name, strings.Join(path, " -> "))
			}
		}
	}
}

// pathTo returns the vertices from input name upstream to operator target
// (name first, target last) when target is reachable following inputs, nil
// otherwise.
func (c *Config) pathTo(name, target string, seen map[string]bool) []string {
	vin := c.inputVertex(name)
	if vin == target {
		return []string{vin}
	}
	if seen[vin] {
		return nil
	}
	seen[vin] = true
	op, ok := c.OperatorByName(vin)
	if !ok {
		return nil
	}
	for _, in := range c.opInputs(op) {
		if p := c.pathTo(in, target, seen); p != nil {
			return append([]string{vin}, p...)
		}
	}
	return nil
}

// twoInputOperator fills o, the graph operator of the two-input op of
// type f, and returns its hash edges, one per role (logical input i for
// role i).
func (c *Config) twoInputOperator(o *graph.Operator, op *OperatorConfig, f *operators.Factory) []graph.Edge {
	var edges []graph.Edge
	for i, r := range f.Traits.Roles() {
		in := op.Inputs[r]
		o.Sides = append(o.Sides, graph.Side{Role: r, Input: c.inputVertex(in.From), KeyBy: in.KeyBy})
		o.ErrorSources[i] = c.lineageSource(c.inputVertex(in.From))
		e := c.edge(in.From, op.Name, in.KeyBy, o.Parallelism)
		e.Input = i
		edges = append(edges, e)
	}
	o.Input, o.KeyBy = o.Sides[0].Input, o.Sides[0].KeyBy
	return edges
}
