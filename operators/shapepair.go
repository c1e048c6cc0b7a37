package operators

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kstreamd/kstreamd/broadcast"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// ShapePairMatcherType is the pipeline name of the built-in shape-pair
// matcher.
const ShapePairMatcherType = "shape_pair_matcher"

// Match is one output record of the shape-pair matcher, JSON
// {"rule","key","first","second"}: the rule's name, the key (colour) and the
// two items (their original JSON). Its Kafka key is the colour.
type Match struct {
	Rule   string          `json:"rule"`
	Key    string          `json:"key"`
	First  json.RawMessage `json:"first"`
	Second json.RawMessage `json:"second"`
}

// ShapePairMatcher is the reference job's KeyedBroadcastProcessFunction, with
// the semantics of Flink's broadcast state example: per key (colour) and rule,
// an item whose shape equals the rule's First is stored; an item whose shape
// equals Second, when items are stored, emits one Match per stored item and
// clears them; then, if its shape equals First, it is stored (there is no
// else: with First == Second an item closes the earlier pair and opens a new
// one). Rules are visited in ascending name order.
//
// Keyed state: ValueState "shape-pair-lists", every rule's stored items of
// the key in one entry (ShapePairLists), and with PendingTimeout MapState
// "shape-pair-item-times". State of the earlier layout, MapState
// "shape-pair-items" (rule name -> items), is moved into
// "shape-pair-lists" when Open finds it after a restore. Broadcast state:
// "rules", rule name -> Rule.
type ShapePairMatcher struct {
	// ShapeField is the item's JSON field holding the shape; "" means "shape".
	ShapeField string
	// Metrics, if not nil, reports rules held and rule updates.
	Metrics *Metrics
	// Logger reports rejected rules (rate is bounded by the rules topic).
	Logger *slog.Logger
	// PendingTimeout, when > 0, removes a stored item once the watermark
	// passes its timestamp plus PendingTimeout (an event-time timer per
	// key and expiry time), so items that find no pair do not pile up.
	PendingTimeout time.Duration
	// Expired counts the items removed by PendingTimeout; may be nil.
	Expired interface{ Add(float64) }

	rules   *broadcast.State[string, broadcast.Rule]
	byShape map[string][]namedRule // shape -> the rules naming it, ascending by name; nil: rebuild (a rule changed)
	lists   state.ValueState[*ShapePairLists]
	times   state.MapState[string, []int64] // with PendingTimeout: the stored items' timestamps, ms
	timers  TimerService
	backend state.KeyedStateBackend
	held    prometheus.Gauge
	updated prometheus.Gauge
	bad     prometheus.Counter
	slab    []byte // outBuf's current slab: its bytes up to len are handed out
	// lends says whether the collector lends values (ValueLender), asked
	// at the first match: 0 not yet, lendYes or lendNo. With lendYes
	// every record's matches are built in lent, one buffer reused.
	lends int8
	lent  []byte
}

// ShapePairMatcher.lends.
const (
	lendYes int8 = 1 + iota
	lendNo
)

// namedRule is a rule with its name, as ProcessElement visits them;
// plainName reports plainASCII(name), for appendMatchKept.
type namedRule struct {
	name      string
	plainName bool
	broadcast.Rule
}

// shapePairMatcherFactory registers ShapePairMatcherType.
func shapePairMatcherFactory() Factory {
	return Factory{
		Type:   ShapePairMatcherType,
		Doc:    "Flink's broadcast state example: per key, pairs an item of a rule's first shape with a later one of its second shape.",
		Traits: Traits{Keyed: true, Broadcast: true},
		State:  []string{ShapePairListsState.Name, ShapePairTimesState.Name, state.TimersStateName, "rules (broadcast)"},
		Params: func() any { return &ShapePairParams{} },
		CheckBroadcast: func(key, value []byte) error {
			_, err := broadcast.DecodeRule(key, value)
			return err
		},
		New: func(ctx FactoryContext) (any, error) {
			m := &ShapePairMatcher{Metrics: ctx.Metrics, Logger: ctx.Logger}
			if p, ok := ctx.Params.(*ShapePairParams); ok {
				m.PendingTimeout = p.PendingTimeout
			}
			if m.PendingTimeout > 0 && ctx.Metrics != nil {
				m.Expired = ctx.Metrics.PendingExpired(ctx.Operator)
			}
			return m, nil
		},
	}
}

// ShapePairParams are the params of the shape-pair matcher:
//
//	params:
//	  pending_timeout: 10m   # optional
type ShapePairParams struct {
	// PendingTimeout removes a stored item that found no pair this long
	// after its timestamp, in event time; 0 (the default) keeps it forever.
	PendingTimeout time.Duration `yaml:"pending_timeout" doc:"Remove a stored item that found no pair once the watermark passes its timestamp plus this, e.g. 10m; default 0: kept until paired."`
}

// CheckParams implements ParamsChecker.
func (p *ShapePairParams) CheckParams(report func(field, msg string)) {
	if p.PendingTimeout < 0 || (p.PendingTimeout > 0 && p.PendingTimeout < time.Millisecond) {
		report("pending_timeout", fmt.Sprintf("must be 0 (off) or at least 1ms, got %v", p.PendingTimeout))
	}
}

// ShapePairTimesState describes the timestamps of the stored items, kept
// only with pending_timeout: rule name -> each stored item's timestamp (ms),
// in the order of the rule's items in ShapePairListsState.
var ShapePairTimesState = state.MapStateDescriptor[string, []int64]{
	Name:            "shape-pair-item-times",
	KeySerializer:   state.StringSerializer{},
	ValueSerializer: state.JSONSerializer[[]int64]{},
}

// ShapePairItemsState describes the matcher's keyed state before
// ShapePairListsState (checkpoints written before that layout): rule name
// -> stored items, one map entry per key and rule. Open moves what it finds
// of it into ShapePairListsState; nothing writes it any more.
var ShapePairItemsState = state.MapStateDescriptor[string, []json.RawMessage]{
	Name:            "shape-pair-items",
	KeySerializer:   state.StringSerializer{},
	ValueSerializer: RawListSerializer{}, // the bytes of state.JSONSerializer, faster
}

// Open implements KeyedBroadcastProcessFunction.
func (m *ShapePairMatcher) Open(ctx OpenContext) error {
	if m.ShapeField == "" {
		m.ShapeField = "shape"
	}
	if m.Logger == nil {
		m.Logger = slog.New(slog.DiscardHandler)
	}
	lists, err := state.GetValueState(ctx.Backend, ShapePairListsState)
	if err != nil {
		return err
	}
	m.lists = lists
	m.backend = ctx.Backend
	if err := m.migrateItems(); err != nil {
		return fmt.Errorf("operators: %s %s: move %q into %q: %w", ShapePairMatcherType, ctx.Operator, ShapePairItemsState.Name, ShapePairListsState.Name, err)
	}
	if m.PendingTimeout > 0 {
		if m.timers = ctx.TimerService(); m.timers == nil {
			return fmt.Errorf("operators: %s %s: pending_timeout needs the timer service", ShapePairMatcherType, ctx.Operator)
		}
		if m.times, err = state.GetMapState(ctx.Backend, ShapePairTimesState); err != nil {
			return err
		}
	}
	m.rules = broadcast.NewState[string, broadcast.Rule]("rules")
	if m.Metrics != nil {
		m.held = m.Metrics.RulesHeld(ctx.Operator, ctx.Subtask)
		m.updated = m.Metrics.LastRuleUpdate(ctx.Operator, ctx.Subtask)
		m.bad = m.Metrics.RulesRejected(ctx.Operator)
		m.held.Set(0)
	}
	return nil
}

// Rules returns the subtask's broadcast state, read-only.
func (m *ShapePairMatcher) Rules() broadcast.ReadOnlyState[string, broadcast.Rule] { return m.rules }

// ProcessBroadcastElement implements KeyedBroadcastProcessFunction: it puts
// or deletes a rule. Deleting a rule also removes the items stored for it
// under every key (Flink's applyToKeyedState), so a rule re-added later
// starts clean. A rule that cannot be decoded never reaches the state: it is
// counted in kstreamd_broadcast_rules_rejected_total and logged.
func (m *ShapePairMatcher) ProcessBroadcastElement(_ context.Context, rec runtime.Record, _ Collector) error {
	up, err := broadcast.DecodeRule(rec.Key, rec.Value)
	if err != nil {
		if m.bad != nil {
			m.bad.Inc()
		}
		m.Logger.Warn("rejected rule", "topic", rec.Origin.Topic, "partition", rec.Origin.Partition, "offset", rec.Origin.Offset, "err", err)
		return nil
	}
	if up.Rule == nil {
		if m.rules.Remove(up.Name) {
			m.byShape = nil
			err := state.ApplyToAllValueKeys(m.backend, ShapePairListsState, func(_ []byte, lists state.ValueState[*ShapePairLists]) error {
				l, err := listsValue(lists)
				if err != nil {
					return err
				}
				e := pairEdit{base: l}
				e.set(up.Name, nil)
				return m.storeLists(&e)
			})
			if err == nil && m.times != nil {
				err = state.ApplyToAllKeys(m.backend, ShapePairTimesState, func(_ []byte, times state.MapState[string, []int64]) error {
					return times.Remove(up.Name)
				})
			}
			if err != nil {
				return err
			}
		}
	} else {
		m.rules.Put(up.Name, *up.Rule)
		m.byShape = nil
	}
	if m.held != nil {
		m.held.Set(float64(m.rules.Len()))
		m.updated.Set(float64(time.Now().UnixNano()) / 1e9)
	}
	return nil
}

// ProcessElement implements KeyedBroadcastProcessFunction.
//
// A record costs one state read and at most one write, and only when a rule
// names its shape. A first pass over those rules (ascending, as the lists)
// finds each one's list and what the record does to it, so that the
// matches share one buffer sized in advance; then each rule's list changes
// in place once its matches are out (see ShapePairLists).
func (m *ShapePairMatcher) ProcessElement(_ context.Context, rec runtime.Record, out Collector) error {
	var shape string
	var ok bool
	if validJSON(&rec) {
		shape, ok = checkedTopLevelString(rec.Value, m.ShapeField)
	} else {
		shape, ok = topLevelString(rec.Value, m.ShapeField)
	}
	if !ok {
		return nil // not a JSON object, or no shape: matches no rule
	}
	if m.byShape == nil && m.rules.Len() > 0 {
		m.indexRules()
	}
	rules := m.byShape[shape]
	if len(rules) == 0 {
		return nil // no rule names the shape: no state access
	}
	kept, _, err := m.lists.Value()
	if err != nil {
		return err
	}
	var base ShapePairLists
	if kept != nil {
		base = *kept
	}
	// The key as a string for appendMatch, without a copy: appendMatch
	// only reads it, and rec.Key stays unchanged during the call.
	key := unsafe.String(unsafe.SliceData(rec.Key), len(rec.Key))
	var stack [16]ruleVisit
	visits := stack[:0]
	outBytes, pos := 0, 0
	for i := range rules {
		r := &rules[i]
		v := ruleVisit{rule: r}
		v.at, v.found = base.seek(pos, r.name)
		pos = v.at
		if v.found {
			v.stored = base.lists[v.at].items
		}
		if shape == r.Second && len(v.stored) > 0 {
			v.match = true
			for _, first := range v.stored {
				v.storedBytes += len(first)
			}
			outBytes += len(v.stored)*(matchSize(r.name, key, nil, rec.Value)) + v.storedBytes
		}
		if v.match || shape == r.First {
			visits = append(visits, v)
		}
	}
	if len(visits) == 0 {
		return nil // shapes only as Second, nothing stored: nothing changes
	}
	var buf []byte // every match's bytes; each output owns its slice
	plainValue := false
	if outBytes > 0 {
		buf = m.matchBuf(out, outBytes)
		plainValue = plainASCII(key) && plainItem(rec.Value)
	}
	// Each rule in turn: its matches out, then its list changed (in place
	// in the value the state handed out, ShapePairListsSerializer.View; a
	// rule the key has no list for gets one in the new lists array
	// ShapePairLists.with makes at the end) and its items' times. An
	// output refused part-way (a *runtime.RecordError the task's
	// bad-record policy may skip) leaves the rule it came from unchanged
	// and the rules before it changed, as their matches went out, and the
	// lists are stored before the error returns.
	l := base
	var cs [16]listAdd
	changes := cs[:0]
	var item json.RawMessage
	for i := range visits {
		v := &visits[i]
		name := v.rule.name
		if v.match {
			// Stored items are as json.Marshal writes them
			// (ShapePairLists), so only the name, key and record decide.
			plain := plainValue && v.rule.plainName
			for _, first := range v.stored {
				start := len(buf)
				if buf, err = appendMatchKept(buf, name, key, first, rec.Value, plain); err == nil {
					err = out.Collect(runtime.Record{Key: rec.Key, Value: buf[start:len(buf):len(buf)], Timestamp: rec.Timestamp})
				}
				if err != nil {
					return m.storeFailed(err, kept, l, changes, item != nil)
				}
			}
		}
		// No else: with First == Second the item closes a pair and opens one.
		if shape == v.rule.First {
			if item == nil {
				if item, err = ownItem(rec.Value); err != nil {
					return m.storeFailed(err, kept, l, changes, false)
				}
			}
			v.first = true
		}
		if !v.found {
			changes = append(changes, listAdd{at: v.at, rule: name, items: []json.RawMessage{item}})
		} else {
			if v.match { // listSize of the items before and after, without walking them
				l.size -= 24*len(v.stored) + v.storedBytes
			}
			if v.first {
				l.size += 24 + len(item)
			}
			l.lists[v.at].items = v.next(item)
		}
		if m.times != nil {
			n := 0 // the rule's items after the record
			if !v.match {
				n = len(v.stored)
			}
			if v.first {
				n++
			}
			if err := m.storeTime(name, n, rec.Timestamp); err != nil {
				return m.storeFailed(err, kept, l, changes, item != nil)
			}
		}
	}
	return m.storeChanged(kept, l, changes, item != nil)
}

// matchSlab is the size of the buffers outBuf carves the matches' bytes
// from: a small allocation size class (at most 32 KiB), so a new one is
// quick to allocate, and about 60 records' matches of the bench's 100-byte
// items.
const matchSlab = 32 << 10

// outBuf returns an empty buffer of capacity n for one record's matches,
// carved from m.slab (a new slab when the current one has not n bytes
// left; a buffer of its own when n is more than a quarter of a slab): one
// allocation per slab instead of one per record. The buffer's capacity
// ends at n, so appending beyond it copies instead of writing into the
// next record's matches. The outputs keep the slab alive until the last of
// them is written (and the sink's producer let go of it).
func (m *ShapePairMatcher) outBuf(n int) []byte {
	if n > matchSlab/4 {
		return make([]byte, 0, n)
	}
	if cap(m.slab)-len(m.slab) < n {
		m.slab = make([]byte, 0, matchSlab)
	}
	at := len(m.slab)
	m.slab = m.slab[:at+n]
	return m.slab[at : at : at+n]
}

// matchBuf returns an empty buffer of capacity at least n for one
// record's matches: the lent buffer, emptied, when out lends values (the
// sink copies each match before Collect returns), else outBuf's.
func (m *ShapePairMatcher) matchBuf(out Collector, n int) []byte {
	if m.lends == 0 {
		m.lends = lendNo
		if l, ok := out.(ValueLender); ok && l.LendsValues() {
			m.lends = lendYes
		}
	}
	if m.lends != lendYes {
		return m.outBuf(n)
	}
	if cap(m.lent) < n {
		m.lent = make([]byte, 0, max(n, 2*cap(m.lent)))
	}
	return m.lent[:0]
}

// storeFailed is storeChanged before ProcessElement returns err: err, or
// both errors when the store fails too.
func (m *ShapePairMatcher) storeFailed(err error, kept *ShapePairLists, l ShapePairLists, changes []listAdd, stored bool) error {
	if serr := m.storeChanged(kept, l, changes, stored); serr != nil {
		return errors.Join(err, serr)
	}
	return err
}

// storeChanged writes l, the current key's lists changed in place, with
// the lists of changes added: cleared when no rule has items left
// (stored says an item was stored, so some rule has). kept is the value
// the state handed out for the key (nil: none); l is written into it and
// it is stored again, so that an update allocates nothing (a new value
// would be boxed in the state's interface on every record).
func (m *ShapePairMatcher) storeChanged(kept *ShapePairLists, l ShapePairLists, changes []listAdd, stored bool) error {
	if len(changes) > 0 {
		l = l.with(changes)
	}
	if !stored && l.Len() == 0 {
		return m.lists.Clear()
	}
	if kept == nil {
		kept = new(ShapePairLists)
	}
	*kept = l
	return m.lists.Update(kept)
}

// listsValue returns the current key's lists in vs (the zero value when it
// has none). The lists are the state's: a caller that changes them must
// store them (Update or Clear) before anything else reads them.
func listsValue(vs state.ValueState[*ShapePairLists]) (ShapePairLists, error) {
	p, _, err := vs.Value()
	if err != nil || p == nil {
		return ShapePairLists{}, err
	}
	return *p, nil
}

// validJSON reports whether rec's value is marked valid JSON
// (runtime.ValidJSON: checked by the source, before a key_by too).
func validJSON(rec *runtime.Record) bool {
	if rec.Format != runtime.FormatJSON {
		return false
	}
	return rec.CheckedJSON() // ValidJSON, or a source's checked Doc
}

// ownItem returns the copy of a record's value (valid JSON: topLevelString
// checked it) that ShapePairLists keep, as json.Marshal writes it.
func ownItem(value json.RawMessage) (json.RawMessage, error) {
	if plainItem(value) {
		return append(json.RawMessage(nil), value...), nil
	}
	return canonicalItem(value)
}

// ruleVisit is what ProcessElement's first pass found for one rule naming
// the record's shape: where the rule's list is in the key's lists (at,
// found), its stored items and whether the record pairs with them; first
// is set when the second pass stores the record under the rule.
type ruleVisit struct {
	rule   *namedRule
	at     int
	found  bool
	stored []json.RawMessage
	match  bool // the record pairs with every stored item
	first  bool // the record is stored
	// storedBytes is the stored items' bytes, with match.
	storedBytes int
}

// next returns the rule's items after the record, in stored's array: the
// record's item alone after a match (the matched items cleared, so the
// array does not keep them alive), none after a match only, else item
// appended (in place when the array has room: a list grows by doubling,
// not by one copy per item). Only for a rule with a list (found).
func (v *ruleVisit) next(item json.RawMessage) []json.RawMessage {
	s := v.stored
	switch {
	case v.match && v.first:
		clear(s[1:])
		s[0] = item
		return s[:1]
	case v.match:
		clear(s)
		return s[:0]
	}
	return append(s, item)
}

// indexRules builds byShape: for every shape a rule names, the rules
// naming it (as First or Second), in ascending name order.
func (m *ShapePairMatcher) indexRules() {
	m.byShape = make(map[string][]namedRule)
	for name, rule := range m.rules.Entries() {
		nr := namedRule{name, plainASCII(name), rule}
		m.byShape[rule.First] = append(m.byShape[rule.First], nr)
		if rule.Second != rule.First {
			m.byShape[rule.Second] = append(m.byShape[rule.Second], nr)
		}
	}
}

// storeLists writes the lists e built for the current key, if it changed
// them: cleared when no rule has items left.
func (m *ShapePairMatcher) storeLists(e *pairEdit) error {
	l, changed := e.done()
	switch {
	case !changed:
		return nil
	case l.Len() == 0:
		return m.lists.Clear()
	}
	return m.lists.Update(&l)
}

// migrateItems moves the state of the earlier layout (ShapePairItemsState,
// one map entry per key and rule) into ShapePairListsState, key by key,
// and clears it; nothing happens unless the backend holds that state (a
// restore of an older checkpoint or savepoint). A rule's items already in
// the new layout are kept and the old ones put before them (they are
// older).
func (m *ShapePairMatcher) migrateItems() error {
	if !state.HasState(m.backend, ShapePairItemsState.Name) {
		return nil
	}
	keys := 0
	err := state.ApplyToAllKeys(m.backend, ShapePairItemsState, func(_ []byte, old state.MapState[string, []json.RawMessage]) error {
		l, err := listsValue(m.lists)
		if err != nil {
			return err
		}
		e := pairEdit{base: l}
		for en, err := range old.Entries() {
			if err != nil {
				return err
			}
			items := make([]json.RawMessage, 0, len(en.Value)+len(l.Items(en.Key)))
			for _, it := range en.Value {
				c, err := canonicalItem(it)
				if err != nil {
					return err
				}
				items = append(items, c)
			}
			e.set(en.Key, append(items, l.Items(en.Key)...))
		}
		keys++
		if err := m.storeLists(&e); err != nil {
			return err
		}
		return old.Clear()
	})
	if err == nil && keys > 0 {
		m.Logger.Info("moved shape-pair state into the per-key layout", "from", ShapePairItemsState.Name, "to", ShapePairListsState.Name, "keys", keys)
	}
	return err
}

// storeTime keeps the item timestamps of rule name in step with its n
// stored items: cleared when n is 0, else rec's time appended for the item
// just stored (with an expiry timer).
func (m *ShapePairMatcher) storeTime(name string, n int, ts time.Time) error {
	if n == 0 {
		return m.times.Remove(name)
	}
	times, _, err := m.times.Get(name)
	if err != nil {
		return err
	}
	for len(times) < n-1 { // items stored before pending_timeout was set: expire with this one
		times = append(times, ts.UnixMilli())
	}
	times = append(times[:n-1], ts.UnixMilli())
	if err := m.times.Put(name, times); err != nil {
		return err
	}
	return m.timers.RegisterEventTimeTimer(ts.Add(m.PendingTimeout))
}

// OnTimer implements TimerFunction: the key's stored items whose timestamp
// plus PendingTimeout the watermark passed are removed.
func (m *ShapePairMatcher) OnTimer(_ context.Context, _ time.Time, _ TimerContext, _ Collector) error {
	if m.times == nil {
		return nil
	}
	cutoff := m.timers.CurrentWatermark().Add(-m.PendingTimeout).UnixMilli()
	type upd struct {
		name  string
		times []int64
	}
	var changes []upd
	for e, err := range m.times.Entries() {
		if err != nil {
			return err
		}
		changes = append(changes, upd{e.Key, e.Value})
	}
	if len(changes) == 0 {
		return nil
	}
	l, err := listsValue(m.lists)
	if err != nil {
		return err
	}
	e := pairEdit{base: l}
	for _, c := range changes {
		items := l.Items(c.name)
		var keptItems []json.RawMessage
		var keptTimes []int64
		for i, it := range items {
			if i < len(c.times) && c.times[i] <= cutoff {
				continue
			}
			keptItems = append(keptItems, it)
			if i < len(c.times) {
				keptTimes = append(keptTimes, c.times[i])
			}
		}
		if removed := len(items) - len(keptItems); removed > 0 {
			if m.Expired != nil {
				m.Expired.Add(float64(removed))
			}
			e.set(c.name, keptItems)
		}
		if len(keptItems) == 0 {
			if err := m.times.Remove(c.name); err != nil {
				return err
			}
			continue
		}
		if err := m.times.Put(c.name, keptTimes); err != nil {
			return err
		}
	}
	return m.storeLists(&e)
}

// SnapshotBroadcastState implements BroadcastStateful: the rules as a JSON
// object name -> rule.
func (m *ShapePairMatcher) SnapshotBroadcastState() (map[string]json.RawMessage, error) {
	rules := map[string]broadcast.Rule{}
	for name, r := range m.rules.Entries() {
		rules[name] = r
	}
	b, err := json.Marshal(rules)
	if err != nil {
		return nil, err
	}
	return map[string]json.RawMessage{m.rules.Name(): b}, nil
}

// RestoreBroadcastState implements BroadcastStateful.
func (m *ShapePairMatcher) RestoreBroadcastState(states map[string]json.RawMessage) error {
	raw, ok := states[m.rules.Name()]
	if !ok {
		return nil
	}
	var rules map[string]broadcast.Rule
	if err := json.Unmarshal(raw, &rules); err != nil {
		return fmt.Errorf("operators: restore broadcast state %q: %w", m.rules.Name(), err)
	}
	for name, r := range rules {
		m.rules.Put(name, r)
	}
	m.byShape = nil
	if m.held != nil {
		m.held.Set(float64(m.rules.Len()))
	}
	return nil
}
