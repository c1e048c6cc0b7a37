package pipeline

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/graph"
)

// upgradeYAML is a cluster job of three stages: the source and a filter,
// a dedup keyed by user, a keyed count by user with an exactly-once sink
// (each key_by is an exchange), and the dedup's output to a second
// exactly-once sink.
var upgradeYAML = clusterHead(16, 4, "/unused", "i >= 0") + `  - name: once
    type: dedup
    input: valid
    key_by: user
    params:
      ttl: 10m
  - name: per_user
    type: keyed_count
    input: once
    key_by: user
sinks:
  - name: counts
    input: per_user
    topic: counts
    delivery: exactly-once
    transaction_timeout: 10m
  - name: seen
    input: once
    topic: seen
    delivery: exactly-once
    transaction_timeout: 10m
`

// layoutOf plans yaml's stages and returns their state layout.
func layoutOf(t *testing.T, yaml string) graph.StateLayout {
	t.Helper()
	cfg, err := Parse("upgrade.yaml", []byte(yaml), nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := cfg.PlanStages()
	if err != nil {
		t.Fatal(err)
	}
	return graph.LayoutOf(st)
}

// TestStateLayout: the layout holds exactly the stateful vertices (the
// filter is left out), with their uid, stage, key and the params that
// shape state (dedup's ttl, tagged state:"on", only as on or off), and the
// repartition topic with its key.
func TestStateLayout(t *testing.T) {
	l := layoutOf(t, upgradeYAML)
	got, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"job":"clicks","max_parallelism":16,"units":4,"stages":3,` +
		`"repartitions":[{"topic":"clicks-1-repartition","from":0,"to":1,"key_by":"user"},{"topic":"clicks-2-repartition","from":1,"to":2,"key_by":"user"}],` +
		`"vertices":[{"uid":"clicks","name":"clicks","kind":"source","stage":0,"topics":"clicks"},` +
		`{"uid":"once","name":"once","kind":"operator","stage":1,"type":"dedup","key_by":"user","params":{"by":"","keep":"first","time":"","ttl":"on"}},` +
		`{"uid":"seen","name":"seen","kind":"sink","stage":1,"delivery":"exactly-once"},` +
		`{"uid":"counts","name":"counts","kind":"sink","stage":2,"delivery":"exactly-once"},` +
		`{"uid":"per_user","name":"per_user","kind":"operator","stage":2,"type":"keyed_count","key_by":"user"}]}`
	if string(got) != want {
		t.Errorf("layout:\n%s\nwant\n%s", got, want)
	}
}

// TestCheckUpgrade: which changes of a graph restore the HEADs of the old
// one, and how each one that does not is named (the vertex, what changed).
func TestCheckUpgrade(t *testing.T) {
	old := layoutOf(t, upgradeYAML)
	for _, tc := range []struct {
		name, from, to string
		allowRemoved   bool
		want           []string
	}{
		{name: "a stateless operator's param", from: "condition: i >= 0", to: "condition: i > -1"},
		{name: "dedup's ttl (state:\"on\")", from: "ttl: 10m", to: "ttl: 20m"},
		// The dedup reads a new map (inserted below) instead of the filter.
		{name: "a new stateless operator", from: "    input: valid\n", to: "    input: shaped\n"},
		{name: "a renamed sink keeping its uid", from: "  - name: counts\n", to: "  - name: out\n    uid: counts\n"},
		{name: "a new sink", from: "sinks:\n", to: "sinks:\n  - name: all\n    input: valid\n    topic: all\n"},
		{name: "the operator's type", from: "type: keyed_count", to: "type: count_window_average",
			want: []string{`"per_user" (uid per_user): operator type count_window_average, was keyed_count`}},
		{name: "a state-shaping param", from: "ttl: 10m", to: "ttl: 10m\n      by: i",
			want: []string{`"once" (uid once): operator params.by is "i", was "" (it shapes the operator's state)`}},
		{name: "a removed stateful vertex", from: "  - name: seen\n    input: once\n    topic: seen\n    delivery: exactly-once\n    transaction_timeout: 10m\n", to: "",
			want: []string{`"seen" (uid seen): sink of stage 1 is gone: the HEADs hold its state (set its uid on the vertex that replaces it, or checkpoints.allow_non_restored_state: true to drop it)`}},
		{name: "a removed stateful vertex, allowed", from: "  - name: seen\n    input: once\n    topic: seen\n    delivery: exactly-once\n    transaction_timeout: 10m\n", to: "",
			allowRemoved: true},
		{name: "the key", from: "key_by: user\n    params", to: "key_by: i\n    params",
			want: []string{"repartition topic clicks-1-repartition is keyed by i, was user (its partitions hold other key groups)",
				`"once" (uid once): operator key_by "i", was "user" (its state is keyed by the old key)`}},
		{name: "the source's topic", from: "topic: clicks", to: "topic: taps",
			want: []string{`"clicks" (uid clicks): source reads taps, was clicks (its offsets are of the old topics)`}},
		{name: "a new stage", from: "    input: clicks\n", to: "    input: clicks\n    key_by: user\n",
			want: []string{"4 stages, was 3 (a key_by added or removed moves every later operator to another unit namespace)",
				"repartition topic clicks-3-repartition (stage 2 to 3) is new",
				`"once" (uid once): operator moved from stage 1 to stage [2] (its state is in stage 1's unit namespaces)`,
				`"seen" (uid seen): sink moved from stage 1 to stage [2] (its state is in stage 1's unit namespaces)`,
				`"counts" (uid counts): sink moved from stage 2 to stage [3] (its state is in stage 2's unit namespaces)`,
				`"per_user" (uid per_user): operator moved from stage 2 to stage [3] (its state is in stage 2's unit namespaces)`}},
		{name: "the unit count", from: "units: 4", to: "units: 2", want: []string{"cluster.units 2, was 4"}},
	} {
		yaml := strings.Replace(upgradeYAML, tc.from, tc.to, 1)
		if tc.name == "a new stateless operator" {
			yaml = strings.Replace(yaml, "  - name: once\n", "  - name: shaped\n    type: map\n    input: valid\n    params:\n      value: '{\"user\": user, \"i\": i}'\n  - name: once\n", 1)
		}
		if yaml == upgradeYAML {
			t.Fatalf("%s: the replacement changed nothing", tc.name)
		}
		var got []string
		for _, p := range graph.CheckUpgrade(old, layoutOf(t, yaml), tc.allowRemoved) {
			got = append(got, p.String())
		}
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%s:\n%s\nwant\n%s", tc.name, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
		}
	}
}

// TestCheckUpgradeBinaryVersion: a param only one layout has (a field a
// binary version added, or removed) is no change; one both have with
// another value is.
func TestCheckUpgradeBinaryVersion(t *testing.T) {
	old := layoutOf(t, upgradeYAML)
	next := layoutOf(t, upgradeYAML)
	for i, v := range old.Vertices {
		if v.UID == "once" {
			delete(old.Vertices[i].Params, "time") // the older binary had no time param
			old.Vertices[i].Params["window"] = json.RawMessage(`"5m"`)
		}
	}
	if p := graph.CheckUpgrade(old, next, false); len(p) != 0 {
		t.Errorf("a param only one version has: %v, want compatible", p)
	}
}

// TestCheckUpgradeTTLOnOff: a keep-last dedup's ttl is 0 (forever: its
// state has no TTL) or a duration (TTL on). Another duration restores
// (Flink restores state under a changed TTL); TTL turned on or off does
// not (the state backend refuses it at restore with its
// StateMigrationError, after a cluster unit's claim), so CheckUpgrade
// refuses it before anything is claimed, naming the param.
func TestCheckUpgradeTTLOnOff(t *testing.T) {
	last := strings.Replace(upgradeYAML, "      ttl: 10m\n", "      keep: last\n      ttl: 10m\n", 1)
	// The count reads the filter: it cannot read the dedup's changelog.
	last = strings.Replace(last, "    type: keyed_count\n    input: once\n", "    type: keyed_count\n    input: valid\n", 1)
	if !strings.Contains(last, "input: valid\n    key_by: user\nsinks") {
		t.Fatal("the replacement changed nothing")
	}
	on := layoutOf(t, last)
	for _, tc := range []struct {
		name, yaml string
		want       string
	}{
		{name: "another duration", yaml: strings.Replace(last, "ttl: 10m", "ttl: 20m", 1)},
		{name: "ttl turned off", yaml: strings.Replace(last, "      ttl: 10m\n", "", 1),
			want: `"once" (uid once): operator params.ttl is "off", was "on" (it shapes the operator's state)`},
	} {
		var got []string
		for _, p := range graph.CheckUpgrade(on, layoutOf(t, tc.yaml), false) {
			got = append(got, p.String())
		}
		if strings.Join(got, "\n") != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	off := layoutOf(t, strings.Replace(last, "      ttl: 10m\n", "", 1))
	if p := graph.CheckUpgrade(off, on, false); len(p) != 1 || p[0].String() != `"once" (uid once): operator params.ttl is "on", was "off" (it shapes the operator's state)` {
		t.Errorf("ttl turned on: %v", p)
	}
}
