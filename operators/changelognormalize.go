package operators

import (
	"bytes"
	"context"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// ChangelogNormalizeType is the pipeline name of the changelog normalizer.
const ChangelogNormalizeType = "changelog_normalize"

// ChangelogNormalizeState is the normalizer's keyed state: the key's
// current row (part of the checkpoint format).
const ChangelogNormalizeState = "changelog_normalize.row"

func changelogNormalizeFactory() Factory {
	return Factory{
		Type: ChangelogNormalizeType,
		Doc: "Materializes an upsert stream (a table source: +U per upsert, -D per tombstone) per key and emits the full changelog (Flink's ChangelogNormalize): " +
			"+I for a new key, -U old and +U new for a change, -D with the old row for a delete; repeats and deletes of absent keys emit nothing.",
		Traits: Traits{Keyed: true, Changelog: ChangelogTraits{Accepts: true, Upsert: true, Produces: true}},
		State:  []string{ChangelogNormalizeState},
		New: func(FactoryContext) (any, error) {
			return &ChangelogNormalize{}, nil
		},
	}
}

// ChangelogNormalize turns an upsert changelog, whose updates do not carry
// the value they replace (a table source: Kafka's compacted-topic
// convention, Flink's upsert-kafka), into a full changelog (Flink's
// ChangelogNormalize operator, which Flink's planner puts after an upsert
// source): it keeps each key's current row in keyed state (either
// backend, checkpointed, restored and rescaled by key group) and for a
// record of key k with value v emits
//
//   - +I v when k has no row (for a +I or +U record);
//   - nothing when v equals k's row byte for byte (a repeated upsert);
//   - -U old then +U v otherwise;
//   - for a -D: -D with the old row as its value when k has one, nothing
//     when it has none; -U records are ignored (their +U follows).
//
// Output records keep the input's key, timestamp and headers. An operator
// that retracts (aggregate over a changelog) then sees each value it must
// subtract. State: one row per live key; a tombstone removes it.
type ChangelogNormalize struct {
	row state.ValueState[tableValue]
}

// Open implements KeyedProcessFunction.
func (n *ChangelogNormalize) Open(ctx OpenContext) error {
	var err error
	n.row, err = state.GetValueState(ctx.Backend, state.ValueStateDescriptor[tableValue]{Name: ChangelogNormalizeState, Serializer: tableValueSerializer{}})
	return err
}

// ProcessElement implements KeyedProcessFunction.
func (n *ChangelogNormalize) ProcessElement(_ context.Context, rec runtime.Record, out Collector) error {
	if rec.Change == runtime.ChangeUpdateBefore {
		return nil
	}
	old, had, err := n.row.Value()
	if err != nil {
		return err
	}
	emit := func(kind runtime.ChangeKind, v tableValue) error {
		o := rec
		o.Change, o.Value, o.Format = kind, v.Value, runtime.FormatJSON
		if v.Text {
			o.Format = runtime.FormatText
		}
		return out.Collect(o)
	}
	if rec.Change == runtime.ChangeDelete {
		if !had {
			return nil
		}
		if err := n.row.Clear(); err != nil {
			return err
		}
		return emit(runtime.ChangeDelete, old)
	}
	v := tableValue{Value: bytes.Clone(rec.Value), Text: rec.Format == runtime.FormatText}
	if had && old.Text == v.Text && bytes.Equal(old.Value, v.Value) {
		return nil
	}
	if err := n.row.Update(v); err != nil {
		return err
	}
	if !had {
		return emit(runtime.ChangeInsert, v)
	}
	if err := emit(runtime.ChangeUpdateBefore, old); err != nil {
		return err
	}
	return emit(runtime.ChangeUpdateAfter, v)
}
