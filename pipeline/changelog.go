package pipeline

import (
	"fmt"
	"strings"

	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/operators"
)

// validateChangelogs checks the changelog settings and where changelog
// streams flow (Flink's changelog-mode inference): sources[].changelog is
// "header" or unset; sinks[].changelog is upsert or header; an operator
// whose main input is a changelog must be of a type that accepts one
// (operators.Traits.AcceptsChangelog), and its params may refuse what
// cannot retract (operators.ChangelogInputChecker); a broadcast source
// cannot be a changelog.
func (c *Config) validateChangelogs(v *validator) {
	for i, s := range c.Sources {
		if s.Changelog != "" && s.Changelog != graph.ChangelogHeader {
			v.errorf(fmt.Sprintf("sources[%d].changelog", i), "a source reads a changelog only in header mode (its kind in the %s header, as a sink with changelog: header writes it); want header, got %q", "kstreamd-change", s.Changelog)
		}
	}
	for i, s := range c.Sinks {
		if s.Changelog != "" {
			v.oneOf(fmt.Sprintf("sinks[%d].changelog", i), string(s.Changelog), spellings(graph.ChangelogModes())...)
		}
	}
	reg := c.registry()
	for i := range c.Operators {
		op := &c.Operators[i]
		p := fmt.Sprintf("operators[%d]", i)
		if s, ok := c.SourceByName(op.Broadcast); ok && s.Changelog != "" {
			v.errorf(p+".broadcast", "%q is read as a changelog (changelog: %s); a broadcast input must be an append-only source", op.Broadcast, s.Changelog)
		}
		f, known := reg.Lookup(op.Type)
		if !known {
			continue
		}
		in, origin := c.changelogStream(op.Input)
		if !in {
			continue
		}
		if !f.Traits.AcceptsChangelog() {
			v.errorf(p+".input", "operator %q (type %s) cannot read a changelog (it would take each -U and -D for a new record), but %s; %s accept one",
				op.Name, op.Type, origin, typesAccepting(reg))
			continue
		}
		if cc, ok := c.params[op.Name].(operators.ChangelogInputChecker); ok {
			cc.CheckChangelogInput(func(field, msg string) {
				v.errorf(p+".params."+field, "%s (%s)", msg, origin)
			})
		}
	}
}

// changelogStream reports whether the records of input (a source, an
// operator, or an operator's side output) are a changelog, and if so
// names where it starts for messages: `input "x" is the changelog of
// operator "y" (type aggregate)`. An operator's output is a changelog when
// its type produces one, or forwards one it reads; a side output carries
// input records, so it is a changelog when the operator's main input is.
func (c *Config) changelogStream(input string) (bool, string) {
	reg := c.registry()
	name, side := c.SplitInput(input)
	var via []string
	for range len(c.Operators) + 1 { // a cycle (reported elsewhere) ends here
		if s, ok := c.SourceByName(name); ok {
			if s.Changelog == "" {
				return false, ""
			}
			return true, describeChangelog(input, via, fmt.Sprintf("source %q (changelog: %s)", s.Name, s.Changelog))
		}
		op, ok := c.OperatorByName(name)
		if !ok {
			return false, ""
		}
		f, known := reg.Lookup(op.Type)
		if !known {
			return false, ""
		}
		produces := f.Traits.Changelog.Produces
		if po, ok := c.params[op.Name].(operators.ChangelogOutputParams); ok {
			produces = po.ProducesChangelog()
		}
		if side == "" && produces {
			return true, describeChangelog(input, via, fmt.Sprintf("operator %q (type %s)", op.Name, op.Type))
		}
		if side == "" && !f.Traits.Changelog.Forwards {
			return false, ""
		}
		via = append(via, fmt.Sprintf("%q (type %s)", op.Name, op.Type))
		name, side = c.SplitInput(op.Input)
	}
	return false, ""
}

// describeChangelog says where the changelog read as input starts: origin,
// through the operators via that pass it on.
func describeChangelog(input string, via []string, origin string) string {
	s := fmt.Sprintf("its input %q is the changelog of %s", input, origin)
	if len(via) > 0 {
		s = fmt.Sprintf("its input %q carries the changelog of %s (passed on by %s)", input, origin, strings.Join(via, ", "))
	}
	return s
}

// typesAccepting lists, for messages, the registered types that accept a
// changelog input: "only aggregate, filter, flat_map and map".
func typesAccepting(reg *operators.Registry) string {
	s := typesWith(reg, func(t operators.Traits) bool { return t.AcceptsChangelog() })
	s = strings.TrimSuffix(strings.TrimSuffix(s, " does"), " do")
	return s
}
