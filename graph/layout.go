package graph

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// StateLayout is what the state of a cluster-mode job depends on
// (docs/scale-out.md, "Upgrades"): the stages and their units, the key
// groups, the repartition topics with the keys that partition them, and
// every vertex that keeps state with its uid, its stage and what shapes its
// state (its type, key_by and the params that shape state). It leaves out
// what a restore does not care about: stateless operators and the params of
// a stateful operator tagged `state:"-"` (see StateParams). Two graphs with
// compatible layouts (CheckUpgrade) restore each other's unit HEADs, as a
// Flink savepoint restores into a job whose operators match by uid and
// whose state serializers are compatible. JSON, stored by the cluster in
// the store's graph records.
type StateLayout struct {
	Job            string              `json:"job"`
	MaxParallelism int                 `json:"max_parallelism"`
	Units          int                 `json:"units"`
	Stages         int                 `json:"stages"`
	Repartitions   []LayoutRepartition `json:"repartitions"`
	// Vertices are the stateful vertices, sorted by stage and uid.
	Vertices []LayoutVertex `json:"vertices"`
}

// LayoutRepartition is one repartition topic of a StateLayout: written by
// stage From, read by stage To, partitioned by key group of KeyBy.
type LayoutRepartition struct {
	Topic string `json:"topic"`
	From  int    `json:"from"`
	To    int    `json:"to"`
	KeyBy string `json:"key_by"`
}

// LayoutVertex is one stateful vertex of a StateLayout in one stage (a
// broadcast source copied into two stages appears twice).
type LayoutVertex struct {
	// UID is the vertex's uid (Graph.UID): what its state is matched by.
	UID string `json:"uid"`
	// Name is the vertex's name when the layout was made (for messages).
	Name string `json:"name"`
	// Kind is "source", "operator" or "sink".
	Kind  string `json:"kind"`
	Stage int    `json:"stage"`
	// Type is the registered type ("" a kafka source or sink).
	Type string `json:"type,omitempty"`
	// KeyBy is an operator's key_by text (its roles' joined by ", " for a
	// two-input operator); Async its async_state.
	KeyBy string `json:"key_by,omitempty"`
	Async bool   `json:"async,omitempty"`
	// Topics is what a source reads (Source.TopicDesc), with " broadcast"
	// and " table" when set; Delivery a sink's delivery guarantee.
	Topics   string `json:"topics,omitempty"`
	Delivery string `json:"delivery,omitempty"`
	// Params are the params that shape the vertex's state (StateParams),
	// by their yaml name, as JSON.
	Params map[string]json.RawMessage `json:"params,omitempty"`
}

// LayoutOf returns the state layout of st (pure).
func LayoutOf(st *Stages) StateLayout {
	l := StateLayout{Job: st.Job, MaxParallelism: st.MaxParallelism, Units: st.Units, Stages: len(st.Stages),
		Repartitions: []LayoutRepartition{}, Vertices: []LayoutVertex{}}
	for _, r := range st.Repartitions {
		l.Repartitions = append(l.Repartitions, LayoutRepartition{Topic: r.Topic, From: r.From, To: r.To, KeyBy: r.Edge.KeyBy})
	}
	for _, s := range st.Stages {
		g := s.Graph
		for _, src := range g.Sources {
			if src.Repartition {
				continue // the topic is in Repartitions
			}
			topics := src.TopicDesc()
			if src.Broadcast {
				topics += " broadcast"
			}
			if src.Table {
				topics += " table"
			}
			l.Vertices = append(l.Vertices, LayoutVertex{UID: g.UID(src.Name), Name: src.Name, Kind: "source", Stage: s.Index, Type: src.Type,
				Topics: topics, Params: StateParams(src.Params)})
		}
		for _, o := range g.Operators {
			if !Stateful(o) {
				continue
			}
			keyBy := o.KeyBy
			if len(o.Sides) > 0 {
				keys := make([]string, len(o.Sides))
				for i, sd := range o.Sides {
					keys[i] = sd.Role + ": " + sd.KeyBy
				}
				keyBy = strings.Join(keys, ", ")
			}
			l.Vertices = append(l.Vertices, LayoutVertex{UID: g.UID(o.Name), Name: o.Name, Kind: "operator", Stage: s.Index, Type: o.Type,
				KeyBy: keyBy, Async: o.AsyncState, Params: StateParams(o.Params)})
		}
		for _, sk := range g.Sinks {
			if sk.Units > 0 {
				continue // a repartition sink: the topic is in Repartitions
			}
			l.Vertices = append(l.Vertices, LayoutVertex{UID: g.UID(sk.Name), Name: sk.Name, Kind: "sink", Stage: s.Index, Type: sk.Type,
				Delivery: string(cmp.Or(sk.Delivery, DefaultDelivery))})
		}
	}
	slices.SortFunc(l.Vertices, func(a, b LayoutVertex) int { return cmp.Or(cmp.Compare(a.Stage, b.Stage), cmp.Compare(a.UID, b.UID)) })
	return l
}

// Stateful reports whether operator o may keep state: a keyed type, a
// broadcast one, a type that declares state (operators.Factory.State), or
// one the graph knows no factory of (a hand-built graph: assumed
// stateful). Only a stateless operator's params and presence can change
// freely across an upgrade.
func Stateful(o *Operator) bool {
	f := o.Factory
	return f == nil || f.Traits.Keyed || f.Traits.Broadcast || len(f.State) > 0 || len(o.Sides) > 0 || o.Broadcast != ""
}

// StateParams returns the params of a vertex that shape its state, by
// their yaml name (the field name without one), as JSON: every exported
// field of the params struct (fields of embedded structs included) except
// those tagged `state:"-"` (a param that does not change what the state
// holds or how it is serialized); a field tagged `state:"on"` counts only
// as set or not, "on" or "off" (a TTL's duration: Flink restores state
// under a changed TTL duration, not under TTL turned on or off, which the
// state backend refuses with its StateMigrationError).
// Params that are not a struct count as one param named "". Nil for no
// params.
func StateParams(params any) map[string]json.RawMessage {
	if params == nil {
		return nil
	}
	v := reflect.ValueOf(params)
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	out := map[string]json.RawMessage{}
	if v.Kind() != reflect.Struct {
		b, _ := json.Marshal(v.Interface())
		out[""] = b
		return out
	}
	stateFields(v, out)
	if len(out) == 0 {
		return nil
	}
	return out
}

// stateFields adds the state-shaping fields of struct v to out.
func stateFields(v reflect.Value, out map[string]json.RawMessage) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("state")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		fv := v.Field(i)
		if f.Anonymous && fv.Kind() == reflect.Struct {
			stateFields(fv, out)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if tag == "on" {
			// Only whether it is set shapes the state (a TTL's duration
			// does not; TTL turned on or off does).
			out[cmp.Or(name, f.Name)] = json.RawMessage(map[bool]string{true: `"on"`, false: `"off"`}[!fv.IsZero()])
			continue
		}
		b, err := json.Marshal(fv.Interface())
		if err != nil {
			b, _ = json.Marshal(fmt.Sprint(fv.Interface()))
		}
		out[cmp.Or(name, f.Name)] = b
	}
}

// UpgradeProblem is one way a new state layout cannot restore the state of
// an old one: the vertex (uid and name; empty for the job as a whole) and
// what about it changed.
type UpgradeProblem struct {
	UID, Name string
	What      string
}

// String renders the problem as "operator \"count\" (uid count): what".
func (p UpgradeProblem) String() string {
	if p.UID == "" {
		return p.What
	}
	return fmt.Sprintf("%q (uid %s): %s", p.Name, p.UID, p.What)
}

// CheckUpgrade compares the layout next of a new graph with old, whose
// state (HEADs, checkpoints, repartition topics) it would restore, and
// returns every incompatibility, nil when there is none (the order: the
// job's shape, then vertices by stage and uid). Compatible changes: a
// stateless operator added, removed or with other params; a new stateful
// vertex (it starts without state, as in Flink); a renamed vertex that
// kept its uid; another param tagged `state:"-"`; a param only one side
// has (a field a binary version added or removed: its default is the
// earlier behaviour). Incompatible: another job name, max parallelism,
// unit count, number of stages, repartition topic or its key; a stateful
// vertex moved to another stage, with another type, key_by, async_state,
// source topics or sink delivery, or a state-shaping param with another
// value; a stateful vertex removed unless allowRemoved (Flink's
// --allowNonRestoredState, checkpoints.allow_non_restored_state).
func CheckUpgrade(old, next StateLayout, allowRemoved bool) []UpgradeProblem {
	var out []UpgradeProblem
	job := func(format string, a ...any) { out = append(out, UpgradeProblem{What: fmt.Sprintf(format, a...)}) }
	if old.Job != next.Job {
		job("the job is %q, was %q", next.Job, old.Job)
	}
	if old.MaxParallelism != next.MaxParallelism {
		job("max parallelism %d, was %d (key groups are part of the state)", next.MaxParallelism, old.MaxParallelism)
	}
	if old.Units != next.Units {
		job("cluster.units %d, was %d", next.Units, old.Units)
	}
	if old.Stages != next.Stages {
		job("%d stages, was %d (a key_by added or removed moves every later operator to another unit namespace)", next.Stages, old.Stages)
	}
	oldR := map[string]LayoutRepartition{}
	for _, r := range old.Repartitions {
		oldR[r.Topic] = r
	}
	newR := map[string]bool{}
	for _, r := range next.Repartitions {
		newR[r.Topic] = true
		o, ok := oldR[r.Topic]
		switch {
		case !ok:
			job("repartition topic %s (stage %d to %d) is new", r.Topic, r.From, r.To)
		case o.From != r.From || o.To != r.To:
			job("repartition topic %s connects stage %d to %d, was %d to %d", r.Topic, r.From, r.To, o.From, o.To)
		case o.KeyBy != r.KeyBy:
			job("repartition topic %s is keyed by %s, was %s (its partitions hold other key groups)", r.Topic, r.KeyBy, o.KeyBy)
		}
	}
	for _, r := range old.Repartitions {
		if !newR[r.Topic] {
			job("repartition topic %s (stage %d to %d) is gone", r.Topic, r.From, r.To)
		}
	}
	type key struct {
		uid   string
		stage int
	}
	newV := map[key]LayoutVertex{}
	stagesOf := map[string][]int{}
	for _, v := range next.Vertices {
		newV[key{v.UID, v.Stage}] = v
		stagesOf[v.UID] = append(stagesOf[v.UID], v.Stage)
	}
	for _, o := range old.Vertices {
		v, ok := newV[key{o.UID, o.Stage}]
		p := func(format string, a ...any) {
			out = append(out, UpgradeProblem{UID: o.UID, Name: cmp.Or(v.Name, o.Name), What: o.Kind + " " + fmt.Sprintf(format, a...)})
		}
		if !ok {
			if st := stagesOf[o.UID]; len(st) > 0 {
				p("moved from stage %d to stage %v (its state is in stage %d's unit namespaces)", o.Stage, st, o.Stage)
			} else if !allowRemoved {
				p("of stage %d is gone: the HEADs hold its state (set its uid on the vertex that replaces it, or checkpoints.allow_non_restored_state: true to drop it)", o.Stage)
			}
			continue
		}
		if o.Kind != v.Kind {
			p("is a %s now", v.Kind)
			continue
		}
		if o.Type != v.Type {
			p("type %s, was %s", typeName(v.Type), typeName(o.Type))
			continue
		}
		if o.KeyBy != v.KeyBy {
			p("key_by %q, was %q (its state is keyed by the old key)", v.KeyBy, o.KeyBy)
		}
		if o.Async != v.Async {
			p("async_state %v, was %v", v.Async, o.Async)
		}
		if o.Topics != v.Topics {
			p("reads %s, was %s (its offsets are of the old topics)", v.Topics, o.Topics)
		}
		if o.Delivery != v.Delivery {
			p("delivery %s, was %s (its pending transactions)", v.Delivery, o.Delivery)
		}
		for _, name := range slices.Sorted(maps.Keys(o.Params)) {
			nv, ok := v.Params[name]
			if !ok || bytes.Equal(compactJSON(nv), compactJSON(o.Params[name])) {
				continue
			}
			p("params.%s is %s, was %s (it shapes the operator's state)", name, nv, o.Params[name])
		}
	}
	return out
}

// typeName names a vertex type for messages ("" is kafka).
func typeName(t string) string { return cmp.Or(t, "kafka") }

// compactJSON returns b without insignificant white space.
func compactJSON(b json.RawMessage) []byte {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return b
	}
	return buf.Bytes()
}
