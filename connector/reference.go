package connector

import (
	"fmt"
	"strings"

	"github.com/kstreamd/kstreamd/operators"
)

// Reference renders the source, sink and format reference of reg as
// Markdown, from the declarations alone, as operators.Reference does for
// operators: one summary table per kind (types sorted by name), then one
// section per type (a "#### source `type`" heading) with its Doc and
// params (operators.ParamsReference). The README's source, sink and format
// reference is this text (a test in cmd/kstreamd keeps them equal).
func Reference(reg *Registry) string {
	var b strings.Builder
	b.WriteString("| source type | format | what it reads |\n| --- | --- | --- |\n")
	for _, typ := range reg.SourceTypes() {
		f, _ := reg.Source(typ)
		fmt.Fprintf(&b, "| [`%s`](#source-%s) | %s | %s |\n", typ, anchor(typ), yesNo(f.Formats), operators.RefCell(f.Doc))
	}
	b.WriteString("\n| sink type | deliveries | format | what it writes |\n| --- | --- | --- | --- |\n")
	for _, typ := range reg.SinkTypes() {
		f, _ := reg.Sink(typ)
		ds := make([]string, len(f.Deliveries))
		for i, d := range f.Deliveries {
			ds[i] = "`" + d.String() + "`"
		}
		fmt.Fprintf(&b, "| [`%s`](#sink-%s) | %s | %s | %s |\n", typ, anchor(typ), strings.Join(ds, ", "), yesNo(f.Formats), operators.RefCell(f.Doc))
	}
	b.WriteString("\n| format | used by | bad-record reasons | what it does |\n| --- | --- | --- | --- |\n")
	for _, typ := range reg.FormatTypes() {
		f, _ := reg.Format(typ)
		roles := "sources and sinks"
		if len(f.Roles) == 1 {
			roles = string(f.Roles[0]) + "s"
		}
		reasons := "-"
		if len(f.Reasons) > 0 {
			reasons = "`" + strings.Join(f.Reasons, "`, `") + "`"
		}
		fmt.Fprintf(&b, "| [`%s`](#format-%s) | %s | %s | %s |\n", typ, anchor(typ), roles, reasons, operators.RefCell(f.Doc))
	}
	section := func(kind, typ, doc, key string, params func() any) {
		fmt.Fprintf(&b, "\n#### %s `%s`\n\n%s\n\n%s", kind, typ, operators.RefCell(doc), operators.ParamsReference(params, key))
	}
	for _, typ := range reg.SourceTypes() {
		f, _ := reg.Source(typ)
		section("source", typ, f.Doc, "params", f.Params)
	}
	for _, typ := range reg.SinkTypes() {
		f, _ := reg.Sink(typ)
		section("sink", typ, f.Doc, "params", f.Params)
	}
	for _, typ := range reg.FormatTypes() {
		f, _ := reg.Format(typ)
		section("format", typ, f.Doc, "format_params", f.Params)
	}
	return b.String()
}

// anchor is the GitHub anchor of a type's heading after its kind, e.g.
// "json_schema" for "#### format `json_schema`" (format-json_schema).
func anchor(typ string) string { return strings.ToLower(typ) }

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
