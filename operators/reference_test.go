package operators

import (
	"reflect"
	"testing"
	"time"
)

// The params of refTestFactory: every shape Reference renders.
type (
	refTestParams struct {
		Name     string                  `yaml:"name" doc:"A name; the | is escaped, <x> too."`
		Every    time.Duration           `yaml:"every" doc:"How often."`
		Where    BoolExpression          `yaml:"where" doc:"A condition."`
		Inner    refTestInner            `yaml:"inner" doc:"A nested struct."`
		Items    []refTestItem           `yaml:"items" doc:"A list of structs."`
		ByName   map[string]*refTestItem `yaml:"by_name" doc:"A map of structs."`
		Tags     []string                `yaml:"tags"`
		Self     *refTestParams          `yaml:"self" doc:"Recursive: listed once."`
		ignored  int                     // unexported: left out
		Untagged int                     // no yaml tag: left out
		Skipped  int                     `yaml:"-"`
	}
	refTestInner struct {
		Depth int  `yaml:"depth,omitempty" doc:"How deep."`
		On    bool `yaml:"on" doc:"Spaces   and	tabs collapse."`
	}
	refTestItem struct {
		Of Expression `yaml:"of" doc:"Per item."`
	}
)

// TestReference renders a registry holding a type with every params shape,
// one without params and one with an empty params struct, and compares the
// Markdown exactly.
func TestReference(t *testing.T) {
	reg := NewRegistry()
	newFn := func(FactoryContext) (any, error) { return nil, nil }
	for _, f := range []Factory{
		{Type: "zeta", Doc: "Has every shape.", Traits: Traits{Keyed: true, AsyncState: true, Changelog: ChangelogTraits{Accepts: true, Produces: true}}, State: []string{"one", "two"},
			Params: func() any { return &refTestParams{} }, New: newFn},
		{Type: "alpha", Doc: "Not keyed,\n  no params; a | pipe.", Traits: Traits{Changelog: ChangelogTraits{Forwards: true}}, New: newFn},
		{Type: "mid", Doc: "Keyed, broadcast, empty params.", Traits: Traits{Keyed: true, Broadcast: true},
			State: []string{"rules (broadcast)"}, Params: func() any { return &struct{}{} }, New: newFn},
	} {
		if err := reg.Register(f); err != nil {
			t.Fatal(err)
		}
	}
	const want = "| type | key_by | broadcast | async_state | changelog | state | what it does |\n" +
		"| --- | --- | --- | --- | --- | --- | --- |\n" +
		"| [`alpha`](#alpha) | optional: re-keys the input | refused | no | passed through | none | Not keyed, no params; a \\| pipe. |\n" +
		"| [`mid`](#mid) | required | required | no | refused | `rules (broadcast)` | Keyed, broadcast, empty params. |\n" +
		"| [`zeta`](#zeta) | required | refused | supported | accepted (retracts); emitted | `one`, `two` | Has every shape. |\n" +
		"\n### `alpha`\n\nNot keyed, no params; a | pipe.\n\n" +
		"Takes no params: a `params:` mapping is refused.\n" +
		"\n### `mid`\n\nKeyed, broadcast, empty params.\n\n" +
		"Takes an empty `params:` mapping.\n" +
		"\n### `zeta`\n\nHas every shape.\n\n" +
		"| param | type | meaning |\n| --- | --- | --- |\n" +
		"| `name` | `string` | A name; the \\| is escaped, \\<x> too. |\n" +
		"| `every` | `time.Duration` | How often. |\n" +
		"| `where` | `BoolExpression` | A condition. |\n" +
		"| `inner` | `refTestInner` | A nested struct. |\n" +
		"| `inner.depth` | `int` | How deep. |\n" +
		"| `inner.on` | `bool` | Spaces and tabs collapse. |\n" +
		"| `items` | `[]refTestItem` | A list of structs. |\n" +
		"| `items[].of` | `Expression` | Per item. |\n" +
		"| `by_name` | `map[string]*refTestItem` | A map of structs. |\n" +
		"| `by_name.*.of` | `Expression` | Per item. |\n" +
		"| `tags` | `[]string` |  |\n" +
		"| `self` | `*refTestParams` | Recursive: listed once. |\n"
	if got := Reference(reg); got != want {
		t.Errorf("Reference:\n%s\nwant:\n%s", got, want)
	}
}

// TestReferenceBuiltins: every built-in type has a Doc, and every params
// field of a built-in has a doc tag (the README shows it).
func TestReferenceBuiltins(t *testing.T) {
	reg := NewBuiltinRegistry()
	for _, typ := range reg.Types() {
		f, _ := reg.Lookup(typ)
		if f.Doc == "" {
			t.Errorf("%s: no Doc", typ)
		}
		if f.Params == nil {
			continue
		}
		pt := reflect.TypeOf(f.Params()).Elem()
		for _, r := range refParamRows(pt, "", pt.PkgPath(), map[reflect.Type]bool{}) {
			if r.doc == "" {
				t.Errorf("%s: params field %s has no doc tag", typ, r.name)
			}
		}
	}
}

// TestRefChangelogTables: the changelog cell of the built-in table readers
// says what each accepts: changelog_normalize an upsert changelog (a table
// source), table_join's right role a table and its left none.
func TestRefChangelogTables(t *testing.T) {
	reg := NewBuiltinRegistry()
	for typ, want := range map[string]string{
		ChangelogNormalizeType: "accepted (upsert or full); emitted",
		TableJoinType:          "left: refused; right: table (upsert or full changelog)",
		IntervalJoinType:       "left: refused; right: refused",
		AggregateType:          "accepted (retracts); emitted",
	} {
		f, _ := reg.Lookup(typ)
		if got := refChangelog(f.Traits); got != want {
			t.Errorf("%s: changelog cell %q, want %q", typ, got, want)
		}
	}
}
