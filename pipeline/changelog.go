package pipeline

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/operators"
)

// changelogKind is what a stream of a job carries (Flink's ChangelogMode):
// append-only records, a full changelog (+I, -U then +U per update, -D)
// or an upsert changelog (a table source: +U per upsert without the -U of
// the row it replaces, -D per tombstone), in that order of what a reader
// must handle: a stream mixing kinds (a two-input operator's side output)
// is the greatest of them.
type changelogKind int

const (
	appendOnly changelogKind = iota
	fullChangelog
	upsertChangelog
)

// validateChangelogs checks the changelog settings and where changelog
// streams flow (Flink's changelog-mode inference): sources[].changelog is
// "header" or unset, and not on a table source; sinks[].changelog is
// upsert or header; an operator whose main input is a changelog must be of
// a type that accepts one (operators.Traits.AcceptsChangelog), an upsert
// changelog (a table source) one that accepts upserts
// (operators.Traits.AcceptsUpsert; else changelog_normalize is the way),
// and its params may refuse what cannot retract
// (operators.ChangelogInputChecker); a two-input operator's role marked
// as a table (operators.ChangelogTraits.Tables) must be a changelog and
// every other role append-only; a broadcast source may be a changelog
// only when it is the table source of a type that broadcasts one
// (operators.Traits.BroadcastTable).
func (c *Config) validateChangelogs(v *validator) {
	for i, s := range c.Sources {
		p := fmt.Sprintf("sources[%d]", i)
		if s.Changelog != "" && !slices.Contains(graph.SourceChangelogModes(), s.Changelog) {
			v.errorf(p+".changelog", "a source reads a changelog only in header mode (its kind in the %s header, as a sink with changelog: header writes it); want header (a full changelog) or upsert_header (an upsert changelog: a table's, written by a header sink), got %q", "kstreamd-change", s.Changelog)
		} else if s.Changelog != "" && s.Table {
			v.errorf(p+".changelog", "a table source (table: true) reads its topic as upserts by Kafka key and tombstones, not kinds in a header; set either table: true or changelog: %s", s.Changelog)
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
		f, known := reg.Lookup(op.Type)
		if s, ok := c.SourceByName(op.Broadcast); ok && (s.Changelog != "" || s.Table) && !(known && f.Traits.BroadcastTable && s.Table) {
			if s.Table {
				v.errorf(p+".broadcast", "%q is read as a table (table: true); a broadcast input of operator type %s must be an append-only source; a table source is broadcast only to %s", op.Broadcast, op.Type, typesBroadcastingTables(reg))
			} else {
				v.errorf(p+".broadcast", "%q is read as a changelog (changelog: %s); a broadcast input must be an append-only source", op.Broadcast, s.Changelog)
			}
		}
		if !known {
			continue
		}
		if f.Traits.TwoInput() {
			c.validateChangelogRoles(v, p, op, f)
			continue
		}
		kind, origin := c.changelogStream(op.Input)
		if kind == appendOnly {
			continue
		}
		if !f.Traits.AcceptsChangelog() {
			v.errorf(p+".input", "operator %q (type %s) cannot read a changelog (it would take each -U and -D for a new record), but %s; %s accept one",
				op.Name, op.Type, origin, typesAccepting(reg))
			continue
		}
		if kind == upsertChangelog && !f.Traits.AcceptsUpsert() {
			v.errorf(p+".input", "operator %q (type %s) needs a full changelog (each update a -U of the old row, then a +U), but %s, an upsert changelog whose +U does not carry the row it replaces; read it through a %s operator (key_by: key) first, which emits the full changelog",
				op.Name, op.Type, origin, operators.ChangelogNormalizeType)
			continue
		}
		if kind == upsertChangelog && f.Traits.Keyed && op.KeyBy != "" {
			checkUpsertKey(v, p+".key_by", op.KeyBy, origin)
		}
		if cc, ok := c.params[op.Name].(operators.ChangelogInputChecker); ok {
			cc.CheckChangelogInput(func(field, msg string) {
				v.errorf(p+".params."+field, "%s (%s)", msg, origin)
			})
		}
	}
}

// upsertRole reports whether params (an operator's decoded params) declare
// role an upsert input (operators.UpsertRolesParams).
func upsertRole(params any, role string) bool {
	u, ok := params.(operators.UpsertRolesParams)
	return ok && slices.Contains(u.UpsertRoles(), role)
}

// validateChangelogRoles checks the inputs of the two-input operator op
// (at path p) of type f: for a type that accepts changelogs
// (ChangelogTraits.Accepts: join), every role may read an append-only
// stream or a full changelog, and an upsert changelog only when its params
// declare the role an upsert input (operators.UpsertRolesParams); for the
// others a role marked as a table (operators.ChangelogTraits.Tables) must
// read a changelog (a table source, or an operator's changelog), every
// other role an append-only stream.
func (c *Config) validateChangelogRoles(v *validator, p string, op *OperatorConfig, f *operators.Factory) {
	for i, r := range f.Traits.Roles() {
		in, ok := op.Inputs[r]
		if !ok || in.From == "" {
			continue
		}
		kind, origin := c.changelogStream(in.From)
		rp := p + ".inputs." + r + ".from"
		switch {
		case f.Traits.Changelog.Accepts && kind == upsertChangelog && !upsertRole(c.params[op.Name], r):
			v.errorf(rp, "the %s input of operator type %s is an upsert changelog (%s): its +U does not carry the row it replaces, so list %s in params.upsert (one row per key, replaced by each upsert) or read it through a %s operator (key_by: key) first",
				r, op.Type, strings.Replace(origin, "its input", "input", 1), r, operators.ChangelogNormalizeType)
		case f.Traits.Changelog.Accepts:
			// a two-input type that retracts (join) reads an append-only
			// stream or a full changelog on either role
		case f.Traits.Changelog.Tables[i] && kind == appendOnly:
			v.errorf(rp, "the %s input of operator type %s is read as a table, but %q is append-only; read the topic as a table (table: true on its source) or from an operator emitting a changelog", r, op.Type, in.From)
		case !f.Traits.Changelog.Tables[i] && kind != appendOnly:
			v.errorf(rp, "the %s input of operator type %s must be append-only (it would take each -U and -D for a new record), but %s", r, op.Type, strings.Replace(origin, "its input", "input", 1))
		}
		if kind == upsertChangelog && f.Traits.Changelog.Tables[i] && in.KeyBy != "" {
			checkUpsertKey(v, p+".inputs."+r+".key_by", in.KeyBy, strings.Replace(origin, "its input", "input", 1))
		}
	}
}

// checkUpsertKey refuses keying an upsert changelog (a table source's, at
// path p, read as origin says) by anything but its Kafka key: a table's
// tombstones have a null value, so a key taken from the value makes every
// delete a bad record (skipped by default) and the deleted rows stay.
func checkUpsertKey(v *validator, p, keyBy, origin string) {
	if strings.TrimSpace(keyBy) == "key" {
		return
	}
	v.errorf(p, "key_by %q takes the key from the value, but %s, whose rows are keyed by their Kafka key and whose deletes (tombstones) have no value; use key_by: key (re-key after %s)",
		keyBy, origin, operators.ChangelogNormalizeType)
}

// typesBroadcastingTables lists, for messages, the registered types whose
// broadcast input is a table: "global_table_join".
func typesBroadcastingTables(reg *operators.Registry) string {
	var out []string
	for _, t := range reg.Types() {
		if f, _ := reg.Lookup(t); f.Traits.BroadcastTable {
			out = append(out, t)
		}
	}
	return strings.Join(out, ", ")
}

// changelogStream reports what the records of input (a source, an
// operator, or an operator's side output) are, and for a changelog names
// where it starts for messages: `its input "x" is the changelog of
// operator "y" (type aggregate)`. A source's records are an upsert
// changelog with table: true or changelog: upsert_header and a full one
// with changelog: header. An operator's output is a full changelog when
// its type produces one, or the changelog it reads when it forwards one;
// a side output carries input records, so it is what the operator's main
// input is, and a two-input operator's side output (late records of
// either role: table_join's late table rows included) what its inputs
// are, the most demanding of them (changelogKind's order), a changelog
// read as a table (operators.ChangelogTraits.Tables: its -U dropped)
// taken as an upsert changelog. A two-input
// operator's output is append-only unless its type produces a changelog
// (join).
func (c *Config) changelogStream(input string) (changelogKind, string) {
	kind, origin, via := c.changelogOrigin(input, len(c.Operators)+1)
	if kind == appendOnly {
		return appendOnly, ""
	}
	return kind, describeChangelog(input, via, origin)
}

// changelogOrigin is changelogStream's walk upstream from input: the kind,
// where the changelog starts (`source "users" (table: true)`) and the
// operators that pass it on, nearest first. budget bounds the operators
// walked through, so that a cycle (reported elsewhere) ends.
func (c *Config) changelogOrigin(input string, budget int) (kind changelogKind, origin string, via []string) {
	reg := c.registry()
	name, side := c.SplitInput(input)
	for ; budget > 0; budget-- {
		if s, ok := c.SourceByName(name); ok {
			switch {
			case s.Table:
				return upsertChangelog, fmt.Sprintf("source %q (table: true)", s.Name), via
			case s.Changelog == graph.ChangelogUpsertHeader:
				return upsertChangelog, fmt.Sprintf("source %q (changelog: %s)", s.Name, s.Changelog), via
			case s.Changelog != "":
				return fullChangelog, fmt.Sprintf("source %q (changelog: %s)", s.Name, s.Changelog), via
			}
			return appendOnly, "", nil
		}
		op, ok := c.OperatorByName(name)
		if !ok {
			return appendOnly, "", nil
		}
		f, known := reg.Lookup(op.Type)
		if !known {
			return appendOnly, "", nil
		}
		if f.Traits.TwoInput() {
			if side == "" {
				if f.Traits.Changelog.Produces { // join's
					return fullChangelog, fmt.Sprintf("operator %q (type %s)", op.Name, op.Type), via
				}
				return appendOnly, "", nil
			}
			// a side output holds records of either role: the most
			// demanding of the inputs' kinds, a role read as a table
			// (table_join's right, whose -U it drops) an upsert changelog
			via = append(via, fmt.Sprintf("%q (type %s)", op.Name, op.Type))
			kind = appendOnly
			var roleOrigin string
			var roleVia []string
			for i, r := range f.Traits.Roles() {
				in, ok := op.Inputs[r]
				if !ok || in.From == "" {
					continue
				}
				k, o, v := c.changelogOrigin(in.From, budget-1)
				if k != appendOnly && f.Traits.Changelog.Tables[i] {
					// read as a table: -U dropped, so what reaches a
					// side output are upserts (+I/+U) and deletes
					k = upsertChangelog
				}
				if k > kind {
					kind, roleOrigin, roleVia = k, o, v
				}
			}
			if kind == appendOnly {
				return appendOnly, "", nil
			}
			return kind, roleOrigin, append(via, roleVia...)
		}
		produces := f.Traits.Changelog.Produces
		if po, ok := c.params[op.Name].(operators.ChangelogOutputParams); ok {
			produces = po.ProducesChangelog()
		}
		if side == "" && produces {
			return fullChangelog, fmt.Sprintf("operator %q (type %s)", op.Name, op.Type), via
		}
		if side == "" && !f.Traits.Changelog.Forwards {
			return appendOnly, "", nil
		}
		via = append(via, fmt.Sprintf("%q (type %s)", op.Name, op.Type))
		name, side = c.SplitInput(op.Input)
	}
	return appendOnly, "", nil
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

// upsertSinksOnly reports whether nothing reads the -U rows of operator
// name's main output, Flink's changelog-mode inference asking an
// aggregate for ONLY_UPDATE_AFTER: at least one stage reads that output,
// and every stage reading it is either a kafka sink in upsert mode (the
// default, sinks[].changelog: upsert, which drops -U) or a one-input,
// unkeyed operator without a broadcast input whose type only forwards
// the changelog (filter, map, flat_map: each -U in gives -U rows out,
// never state or another kind), whose own main output passes this test
// in turn and whose side outputs nobody reads. A forwarding operator that
// drops or maps a -U row changes nothing an upsert sink writes, so the
// rows written are the same with and without the -U rows. A changelog:
// header sink, another sink type, a keyed or two-input reader or a
// retracting aggregate needs them. budget bounds the operators walked
// through, so that a cycle (reported elsewhere) ends.
func (c *Config) upsertSinksOnly(name string, budget int) bool {
	if budget <= 0 {
		return false
	}
	reg := c.registry()
	readers := 0
	for i := range c.Sinks {
		s := &c.Sinks[i]
		if v, _ := c.SplitInput(s.Input); v != name {
			continue
		}
		readers++
		kafka := s.Type == "" || s.Type == "kafka"
		if !kafka || (s.Changelog != "" && s.Changelog != graph.ChangelogUpsert) {
			return false
		}
	}
	for i := range c.Operators {
		op := &c.Operators[i]
		reads := false
		if op.Broadcast != "" {
			if v, _ := c.SplitInput(op.Broadcast); v == name {
				return false
			}
		}
		for _, in := range op.Inputs {
			if v, _ := c.SplitInput(in.From); v == name {
				return false
			}
		}
		if v, side := c.SplitInput(op.Input); v == name {
			if side != "" {
				continue // a side output of name: its input records
			}
			reads = true
		}
		if !reads {
			continue
		}
		readers++
		f, known := reg.Lookup(op.Type)
		if !known || !f.Traits.Changelog.Forwards || f.Traits.Changelog.Produces || f.Traits.Keyed ||
			f.Traits.TwoInput() || f.Router != nil || op.Broadcast != "" || op.KeyBy != "" {
			return false
		}
		if po, ok := c.params[op.Name].(operators.ChangelogOutputParams); ok && po.ProducesChangelog() {
			return false
		}
		if c.sideOutputRead(op.Name) || !c.upsertSinksOnly(op.Name, budget-1) {
			return false
		}
	}
	return readers > 0
}

// sideOutputRead reports whether a stage reads a side output of operator
// name ("name.late").
func (c *Config) sideOutputRead(name string) bool {
	side := func(input string) bool {
		v, s := c.SplitInput(input)
		return v == name && s != ""
	}
	for i := range c.Sinks {
		if side(c.Sinks[i].Input) {
			return true
		}
	}
	for i := range c.Operators {
		op := &c.Operators[i]
		if side(op.Input) || (op.Broadcast != "" && side(op.Broadcast)) {
			return true
		}
		for _, in := range op.Inputs {
			if side(in.From) {
				return true
			}
		}
	}
	return false
}
