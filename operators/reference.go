package operators

import (
	"encoding"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// Reference renders the operator reference of reg as Markdown, from the
// declarations alone (after benthos' docs generated from each plugin's
// ConfigSpec): a summary table of every type (sorted by name) with its
// traits, state and Doc, then one section per type (a "### `type`"
// heading) listing its params. A params row gives the field's YAML name,
// its Go type and its `doc:"..."` struct tag; the fields of a nested struct
// follow it as rows named "outer.inner", those of a list of structs as
// "outer[].inner", those of a map of structs as "outer.*.inner". Fields
// without a yaml tag (which the decoder ignores) are left out. The README's
// operator reference is this text (a test in cmd/kstreamd keeps them
// equal), so a type's documentation lives in its Factory and params struct
// only.
func Reference(reg *Registry) string {
	var b strings.Builder
	b.WriteString("| type | key_by | broadcast | async_state | changelog | state | what it does |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, typ := range reg.Types() {
		f, _ := reg.Lookup(typ)
		keyBy := "optional: re-keys the input"
		if f.Traits.Keyed {
			keyBy = "required"
		}
		if f.Traits.TwoInput() {
			keyBy = "per input: " + strings.Join(f.Traits.Roles(), ", ") + " under `inputs:`, each with `from` and `key_by`"
		}
		fmt.Fprintf(&b, "| [`%s`](#%s) | %s | %s | %s | %s | %s | %s |\n", typ, refAnchor(typ), keyBy,
			refYesNo(f.Traits.Broadcast, "required", "refused"), refYesNo(f.Traits.AsyncState, "supported", "no"),
			refChangelog(f.Traits), refStateNames(f.State), refCell(f.Doc))
	}
	for _, typ := range reg.Types() {
		f, _ := reg.Lookup(typ)
		fmt.Fprintf(&b, "\n### `%s`\n\n%s\n\n", typ, refText(f.Doc))
		b.WriteString(ParamsReference(f.Params, "params"))
	}
	return b.String()
}

// refChangelog is the changelog cell of a type's traits: what it does with
// a changelog input and whether it emits one; for a two-input type, per
// role.
func refChangelog(t Traits) string {
	c := t.Changelog
	if t.TwoInput() {
		var parts []string
		for i, r := range t.Roles() {
			if c.Tables[i] {
				parts = append(parts, r+": table (upsert or full changelog)")
			} else {
				parts = append(parts, r+": refused")
			}
		}
		return strings.Join(parts, "; ")
	}
	switch {
	case c.Forwards:
		return "passed through"
	case c.Accepts && c.Upsert && c.Produces:
		return "accepted (upsert or full); emitted"
	case c.Accepts && c.Produces:
		return "accepted (retracts); emitted"
	case c.Produces:
		return "input refused; emitted"
	case c.Accepts:
		return "accepted"
	}
	return "refused"
}

// ParamsReference renders the params of a type whose params struct
// newParams makes (an operator's, a source's, a sink's or a format's) as
// Markdown, as Reference does for an operator: a table of every yaml
// field (nested ones as "outer.inner") with its Go type and `doc:"..."`
// tag, or a sentence saying the type takes none. key is the config key
// the params are under ("params", "format_params").
func ParamsReference(newParams func() any, key string) string {
	if newParams == nil {
		return "Takes no params: a `" + key + ":` mapping is refused.\n"
	}
	t := reflect.TypeOf(newParams())
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var rows []refParamRow
	if t.Kind() == reflect.Struct {
		rows = refParamRows(t, "", t.PkgPath(), map[reflect.Type]bool{})
	}
	if len(rows) == 0 {
		return "Takes an empty `" + key + ":` mapping.\n"
	}
	var b strings.Builder
	b.WriteString("| param | type | meaning |\n| --- | --- | --- |\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| `%s` | `%s` | %s |\n", r.name, r.goType, refCell(r.doc))
	}
	return b.String()
}

// RefCell makes s fit one Markdown table cell of a generated reference:
// one line, "<" and "|" escaped.
func RefCell(s string) string { return refCell(s) }

// refParamRow is one row of a params table.
type refParamRow struct{ name, goType, doc string }

var (
	refDurationType        = reflect.TypeFor[time.Duration]()
	refTextUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// refParamRows lists the yaml fields of struct t, each followed by the rows of
// the struct it holds (directly, in a list, or as map values); prefix is
// the outer path with its separator, pkg the params struct's package (whose
// type names are written unqualified), open the struct types being listed
// (a recursive type is listed once).
func refParamRows(t reflect.Type, prefix, pkg string, open map[reflect.Type]bool) []refParamRow {
	open[t] = true
	defer delete(open, t)
	var rows []refParamRow
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		path := prefix + name
		rows = append(rows, refParamRow{name: path, goType: refTypeName(f.Type, pkg), doc: f.Tag.Get("doc")})
		inner, sep := f.Type, "."
		switch inner.Kind() {
		case reflect.Slice, reflect.Array:
			inner, sep = inner.Elem(), "[]."
		case reflect.Map:
			inner, sep = inner.Elem(), ".*."
		}
		for inner.Kind() == reflect.Pointer {
			inner = inner.Elem()
		}
		if refNested(inner) && !open[inner] {
			rows = append(rows, refParamRows(inner, path+sep, pkg, open)...)
		}
	}
	return rows
}

// refNested reports whether t is a struct the decoder decodes field by field
// (not a duration nor a type that decodes itself from text).
func refNested(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && t != refDurationType && !reflect.PointerTo(t).Implements(refTextUnmarshalerType)
}

// refTypeName writes t as Go spells it, with the types of package pkg
// unqualified: []AggregateSpec, map[string]Expression, time.Duration.
func refTypeName(t reflect.Type, pkg string) string {
	if t.Name() != "" {
		if t.PkgPath() == "" || t.PkgPath() == pkg {
			return t.Name()
		}
		return t.String()
	}
	switch t.Kind() {
	case reflect.Slice:
		return "[]" + refTypeName(t.Elem(), pkg)
	case reflect.Array:
		return fmt.Sprintf("[%d]%s", t.Len(), refTypeName(t.Elem(), pkg))
	case reflect.Map:
		return "map[" + refTypeName(t.Key(), pkg) + "]" + refTypeName(t.Elem(), pkg)
	case reflect.Pointer:
		return "*" + refTypeName(t.Elem(), pkg)
	}
	return t.String()
}

// refText makes s one line of Markdown text: whitespace runs become one
// space, and a "<" is escaped so that "<name>" is not taken for HTML.
func refText(s string) string {
	return strings.ReplaceAll(strings.Join(strings.Fields(s), " "), "<", `\<`)
}

// refCell makes s fit one Markdown table cell: refText with pipes escaped.
func refCell(s string) string { return strings.ReplaceAll(refText(s), "|", `\|`) }

// refAnchor is the GitHub heading anchor of "### `typ`".
func refAnchor(typ string) string { return strings.ToLower(typ) }

func refYesNo(ok bool, yes, no string) string {
	if ok {
		return yes
	}
	return no
}

// refStateNames renders the declared state names, "none" for none.
func refStateNames(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "`" + n + "`"
	}
	return strings.Join(out, ", ")
}
