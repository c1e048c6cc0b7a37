package graph

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestSplitUnits: the unit count must be in [1, max parallelism].
func TestSplitUnits(t *testing.T) {
	g := &Graph{Job: "j", MaxParallelism: 8}
	for _, tc := range []struct {
		units int
		err   string
	}{
		{0, "graph: 0 units: must be in [1, 8] (the max parallelism)"},
		{9, "graph: 9 units: must be in [1, 8] (the max parallelism)"},
		{8, ""},
	} {
		_, err := Split(g, tc.units)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.err {
			t.Errorf("Split(%d units): %q, want %q", tc.units, got, tc.err)
		}
	}
	if got, want := RepartitionTopic("clicks", 2), "clicks-2-repartition"; got != want {
		t.Errorf("RepartitionTopic = %q, want %q", got, want)
	}
}

// policies renders, per stage, each source's format and bad-record policy
// and each operator's ErrorSources: "<stage>:source <name> <format>
// <on_error> <dead_letter_topic> <policy source>" and "<stage>:operator
// <name> <main> <broadcast>".
func policies(st *Stages) []string {
	var out []string
	for _, s := range st.Stages {
		for _, src := range s.Graph.Sources {
			out = append(out, fmt.Sprintf("%d:source %s %s %s %q %q", s.Index, src.Name, src.Format, src.OnError, src.DeadLetterTopic, src.PolicySource))
		}
		for _, o := range s.Graph.Operators {
			out = append(out, fmt.Sprintf("%d:operator %s %q %q", s.Index, o.Name, o.ErrorSources[0], o.ErrorSources[1]))
		}
	}
	return out
}

// TestSplitPolicy: the repartition source of a stage inherits the format
// and the bad-record policy of the one job source upstream of its hash
// edge, following main inputs across stages (stage 2's is a's, read
// through stage 1); a stage's operators obey it (their main input's
// ErrorSources[0] names the repartition source), a broadcast input keeps
// its own source; stage 0 is unchanged. Two sources with different
// policies give two stages with different policies. Without an upstream
// source the repartition source fails bad records and reads JSON.
func TestSplitPolicy(t *testing.T) {
	g := &Graph{Job: "j", MaxParallelism: 8,
		Sources: []*Source{
			{Name: "a", Topic: "a", Format: "string", OnError: "dead-letter", DeadLetterTopic: "dlq-a"},
			{Name: "b", Topic: "b", Format: "json", OnError: "skip"},
			{Name: "rules", Topic: "rules", Format: "json", OnError: "fail", Broadcast: true},
		},
		Operators: []*Operator{
			{Name: "x", Input: "a", ErrorSources: [2]string{"a"}},
			{Name: "y", Input: "x", Broadcast: "rules", ErrorSources: [2]string{"a", "rules"}},
			{Name: "y2", Input: "y", ErrorSources: [2]string{"a"}},
			{Name: "z", Input: "b", ErrorSources: [2]string{"b"}},
			{Name: "w", Input: "z", ErrorSources: [2]string{"b"}},
		},
		Edges: []Edge{
			{From: "a", To: "x", Kind: Forward},
			{From: "x", To: "y", Kind: Hash, KeyBy: "k"},
			{From: "rules", To: "y", Input: 1, Kind: Broadcast},
			{From: "y", To: "y2", Kind: Hash, KeyBy: "k2"},
			{From: "b", To: "z", Kind: Hash, KeyBy: "k"},
			{From: "z", To: "w", Kind: Forward},
		},
	}
	st, err := Split(g, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`0:source a string dead-letter "dlq-a" ""`,
		`0:source b json skip "" ""`,
		`0:operator x "a" ""`,
		`1:source rules json fail "" ""`,
		`1:source repartition.1 string dead-letter "dlq-a" "a"`,
		`1:operator y "repartition.1" "rules"`,
		`2:source repartition.2 string dead-letter "dlq-a" "a"`,
		`2:operator y2 "repartition.2" ""`,
		`3:source repartition.3 json skip "" "b"`,
		`3:operator z "repartition.3" ""`,
		`3:operator w "repartition.3" ""`,
	}
	if got := policies(st); !slices.Equal(got, want) {
		t.Errorf("policies:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := g.Operators[1].ErrorSources; got != [2]string{"a", "rules"} {
		t.Errorf("Split changed the planned graph's ErrorSources of y to %q", got)
	}

	orphan := &Graph{Job: "j", MaxParallelism: 8,
		Operators: []*Operator{{Name: "x"}, {Name: "y", Input: "x"}},
		Edges:     []Edge{{From: "x", To: "y", Kind: Hash, KeyBy: "k"}},
	}
	if st, err = Split(orphan, 1); err != nil {
		t.Fatal(err)
	}
	want = []string{`0:operator x "" ""`, `1:source repartition.1 json fail "" ""`, `1:operator y "repartition.1" ""`}
	if got := policies(st); !slices.Equal(got, want) {
		t.Errorf("policies without an upstream source:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSplitChangelogHeader: a repartition topic carries each record's
// change kind: its sink writes in header mode and its source reads the
// header back; the job's own sinks and sources keep their modes.
func TestSplitChangelogHeader(t *testing.T) {
	g := &Graph{Job: "j", MaxParallelism: 8,
		Sources:   []*Source{{Name: "a", Topic: "a"}},
		Operators: []*Operator{{Name: "x", Input: "a"}, {Name: "y", Input: "x", ChangelogInput: true}},
		Sinks:     []*Sink{{Name: "out", Input: "y", Topic: "out", Changelog: ChangelogUpsert}},
		Edges: []Edge{
			{From: "a", To: "x", Kind: Forward}, {From: "x", To: "y", Kind: Hash, KeyBy: "k"}, {From: "y", To: "out", Kind: Forward},
		},
	}
	st, err := Split(g, 2)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range st.Stages {
		for _, src := range s.Graph.Sources {
			got = append(got, fmt.Sprintf("%d:source %s changelog=%v", s.Index, src.Name, src.Changelog))
		}
		for _, o := range s.Graph.Operators {
			got = append(got, fmt.Sprintf("%d:operator %s changelog_input=%v", s.Index, o.Name, o.ChangelogInput))
		}
		for _, k := range s.Graph.Sinks {
			got = append(got, fmt.Sprintf("%d:sink %s changelog=%s", s.Index, k.Name, k.Changelog))
		}
	}
	want := []string{
		"0:source a changelog=false", "0:operator x changelog_input=false", "0:sink repartition.1 changelog=header",
		"1:source repartition.1 changelog=true", "1:operator y changelog_input=true", "1:sink out changelog=upsert",
	}
	if !slices.Equal(got, want) {
		t.Errorf("stages:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSplitTwoInput: a two-input operator starts a stage that reads one
// repartition topic per role ("<job>-<stage>-<role>-repartition"), each
// written by the stage of that role's input (here left from stage 1,
// after a keyed operator, right from stage 0) and feeding the operator's
// logical input of the role over a forward edge; the operator's sides and
// error sources name the role's repartition source, and each repartition
// source inherits the policy of the job source its records come from. A
// one-input stage keeps its topic name. An input of a two-input operator
// that is not a hash edge is refused.
func TestSplitTwoInput(t *testing.T) {
	g := &Graph{Job: "j", MaxParallelism: 8,
		Sources: []*Source{
			{Name: "a", Topic: "a", Format: "json", OnError: "skip"},
			{Name: "b", Topic: "b", Format: "string", OnError: "dead-letter", DeadLetterTopic: "dlq-b"},
		},
		Operators: []*Operator{
			{Name: "x", Input: "a", ErrorSources: [2]string{"a"}},
			{Name: "both", Input: "x", KeyBy: "k", ErrorSources: [2]string{"a", "b"},
				Sides: []Side{{Role: "left", Input: "x", KeyBy: "k"}, {Role: "right", Input: "b", KeyBy: "id"}}},
			{Name: "after", Input: "both", ErrorSources: [2]string{"a"}},
		},
		Sinks: []*Sink{{Name: "out", Input: "after", Topic: "out"}},
		Edges: []Edge{
			{From: "a", To: "x", Kind: Hash, KeyBy: "u"},
			{From: "x", To: "both", Kind: Hash, KeyBy: "k"},
			{From: "b", To: "both", Input: 1, Kind: Hash, KeyBy: "id"},
			{From: "both", To: "after", Kind: Forward},
			{From: "after", To: "out", Kind: Forward},
		},
	}
	st, err := Split(g, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := `units=2
stage 0
  source a topic=a
  source b topic=b
  sink repartition.1 topic=j-1-repartition units=2
  sink repartition.2.right topic=j-2-right-repartition units=2
  a -hash(u)-> repartition.1
  b -hash(id)-> repartition.2.right
stage 1
  source repartition.1 topic=j-1-repartition repartition
  operator x type= input=repartition.1
  sink repartition.2.left topic=j-2-left-repartition units=2
  repartition.1 -forward-> x
  x -hash(k)-> repartition.2.left
stage 2
  source repartition.2.left topic=j-2-left-repartition repartition
  source repartition.2.right topic=j-2-right-repartition repartition
  operator both type= input=repartition.2.left
  operator after type= input=both
  sink out topic=out
  repartition.2.left -forward-> both
  repartition.2.right -forward-> both[1]
  both -forward-> after
  after -forward-> out
repartition j-1-repartition partitions=2 0->1 (a -hash(u)-> x)
repartition j-2-left-repartition partitions=2 1->2 (x -hash(k)-> both)
repartition j-2-right-repartition partitions=2 0->2 (b -hash(id)-> both[1])
`
	if got := st.String(); got != want {
		t.Errorf("stages:\n%s\nwant:\n%s", got, want)
	}
	var reps []string
	for _, r := range st.Repartitions {
		reps = append(reps, fmt.Sprintf("%s vertex=%s role=%q input=%d", r.Topic, r.Vertex, r.Role, r.Input))
	}
	if want := []string{
		`j-1-repartition vertex=repartition.1 role="" input=0`,
		`j-2-left-repartition vertex=repartition.2.left role="left" input=0`,
		`j-2-right-repartition vertex=repartition.2.right role="right" input=1`,
	}; !slices.Equal(reps, want) {
		t.Errorf("repartitions:\n%s\nwant:\n%s", strings.Join(reps, "\n"), strings.Join(want, "\n"))
	}
	wantPolicies := []string{
		`0:source a json skip "" ""`,
		`0:source b string dead-letter "dlq-b" ""`,
		`1:source repartition.1 json skip "" "a"`,
		`1:operator x "repartition.1" ""`,
		`2:source repartition.2.left json skip "" "a"`,
		`2:source repartition.2.right string dead-letter "dlq-b" "b"`,
		`2:operator both "repartition.2.left" "repartition.2.right"`,
		`2:operator after "repartition.2.left" ""`,
	}
	for _, s := range st.Stages {
		for _, src := range s.Graph.Sources {
			if src.Repartition && !src.Changelog {
				t.Errorf("stage %d: repartition source %s does not read the change kind header", s.Index, src.Name)
			}
		}
	}
	if got := policies(st); !slices.Equal(got, wantPolicies) {
		t.Errorf("policies:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantPolicies, "\n"))
	}
	both := st.Stages[2].Graph.Operators[0]
	if want := []Side{{"left", "repartition.2.left", "k"}, {"right", "repartition.2.right", "id"}}; !slices.Equal(both.Sides, want) {
		t.Errorf("sides in stage 2: %+v, want %+v", both.Sides, want)
	}
	if g.Operators[1].Sides[0].Input != "x" || g.Operators[1].ErrorSources != [2]string{"a", "b"} {
		t.Errorf("Split changed the planned graph's operator both: %+v", g.Operators[1])
	}
	if st.Stages[0].Graph.Sinks[1].TransactionalIDPrefix != "kstreamd-j-repartition.2.right" {
		t.Errorf("right repartition sink's transactional id prefix %q", st.Stages[0].Graph.Sinks[1].TransactionalIDPrefix)
	}

	g.Edges[2].Kind = Forward
	if _, err := Split(g, 2); err == nil || err.Error() != `graph: input 1 of two-input operator "both" is a forward edge; cluster mode needs a key-group hash edge per role` {
		t.Errorf("Split with a forward input of a two-input operator: %v", err)
	}
}
