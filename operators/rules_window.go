package operators

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	"github.com/kstreamd/kstreamd/state"
)

// This file is the rules operator's window state: per key (rule id and
// group values) the slices of the key's records, one per millisecond, in a
// list ordered by time, and a running aggregate over the slices in the
// sliding window [tail - window, tail] ending at the key's newest slice
// (Flink's sliced/paned window aggregation): a routed copy in time order
// adds its input and subtracts the slices that fell out of the window, each
// slice once, so its cost does not grow with what the window holds. Sums and
// counts subtract; count_distinct keeps a count per distinct value
// (RulesDistinctState); min and max keep a monotonic deque of slices (the
// slices whose extreme beats every later one's), linked through the slices
// themselves. A copy out of time order (older than the key's newest slice)
// costs the slices between it and the newest one (and, below the window,
// those its own window reaches), or for min/max, when the window's extreme
// lies after it, the slices of its own window.

// RulesSliceState is the rules operator's keyed window state: per key,
// record time in ms since the epoch to the slice of that millisecond (a
// ruleSlice, binary), but for the key's newest slice, which its summary
// (RulesAggState) holds since format version 2, so a copy in time order
// reads one entry (the summary) and writes two (the summary and the slice
// it displaced as the newest), never reading a slice; a restore of version
// 1 (the newest slice in this map) moves it key by key when the key is
// next touched (ruleWin.load); slices an operation moves out of a summary
// two or more at once go to RulesPageState instead, as one page. Part of
// the checkpoint format; it replaced
// RulesWindowState (JSON buckets, scanned per record), whose state a
// restore migrates (RulesEvaluator.Open).
var RulesSliceState = state.MapStateDescriptor[int64, ruleSlice]{
	Name:            "rules-slices",
	KeySerializer:   state.Int64Serializer{},
	ValueSerializer: ruleSliceSerializer{},
}

// RulesAggState is the rules operator's per-key summary: the slice list's
// ends, the rule shape, the running aggregate and (format version 2) the
// newest slice (a ruleWindow, binary). Part of the checkpoint format.
var RulesAggState = state.ValueStateDescriptor[ruleWindow]{
	Name:       "rules-agg",
	Serializer: ruleWindowSerializer{},
}

// RulesPageState is the rules operator's keyed page state: per key, the
// time (ms) of a page's oldest slice at its writing to a page of the
// key's slices (a rulePage, binary). When one operation moves two or more
// slices out of a key's summary at once (the key's ninth slice moves the
// eight its summary held), they are written as one page, one state entry
// instead of one per slice (Flink's RocksDB state keeps a list in one
// entry the same way); the summary lists its pages (ruleWindow.Pages) and
// a slice read looks there before RulesSliceState. A page loses its
// slices as they expire or move back into the summary and is removed
// with its last. Part of the checkpoint format (session 46).
var RulesPageState = state.MapStateDescriptor[int64, rulePage]{
	Name:            "rules-pages",
	KeySerializer:   state.Int64Serializer{},
	ValueSerializer: rulePageSerializer{},
}

// RulesDistinctState is the rules operator's per-key counted map of a
// count_distinct rule: an aggregate input (its JSON) to the number of the
// window's slices carrying it (a slice holds each distinct input once,
// ruleSlice.fold; one written before holds it once per record, and
// counts so), for a key whose summary does not hold
// them inline (ruleWindow.DInline, format version 3: a summary written
// before, or one whose distinct inputs outgrew maxInlineDistinct). Part
// of the checkpoint format.
var RulesDistinctState = state.MapStateDescriptor[string, int64]{
	Name:            "rules-distinct",
	KeySerializer:   state.StringSerializer{},
	ValueSerializer: state.Int64Serializer{},
}

// ruleSlice is what one key keeps for the records of one millisecond (of
// one pane, for a rule with a slice): the longest window a copy written
// into it had (ms), the number of records N and, for every fn but count,
// their aggregate inputs (JSON), pre-aggregated as they arrive (fold: for
// sum and avg one sum of the integer inputs beside every double input, for
// min and max the extreme, for count_distinct each distinct input once);
// its neighbours in the key's time-ordered slice list and, for min and
// max, in the deque. A slice's contribution to an aggregate is N records
// and the values of In: a slice written before the pre-aggregation (one
// input per record, format version 1) is one whose inputs were not folded.
type ruleSlice struct {
	WindowMs int64
	N        int64
	In       [][]byte

	Prev, Next       int64
	HasPrev, HasNext bool

	DPrev, DNext       int64
	HasDPrev, HasDNext bool
	InDeque            bool
}

// ruleWindow is one key's summary: the rule shape and fn its slices were
// written under, the slice list's ends and size, and the running aggregate
// over the slices in [Tail - WindowMs, Tail]: First is the oldest of them;
// N the records in it, Ints the exact sum of its integer inputs, Floats
// the number of its double inputs and FSum their exact sum, Distinct the
// distinct inputs (count_distinct); DFront and DBack the min/max deque's
// ends, DLen its length.
type ruleWindow struct {
	Shape    string
	Fn       AggregateFn
	WindowMs int64

	Slices     int64
	Head, Tail int64
	First      int64

	N        int64
	Ints     number
	Floats   int64
	FSum     *big.Float
	Distinct int64

	DFront, DBack int64
	DLen          int64

	// TailSlice is the newest slice (key Tail) while Slices > 0: kept in
	// the summary, not in RulesSliceState. Nil in a summary of format
	// version 1, whose newest slice is in RulesSliceState.
	TailSlice *ruleSlice
	// Older are more of the key's slices kept in the summary (format
	// version 4), oldest first, all older than Tail and none of them in
	// RulesSliceState: while a key holds at most maxInlineSlices slices
	// (and they fit in maxInlineSliceBytes), a routed copy writes no slice
	// entry at all, and a slice that expires while still in the summary
	// leaves no entry to remove; a key with more slices keeps only the
	// newest (TailSlice), as in version 2.
	Older []inlineSlice

	// DInline says the key's distinct counts (count_distinct) are DVals,
	// in the summary (format version 3), and RulesDistinctState holds none
	// of the key's: a copy then reads and writes one entry instead of
	// three (Flink's small-state-in-the-accumulator), and the distinct
	// entries no longer crowd the summaries out of the write cache. A new
	// count_distinct summary starts inline; when its distinct inputs
	// outgrow maxInlineDistinct values or maxInlineDistinctBytes bytes they
	// move into RulesDistinctState, where they stay while the key has
	// slices. A summary of format version 1 or 2 has its counts in the map.
	DInline bool
	// DVals are the inline distinct inputs (JSON) with counts > 0, sorted
	// by input.
	DVals []distinctVal
	// Pages are the key's pages in RulesPageState (format version 5),
	// each with the range of its slices' times: a slice in that range may
	// be in the page (else it is in RulesSliceState). Ranges may overlap.
	Pages []pageRef
}

// pageRef is one page of ruleWindow.Pages: its key in RulesPageState
// (the time of its oldest slice when written, ms) and the time of its
// newest slice (Hi); every slice the page holds is in [K, Hi].
type pageRef struct {
	K, Hi int64
}

// rulePage is a page of one key's slices (RulesPageState), oldest first,
// each decoded (S) or as the bytes it was read or moved as (Raw: a
// summary's slice layout, decodeSliceAt at its K), so moving the
// summary's older slices into a page decodes none of them.
type rulePage struct {
	Slices []inlineSlice
}

// minPageSlices is the fewest slices one operation moves out of a
// summary that it writes as a page (fewer go to RulesSliceState one
// entry each, as before pages: a key past maxInlineSlices moves its
// displaced newest slice there per copy).
const minPageSlices = 2

// rulePageVersion is rulePage's format version byte.
const rulePageVersion = 1

// rulePageSerializer is rulePage's binary serializer (name
// "rules-page-v1"): the version byte rulePageVersion, the number of
// slices (uvarint), then per slice, oldest first, its time (the first as
// a varint, the others as their distance above the one before, uvarint)
// and its bytes (length-prefixed) in the layout the summary keeps its
// slices in (appendSliceAt; or the version 1 or 2 bytes a summary held).
type rulePageSerializer struct{}

func (rulePageSerializer) Name() string { return "rules-page-v1" }

func (rulePageSerializer) Append(dst []byte, p rulePage) ([]byte, error) {
	n := 2 + uvarintLen(uint64(len(p.Slices)))
	for _, o := range p.Slices {
		n += 10 + bytesLen(o.size())
	}
	dst = slices.Grow(dst, n)
	dst = append(dst, rulePageVersion)
	dst = binary.AppendUvarint(dst, uint64(len(p.Slices)))
	for i, o := range p.Slices {
		switch {
		case o.S == nil && len(o.Raw) == 0:
			return dst, fmt.Errorf("operators: rules page: slice %d without its bytes", o.K)
		case i == 0:
			dst = binary.AppendVarint(dst, o.K)
		case o.K <= p.Slices[i-1].K:
			return dst, fmt.Errorf("operators: rules page: slice %d not above %d", o.K, p.Slices[i-1].K)
		default:
			dst = binary.AppendUvarint(dst, uint64(o.K-p.Slices[i-1].K))
		}
		if o.S != nil {
			dst = appendSliceBytes(dst, o.S, o.K)
		} else {
			dst = appendBytes(dst, o.Raw)
		}
	}
	return dst, nil
}

func (rulePageSerializer) Decode(b []byte) (rulePage, error) {
	r := binReader{b: slices.Clone(b)} // the slices keep their bytes: b may be the state's buffer
	if v := r.byte(); v != rulePageVersion {
		return rulePage{}, fmt.Errorf("operators: rules page: format version %d, want %d", v, rulePageVersion)
	}
	n := r.uvarint()
	if n == 0 || n > uint64(len(b)) {
		return rulePage{}, errors.New("operators: rules page: bad slice count")
	}
	p := rulePage{Slices: make([]inlineSlice, n)}
	for i := range p.Slices {
		var k int64
		if i == 0 {
			k = r.varint()
		} else {
			d := r.uvarint()
			if d == 0 {
				return rulePage{}, errors.New("operators: rules page: slices out of order")
			}
			k = p.Slices[i-1].K + int64(d)
		}
		sb := r.bytes()
		if r.err != nil {
			break
		}
		if len(sb) == 0 {
			return rulePage{}, errors.New("operators: rules page: empty slice")
		}
		p.Slices[i] = inlineSlice{K: k, Raw: sb}
	}
	if r.err != nil {
		return rulePage{}, fmt.Errorf("operators: rules page: %w", r.err)
	}
	return p, nil
}

// inlineSlice is one slice of ruleWindow.Older and its key (ms): decoded
// (S), or as its bytes (Raw, S nil), which Decode gives and Append writes
// back as they are, so a routed copy in time order decodes and encodes
// none of the older slices it does not touch.
type inlineSlice struct {
	K   int64
	S   *ruleSlice
	Raw []byte
}

// slice returns o's slice, decoding Raw when S is nil.
func (o inlineSlice) slice() (*ruleSlice, error) {
	if o.S != nil {
		return o.S, nil
	}
	s, err := decodeSliceAt(o.Raw, o.K)
	if err != nil {
		return nil, fmt.Errorf("operators: rules window: older slice %d: %w", o.K, err)
	}
	return &s, nil
}

// size is the bytes ruleSliceSerializer writes for o's slice.
func (o inlineSlice) size() int {
	if o.S != nil {
		return ruleSliceSizeAt(o.S, o.K)
	}
	return len(o.Raw)
}

// The bounds of the slices a summary holds (ruleWindow.TailSlice and
// Older): a key with more slices than maxInlineSlices keeps only its
// newest in the summary; the newest ones whose encoded sizes sum to more
// than maxInlineSliceBytes stay in RulesSliceState. The summary is
// rewritten whole per routed copy, so these bound what a copy rewrites.
const (
	maxInlineSlices     = 8
	maxInlineSliceBytes = 384
)

// distinctVal is one distinct aggregate input (its JSON) of an inline
// count_distinct summary and the number of the window's slices carrying
// it (as RulesDistinctState counts).
type distinctVal struct {
	V string
	N int64
}

// The bounds of ruleWindow.DVals: beyond either, the counts move into
// RulesDistinctState (the summary is rewritten whole per routed copy, so
// it stays small).
const (
	maxInlineDistinct      = 8
	maxInlineDistinctBytes = 256
)

// distinctInMap reports whether RulesDistinctState may hold entries of
// the summary's key: only a count_distinct summary that is not inline
// writes them, and every summary starts with none (the key's last slice
// leaving, a shape change and a rebuild clear them). Clearing a map on
// Pebble empties the whole write cache (state's clearEntries), so the
// rules operator clears it only when it may hold entries: not for every
// key whose last slice leaves.
func (w *ruleWindow) distinctInMap() bool { return w.Fn == AggCountDistinct && !w.DInline }

// inlineCount returns the inline count of distinct input v (0: none).
func (w *ruleWindow) inlineCount(v []byte) int64 {
	i, ok := slices.BinarySearchFunc(w.DVals, v, func(d distinctVal, v []byte) int { return strings.Compare(d.V, string(v)) })
	if !ok {
		return 0
	}
	return w.DVals[i].N
}

// fsumPrec is the precision of ruleWindow.FSum: enough bits to hold the
// exact sum of 2^100 doubles of any exponents (2,098 bits span the
// doubles' exponents), so adding and subtracting never round.
const fsumPrec = 2200

// The binary format of ruleSlice and ruleWindow starts with a version
// byte: ruleStateV1 for both in the first sliced layout; a ruleWindow
// holding the newest slice is written as ruleStateV2 (version 1's fields,
// then a flag byte 1 and the slice's bytes length-prefixed), one without
// as version 1 (the same bytes as before); one with inline distinct
// counts (DInline) as ruleStateV3: version 2's fields with the flag byte
// always there (0: no newest slice), then the number of DVals (uvarint)
// and each one's input (length-prefixed) and count (varint). A ruleWindow
// holding older slices besides the newest (Older) is written as
// ruleStateV4: version 2's fields with the flag byte always there, a byte
// DInline (1) or not (0), the DVals as in version 3 when DInline, then
// the number of older slices (uvarint) and, oldest first, each one's
// distance below Tail (uvarint) and its bytes (length-prefixed). Every
// summary without Older is written as before (version 1, 2 or 3). A
// ruleWindow with pages (Pages) is written as ruleStateV5: version 4's
// layout (the older slices' number may be 0), then the number of pages
// (uvarint) and each one's key as its distance below Tail (varint) and
// its range (Hi - K, uvarint); every summary without pages is written as
// before. All five are read; a version 3, 4 or 5 summary does not restore
// into a binary older than it (the older binary's restore fails on the
// version byte).
//
// A slice whose inputs are pre-aggregated (ruleSlice.fold: fewer inputs
// than records, for a fn that keeps inputs) is written as ruleSliceFolded,
// version 1's layout under another version byte: a binary before the
// pre-aggregation would count one record per input, so it refuses the
// slice (and a summary holding one) instead of reading it wrong. Every
// other slice is written as version 1, byte for byte as before; both are
// read. The slices a summary holds (its newest and Older) are written as
// ruleSliceRel (appendSliceAt: links as distances from the slice's own
// time, only those set), which only a summary holds; a summary read keeps
// the older slices of version 1 or 2 it holds as they are. A binary before
// ruleSliceRel refuses a summary holding one (its restore fails on the
// slice's version byte).
const (
	ruleStateV1 = 1
	ruleStateV2 = 2
	ruleStateV3 = 3
	ruleStateV4 = 4
	ruleStateV5 = 5

	ruleSliceFolded = 2
	ruleSliceRel    = 3
)

// ruleSliceSerializer is ruleSlice's binary serializer (name
// "rules-slice-v1").
type ruleSliceSerializer struct{}

func (ruleSliceSerializer) Name() string { return "rules-slice-v1" }

func (ruleSliceSerializer) Append(dst []byte, s ruleSlice) ([]byte, error) {
	dst = slices.Grow(dst, ruleSliceSizeHint(&s))
	if len(s.In) > 0 && int64(len(s.In)) != s.N {
		dst = append(dst, ruleSliceFolded) // inputs folded (ruleSlice.fold)
	} else {
		dst = append(dst, ruleStateV1)
	}
	var flags byte
	for i, f := range []bool{s.HasPrev, s.HasNext, s.HasDPrev, s.HasDNext, s.InDeque} {
		if f {
			flags |= 1 << i
		}
	}
	dst = append(dst, flags)
	dst = binary.AppendVarint(dst, s.WindowMs)
	dst = binary.AppendVarint(dst, s.N)
	dst = binary.AppendVarint(dst, s.Prev)
	dst = binary.AppendVarint(dst, s.Next)
	dst = binary.AppendVarint(dst, s.DPrev)
	dst = binary.AppendVarint(dst, s.DNext)
	dst = binary.AppendUvarint(dst, uint64(len(s.In)))
	for _, in := range s.In {
		dst = binary.AppendUvarint(dst, uint64(len(in)))
		dst = append(dst, in...)
	}
	return dst, nil
}

func (ruleSliceSerializer) Decode(b []byte) (ruleSlice, error) {
	if len(b) > 0 && b[0] == ruleSliceRel {
		return ruleSlice{}, errors.New("operators: rules slice: a summary's slice (format version 3) outside a summary")
	}
	return decodeSliceAt(b, 0)
}

// appendSliceAt appends slice s of key k (ms) in the layout a summary
// keeps its slices in (ruleWindow.TailSlice and Older), format version
// ruleSliceRel: version 1's layout, but each link (Prev, Next, DPrev,
// DNext) whose flag is set as its distance from k (varint), not as a
// time (sliceLink.rel): 1-3 bytes instead of 7 for a link to a slice
// seconds away,
// so more of a key's slices fit the summary's budget and a summary
// rewritten per copy is smaller.
func appendSliceAt(dst []byte, s *ruleSlice, k int64) []byte {
	dst = slices.Grow(dst, ruleSliceSizeAt(s, k))
	dst = append(dst, ruleSliceRel, sliceFlags(s))
	dst = binary.AppendVarint(dst, s.WindowMs)
	dst = binary.AppendVarint(dst, s.N)
	for _, l := range sliceLinks(s) {
		dst = binary.AppendVarint(dst, l.rel(k))
	}
	dst = binary.AppendUvarint(dst, uint64(len(s.In)))
	for _, in := range s.In {
		dst = binary.AppendUvarint(dst, uint64(len(in)))
		dst = append(dst, in...)
	}
	return dst
}

// ruleSliceSizeAt is the bytes appendSliceAt writes for slice s of key k.
func ruleSliceSizeAt(s *ruleSlice, k int64) int {
	n := 2 + varintLen(s.WindowMs) + varintLen(s.N) + uvarintLen(uint64(len(s.In)))
	for _, l := range sliceLinks(s) {
		n += varintLen(l.rel(k))
	}
	for _, in := range s.In {
		n += bytesLen(len(in))
	}
	return n
}

type sliceLink struct {
	at  int64
	has bool
}

// rel is the link as ruleSliceRel writes it for a slice of key k: its
// distance from k when set, else its value (0 unless left over).
func (l sliceLink) rel(k int64) int64 {
	if l.has {
		return l.at - k
	}
	return l.at
}

// sliceLinks returns s's links in their order in the formats.
func sliceLinks(s *ruleSlice) [4]sliceLink {
	return [4]sliceLink{{s.Prev, s.HasPrev}, {s.Next, s.HasNext}, {s.DPrev, s.HasDPrev}, {s.DNext, s.HasDNext}}
}

// sliceFlags returns s's flag byte.
func sliceFlags(s *ruleSlice) byte {
	var flags byte
	for i, f := range []bool{s.HasPrev, s.HasNext, s.HasDPrev, s.HasDNext, s.InDeque} {
		if f {
			flags |= 1 << i
		}
	}
	return flags
}

// decodeSliceAt decodes slice k (ms) of any of the formats: version 1
// and ruleSliceFolded (links as times) and ruleSliceRel (links set as
// distances from k).
func decodeSliceAt(b []byte, k int64) (ruleSlice, error) {
	var s ruleSlice
	r := binReader{b: b}
	v := r.byte()
	if v != ruleStateV1 && v != ruleSliceFolded && v != ruleSliceRel {
		return s, fmt.Errorf("operators: rules slice: format version %d, want %d to %d", v, ruleStateV1, ruleSliceRel)
	}
	flags := r.byte()
	for i, f := range []*bool{&s.HasPrev, &s.HasNext, &s.HasDPrev, &s.HasDNext, &s.InDeque} {
		*f = flags&(1<<i) != 0
	}
	s.WindowMs, s.N = r.varint(), r.varint()
	if v == ruleSliceRel {
		for _, l := range []struct {
			at  *int64
			has bool
		}{{&s.Prev, s.HasPrev}, {&s.Next, s.HasNext}, {&s.DPrev, s.HasDPrev}, {&s.DNext, s.HasDNext}} {
			if *l.at = r.varint(); l.has {
				*l.at += k
			}
		}
	} else {
		s.Prev, s.Next, s.DPrev, s.DNext = r.varint(), r.varint(), r.varint(), r.varint()
	}
	n := r.uvarint()
	if n > uint64(len(b)) {
		return s, errors.New("operators: rules slice: bad input count")
	}
	if n > 0 {
		// The inputs, copied into one allocation (each capped: an append
		// to one never writes into the next).
		s.In = make([][]byte, n)
		rest := r.b
		for i := range s.In {
			s.In[i] = r.bytes()
		}
		buf := make([]byte, 0, len(rest)-len(r.b))
		for i, in := range s.In {
			at := len(buf)
			buf = append(buf, in...)
			s.In[i] = buf[at:len(buf):len(buf)]
		}
	}
	if r.err != nil {
		return ruleSlice{}, fmt.Errorf("operators: rules slice: %w", r.err)
	}
	return s, nil
}

// aggregateFnOf returns the AggregateFn spelled b: one of the constants
// when it is one (no allocation per decoded summary), else a copy.
func aggregateFnOf(b []byte) AggregateFn {
	for _, fn := range []AggregateFn{AggCount, AggSum, AggMin, AggMax, AggAvg, AggCountDistinct} {
		if string(b) == string(fn) {
			return fn
		}
	}
	return AggregateFn(b)
}

// ruleWindowSerializer is ruleWindow's binary serializer (name
// "rules-window-v1").
type ruleWindowSerializer struct{}

func (ruleWindowSerializer) Name() string { return "rules-window-v1" }

func (ruleWindowSerializer) Append(dst []byte, w ruleWindow) ([]byte, error) {
	dst = slices.Grow(dst, ruleWindowSizeHint(&w))
	if len(w.Older) > 0 && w.TailSlice == nil {
		return dst, errors.New("operators: rules window: older slices without the newest")
	}
	if (len(w.Older) > 0 || len(w.Pages) > 0) && w.TailSlice == nil {
		return dst, errors.New("operators: rules window: pages without the newest slice")
	}
	switch {
	case len(w.Pages) > 0:
		dst = append(dst, ruleStateV5)
	case len(w.Older) > 0:
		dst = append(dst, ruleStateV4)
	case w.DInline:
		dst = append(dst, ruleStateV3)
	case w.TailSlice == nil:
		dst = append(dst, ruleStateV1) // no newest slice: version 1's bytes
	default:
		dst = append(dst, ruleStateV2)
	}
	dst = appendBytes(dst, []byte(w.Shape))
	dst = appendBytes(dst, []byte(w.Fn))
	for _, v := range []int64{w.WindowMs, w.Slices, w.Head, w.Tail, w.First, w.N, w.Floats, w.Distinct, w.DFront, w.DBack, w.DLen} {
		dst = binary.AppendVarint(dst, v)
	}
	switch {
	case w.Ints.Big != nil:
		dst = append(dst, 1)
		b, err := w.Ints.Big.GobEncode()
		if err != nil {
			return dst, err
		}
		dst = appendBytes(dst, b)
	default:
		dst = binary.AppendVarint(append(dst, 0), w.Ints.Int)
	}
	if w.FSum == nil {
		dst = append(dst, 0)
	} else {
		b, err := w.FSum.GobEncode()
		if err != nil {
			return dst, err
		}
		dst = appendBytes(append(dst, 1), b)
	}
	v4 := len(w.Older) > 0 || len(w.Pages) > 0
	if w.TailSlice != nil {
		dst = append(dst, 1)
		dst = appendSliceBytes(dst, w.TailSlice, w.Tail)
	} else if w.DInline {
		dst = append(dst, 0)
	}
	if v4 {
		var d byte
		if w.DInline {
			d = 1
		}
		dst = append(dst, d)
	}
	if w.DInline {
		dst = binary.AppendUvarint(dst, uint64(len(w.DVals)))
		for _, d := range w.DVals {
			dst = binary.AppendVarint(appendBytes(dst, []byte(d.V)), d.N)
		}
	}
	if !v4 {
		return dst, nil
	}
	dst = binary.AppendUvarint(dst, uint64(len(w.Older)))
	for _, o := range w.Older {
		if o.K >= w.Tail || (o.S == nil && o.Raw == nil) {
			return dst, fmt.Errorf("operators: rules window: older slice %d not below the newest %d", o.K, w.Tail)
		}
		dst = binary.AppendUvarint(dst, uint64(w.Tail-o.K))
		if o.S == nil {
			dst = appendBytes(dst, o.Raw)
		} else {
			dst = appendSliceBytes(dst, o.S, o.K)
		}
	}
	if len(w.Pages) == 0 {
		return dst, nil
	}
	dst = binary.AppendUvarint(dst, uint64(len(w.Pages)))
	for _, p := range w.Pages {
		if p.Hi < p.K {
			return dst, fmt.Errorf("operators: rules window: page %d ends at %d", p.K, p.Hi)
		}
		dst = binary.AppendVarint(dst, w.Tail-p.K)
		dst = binary.AppendUvarint(dst, uint64(p.Hi-p.K))
	}
	return dst, nil
}

// appendSliceBytes appends s's bytes, length-prefixed: written after
// dst's end, then moved behind their length (no buffer of their own).
func appendSliceBytes(dst []byte, s *ruleSlice, k int64) []byte {
	dst = binary.AppendUvarint(dst, uint64(ruleSliceSizeAt(s, k)))
	return appendSliceAt(dst, s, k)
}

func (ruleWindowSerializer) Decode(b []byte) (ruleWindow, error) {
	var w ruleWindow
	r := binReader{b: b}
	v := r.byte()
	if v < ruleStateV1 || v > ruleStateV5 {
		return w, fmt.Errorf("operators: rules window: format version %d, want %d to %d", v, ruleStateV1, ruleStateV5)
	}
	w.Shape = string(r.bytes())
	w.Fn = aggregateFnOf(r.bytes())
	for _, p := range []*int64{&w.WindowMs, &w.Slices, &w.Head, &w.Tail, &w.First, &w.N, &w.Floats, &w.Distinct, &w.DFront, &w.DBack, &w.DLen} {
		*p = r.varint()
	}
	if r.byte() == 1 {
		z := new(big.Int)
		if err := z.GobDecode(r.bytes()); err != nil {
			return ruleWindow{}, fmt.Errorf("operators: rules window: %w", err)
		}
		w.Ints = number{Big: z}
	} else {
		w.Ints = number{Int: r.varint()}
	}
	if r.byte() == 1 {
		f := new(big.Float)
		if err := f.GobDecode(r.bytes()); err != nil {
			return ruleWindow{}, fmt.Errorf("operators: rules window: %w", err)
		}
		w.FSum = f.SetPrec(fsumPrec)
	}
	if v >= ruleStateV2 && r.byte() == 1 {
		tb := r.bytes()
		if r.err == nil {
			ts, err := decodeSliceAt(tb, w.Tail)
			if err != nil {
				return ruleWindow{}, fmt.Errorf("operators: rules window: newest slice: %w", err)
			}
			w.TailSlice = &ts
		}
	}
	if v >= ruleStateV4 {
		w.DInline = r.byte() == 1
	}
	if v == ruleStateV3 || w.DInline {
		w.DInline = true
		n := r.uvarint()
		if n > uint64(len(b)) {
			return ruleWindow{}, errors.New("operators: rules window: bad distinct count")
		}
		if n > 0 {
			w.DVals = make([]distinctVal, 0, n)
		}
		for range n {
			d := distinctVal{V: string(r.bytes())}
			d.N = r.varint()
			w.DVals = append(w.DVals, d)
		}
	}
	if v >= ruleStateV4 {
		n := r.uvarint()
		if n > uint64(len(b)) || w.TailSlice == nil {
			return ruleWindow{}, errors.New("operators: rules window: bad older slices")
		}
		// Kept as bytes (decoded when the key's operation reads them),
		// copied once: b may be the state's buffer.
		r.b = slices.Clone(r.b)
		w.Older = make([]inlineSlice, n)
		for i := range w.Older {
			d := r.uvarint()
			sb := r.bytes()
			if r.err != nil {
				break
			}
			if len(sb) == 0 || d == 0 {
				return ruleWindow{}, errors.New("operators: rules window: bad older slice")
			}
			w.Older[i] = inlineSlice{K: w.Tail - int64(d), Raw: sb}
		}
		if len(w.Older) == 0 {
			w.Older = nil
		}
	}
	if v == ruleStateV5 && r.err == nil {
		n := r.uvarint()
		if n == 0 || n > uint64(len(b)) {
			return ruleWindow{}, errors.New("operators: rules window: bad page count")
		}
		w.Pages = make([]pageRef, n)
		for i := range w.Pages {
			k := w.Tail - r.varint()
			hi := r.uvarint()
			if hi > math.MaxInt64/2 {
				return ruleWindow{}, errors.New("operators: rules window: bad page range")
			}
			w.Pages[i] = pageRef{K: k, Hi: k + int64(hi)}
		}
	}
	if r.err != nil {
		return ruleWindow{}, fmt.Errorf("operators: rules window: %w", r.err)
	}
	return w, nil
}

// ruleWindowSizeHint is the bytes ruleWindowSerializer.Append writes for
// w (about them when its sums are big numbers), so that it allocates its
// buffer once and no larger than needed (the hashmap backend keeps it).
func ruleWindowSizeHint(w *ruleWindow) int {
	n := 1 + bytesLen(len(w.Shape)) + bytesLen(len(w.Fn))
	for _, v := range []int64{w.WindowMs, w.Slices, w.Head, w.Tail, w.First, w.N, w.Floats, w.Distinct, w.DFront, w.DBack, w.DLen} {
		n += varintLen(v)
	}
	if w.Ints.Big != nil {
		n += 1 + bytesLen(1+(w.Ints.Big.BitLen()+7)/8)
	} else {
		n += 1 + varintLen(w.Ints.Int)
	}
	n++
	if w.FSum != nil {
		n += bytesLen(16 + fsumPrec/8)
	}
	if t := w.TailSlice; t != nil {
		n += 1 + bytesLen(ruleSliceSizeAt(t, w.Tail))
	} else if w.DInline {
		n++
	}
	if w.DInline {
		n += uvarintLen(uint64(len(w.DVals)))
		for _, d := range w.DVals {
			n += bytesLen(len(d.V)) + varintLen(d.N)
		}
	}
	if len(w.Older) > 0 || len(w.Pages) > 0 {
		n += 1 + uvarintLen(uint64(len(w.Older)))
		for _, o := range w.Older {
			n += uvarintLen(uint64(w.Tail-o.K)) + bytesLen(o.size())
		}
	}
	if len(w.Pages) > 0 {
		n += uvarintLen(uint64(len(w.Pages)))
		for _, p := range w.Pages {
			n += varintLen(w.Tail-p.K) + uvarintLen(uint64(p.Hi-p.K))
		}
	}
	return n
}

// ruleSliceSizeHint is the bytes ruleSliceSerializer.Append writes for s.
func ruleSliceSizeHint(s *ruleSlice) int {
	n := 2 + uvarintLen(uint64(len(s.In)))
	for _, v := range []int64{s.WindowMs, s.N, s.Prev, s.Next, s.DPrev, s.DNext} {
		n += varintLen(v)
	}
	for _, in := range s.In {
		n += bytesLen(len(in))
	}
	return n
}

// uvarintLen is the length of x as a uvarint, varintLen of x as a varint,
// bytesLen of n bytes with their length (appendBytes).
func uvarintLen(x uint64) int { return (bits.Len64(x|1) + 6) / 7 }

func varintLen(x int64) int {
	ux := uint64(x) << 1
	if x < 0 {
		ux = ^ux
	}
	return uvarintLen(ux)
}

func bytesLen(n int) int { return uvarintLen(uint64(n)) + n }

// appendBytes appends b with its length (uvarint).
func appendBytes(dst, b []byte) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(b))), b...)
}

// binReader reads the binary formats of this file; the first error sticks
// and reads after it return zero values.
type binReader struct {
	b   []byte
	err error
}

var errShort = errors.New("truncated")

func (r *binReader) byte() byte {
	if r.err != nil || len(r.b) == 0 {
		r.err = errShort
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *binReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errShort
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *binReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errShort
		return 0
	}
	r.b = r.b[n:]
	return v
}

// bytes returns the next length-prefixed bytes, sharing r's memory.
func (r *binReader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = errShort
		return nil
	}
	b := r.b[:n:n]
	r.b = r.b[n:]
	return b
}

// ruleWin works on the window state of the backend's current key for one
// operation (a routed copy, a timer, a removal): it loads the summary,
// caches the slices it reads, and writes what changed with flush.
type ruleWin struct {
	slices   state.MapState[int64, ruleSlice]
	pages    state.MapState[int64, rulePage]
	agg      state.ValueState[ruleWindow]
	distinct state.MapState[string, int64]

	w      ruleWindow
	has    bool // a summary exists
	cache  map[int64]*ruleSlice
	dirty  map[int64]bool // true: put, false: remove
	counts map[string]int64
	dcache map[string]int64 // distinct counts read or written (before flush)

	// where says where each slice the operation read was stored: in the
	// summary loaded (sliceInSummary) or in RulesSliceState
	// (sliceInMap); a slice the operation made is absent. flush moves a
	// slice between the two when it enters or leaves the summary (and a
	// format version 1 summary's newest slice, read from the map, into
	// the summary).
	where map[int64]byte
	// picked is flush's scratch list of the slices the summary keeps,
	// older its scratch ruleWindow.Older.
	picked []int64
	older  []inlineSlice
	// raw are the loaded summary's older slices (ruleWindow.Older), as
	// bytes until the operation reads one (fromSummary decodes it into
	// the cache and sets its S).
	raw []inlineSlice
	// loaded are the pages (RulesPageState) the operation read, by key,
	// their slices decoded as the operation reads them (fromPage);
	// spill is flush's scratch list of the slices it moves out of the
	// summary.
	loaded map[int64]*rulePage
	spill  []int64

	// hint, when not nil, knows the keys without a summary (ruleKeyHint),
	// curKey returns the current key, and stored says whether the current
	// key's summary is in the state (set by load, kept by flush and
	// clearKey, which tell the hint when it changes).
	hint   *ruleKeyHint
	curKey func() []byte
	stored bool
}

// load reads the current key's summary and resets the caches.
func (rw *ruleWin) load() error {
	if rw.cache == nil {
		rw.cache, rw.dirty, rw.dcache, rw.where = map[int64]*ruleSlice{}, map[int64]bool{}, map[string]int64{}, map[int64]byte{}
		rw.loaded = map[int64]*rulePage{}
	}
	clear(rw.loaded)
	clear(rw.cache)
	clear(rw.dirty)
	clear(rw.dcache)
	clear(rw.where)
	rw.raw = nil
	var (
		w   ruleWindow
		ok  bool
		err error
	)
	if rw.hint == nil || rw.hint.mayHold(rw.curKey()) {
		if w, ok, err = rw.agg.Value(); err != nil {
			return err
		}
	}
	rw.w, rw.has, rw.stored = w, ok, ok
	rw.w.Older = nil // in rw.raw now; flush picks the summary's slices again
	if !ok || w.Slices == 0 {
		return nil
	}
	if w.TailSlice != nil {
		// Decoded for this read (ruleWindowSerializer is no
		// state.HeapSerializer: no backend keeps it decoded), so they are
		// changed in place; their inputs are capped (an append copies).
		rw.cache[w.Tail] = w.TailSlice
		rw.where[w.Tail] = sliceInSummary
		for _, o := range w.Older {
			rw.where[o.K] = sliceInSummary
		}
		rw.raw = w.Older
		return nil
	}
	// Format version 1: the newest slice is in the map.
	t, err := rw.slice(w.Tail)
	if err != nil {
		return err
	}
	rw.w.TailSlice = t
	return nil
}

// Where a slice read by an operation was stored (ruleWin.where).
const (
	sliceInSummary = 1
	sliceInMap     = 2
	sliceInPage    = 3
)

// fromSummary returns older slice k of the loaded summary when it is
// still undecoded (rw.raw), decoding it into the cache.
func (rw *ruleWin) fromSummary(k int64) (*ruleSlice, bool, error) {
	for i := range rw.raw {
		if o := &rw.raw[i]; o.K == k && o.S == nil {
			s, err := o.slice()
			if err != nil {
				return nil, false, err
			}
			o.S = s
			rw.cache[k] = s
			return s, true, nil
		}
	}
	return nil, false, nil
}

// fromPage returns slice k from a page of the key (ruleWindow.Pages)
// whose range holds k and which holds k, reading the page once per
// operation (rw.loaded) and decoding the slice into the cache.
func (rw *ruleWin) fromPage(k int64) (*ruleSlice, bool, error) {
	for _, ref := range rw.w.Pages {
		if k < ref.K || k > ref.Hi {
			continue
		}
		p := rw.loaded[ref.K]
		if p == nil {
			v, ok, err := rw.pages.Get(ref.K)
			if err != nil {
				return nil, false, err
			}
			if !ok {
				return nil, false, fmt.Errorf("operators: %s: window state: page %d of the key missing", RulesType, ref.K)
			}
			p = &v
			rw.loaded[ref.K] = p
		}
		i, found := slices.BinarySearchFunc(p.Slices, k, func(o inlineSlice, k int64) int { return cmp.Compare(o.K, k) })
		if !found {
			continue
		}
		o := &p.Slices[i]
		if o.S == nil {
			s, err := o.slice()
			if err != nil {
				return nil, false, err
			}
			o.S = s
		}
		rw.cache[k] = o.S
		rw.where[k] = sliceInPage
		return o.S, true, nil
	}
	return nil, false, nil
}

// slice returns slice k (which must exist), cached.
func (rw *ruleWin) slice(k int64) (*ruleSlice, error) {
	if s, ok := rw.cache[k]; ok {
		return s, nil
	}
	if s, ok, err := rw.fromSummary(k); ok || err != nil {
		return s, err
	}
	if s, ok, err := rw.fromPage(k); ok || err != nil {
		return s, err
	}
	s, ok, err := rw.slices.Get(k)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("operators: %s: window state: slice %d of the key missing", RulesType, k)
	}
	p := &s
	rw.cache[k] = p
	rw.where[k] = sliceInMap
	return p, nil
}

// lookup returns slice k or nil when absent.
func (rw *ruleWin) lookup(k int64) (*ruleSlice, error) {
	if s, ok := rw.cache[k]; ok {
		return s, nil
	}
	if put, ok := rw.dirty[k]; ok && !put {
		return nil, nil
	}
	if s, ok, err := rw.fromSummary(k); ok || err != nil {
		return s, err
	}
	if s, ok, err := rw.fromPage(k); ok || err != nil {
		return s, err
	}
	s, ok, err := rw.slices.Get(k)
	if err != nil || !ok {
		return nil, err
	}
	p := &s
	rw.cache[k] = p
	rw.where[k] = sliceInMap
	return p, nil
}

func (rw *ruleWin) touch(k int64) { rw.dirty[k] = true }

// flush writes the changed slices and distinct counts and the summary
// (cleared with the key's distinct map when no slice is left), the newest
// slice and the others pickSummarySlices keeps in the summary, every
// other changed slice in RulesSliceState: a slice leaving the summary is
// written there, one entering it (read from there) removed there.
func (rw *ruleWin) flush() error {
	keep := rw.pickSummarySlices()
	spill := rw.spill[:0]
	for k, put := range rw.dirty {
		var err error
		switch at := rw.where[k]; {
		case at == sliceInPage:
			// flushPages writes the page.
		case put && slices.Contains(keep, k):
			if at == sliceInMap {
				err = rw.slices.Remove(k)
			}
		case put && at == sliceInMap:
			err = rw.putSlice(k, *rw.cache[k])
		case put:
			spill = append(spill, k) // made by the operation or leaves the summary
		case at != sliceInSummary:
			err = rw.slices.Remove(k) // a removed slice the map held
		}
		if err != nil {
			return err
		}
	}
	for k, at := range rw.where {
		if _, ok := rw.dirty[k]; ok {
			continue
		}
		in := slices.Contains(keep, k)
		var err error
		switch {
		case at == sliceInSummary && !in:
			spill = append(spill, k) // leaves the summary
		case at == sliceInMap && in:
			err = rw.slices.Remove(k) // enters it
		}
		if err != nil {
			return err
		}
	}
	rw.spill = spill
	if err := rw.flushPages(keep); err != nil {
		return err
	}
	if err := rw.spillSlices(spill); err != nil {
		return err
	}
	clear(rw.dirty)
	rw.w.Older = nil
	if len(keep) > 1 {
		// In rw's scratch list: the summary is encoded before the next
		// operation (no backend keeps a ruleWindow decoded).
		rw.older = rw.older[:0]
		for _, k := range keep[1:] {
			o := inlineSlice{K: k, S: rw.cache[k]}
			if o.S == nil {
				o = rw.rawSlice(k)
			}
			rw.older = append(rw.older, o)
		}
		rw.w.Older = rw.older
	}
	if rw.w.Slices == 0 {
		for _, p := range rw.w.Pages {
			// Every slice left through the operation (flushPages removed
			// their pages): none is left to remove here.
			return fmt.Errorf("operators: %s: window state: page %d left without slices", RulesType, p.K)
		}
		rw.w.TailSlice = nil
		rw.has = false
		clear(rw.dcache)
		if rw.w.distinctInMap() {
			if err := rw.distinct.Clear(); err != nil {
				return err
			}
		}
		rw.unstore()
		return rw.agg.Clear()
	}
	if rw.w.DInline {
		if err := rw.mergeInline(); err != nil {
			return err
		}
	}
	for v, n := range rw.dcache {
		var err error
		if n == 0 {
			err = rw.distinct.Remove(v)
		} else {
			err = rw.distinct.Put(v, n)
		}
		if err != nil {
			return err
		}
	}
	clear(rw.dcache)
	rw.has = true
	rw.w.TailSlice = rw.cache[rw.w.Tail]
	if rw.w.TailSlice == nil {
		return fmt.Errorf("operators: %s: window state: newest slice %d of the key missing", RulesType, rw.w.Tail)
	}
	if !rw.stored && rw.hint != nil {
		rw.hint.add(rw.curKey())
	}
	rw.stored = true
	return rw.agg.Update(rw.w)
}

// flushPages writes each page the operation read whose slices changed,
// without the slices it removed or the summary now keeps, with the
// others as they are now (decoded or as read), and removes a page left
// without slices (and its ruleWindow.Pages entry).
func (rw *ruleWin) flushPages(keep []int64) error {
	for pk, p := range rw.loaded {
		changed := false
		rest := p.Slices[:0]
		for _, o := range p.Slices {
			put, touched := rw.dirty[o.K]
			if (touched && !put) || slices.Contains(keep, o.K) {
				changed = true
				continue
			}
			if touched {
				changed = true
			}
			if s := rw.cache[o.K]; s != nil && rw.where[o.K] == sliceInPage {
				o.S = s
			}
			rest = append(rest, o)
		}
		p.Slices = rest
		if !changed {
			continue
		}
		i := slices.IndexFunc(rw.w.Pages, func(r pageRef) bool { return r.K == pk })
		if i < 0 {
			return fmt.Errorf("operators: %s: window state: page %d not in the summary", RulesType, pk)
		}
		if len(rest) == 0 {
			rw.w.Pages = slices.Delete(rw.w.Pages, i, i+1)
			if len(rw.w.Pages) == 0 {
				rw.w.Pages = nil
			}
			if err := rw.pages.Remove(pk); err != nil {
				return err
			}
			continue
		}
		rw.w.Pages[i].Hi = rest[len(rest)-1].K
		if err := rw.putPage(pk, *p); err != nil {
			return err
		}
	}
	clear(rw.loaded)
	return nil
}

// spillSlices writes the slices ks that leave the summary (or that the
// operation made and the summary does not keep): as one page
// (RulesPageState) when they are at least minPageSlices and no page of
// the key has the oldest one's key, else one entry each in
// RulesSliceState. Slices still as the summary's bytes are moved as
// they are.
func (rw *ruleWin) spillSlices(ks []int64) error {
	if len(ks) < minPageSlices || slices.ContainsFunc(rw.w.Pages, func(r pageRef) bool { return slices.Contains(ks, r.K) }) {
		for _, k := range ks {
			s, err := rw.slice(k)
			if err != nil {
				return err
			}
			if err := rw.putSlice(k, *s); err != nil {
				return err
			}
		}
		return nil
	}
	slices.Sort(ks)
	p := rulePage{Slices: make([]inlineSlice, len(ks))}
	for i, k := range ks {
		o := inlineSlice{K: k, S: rw.cache[k]}
		if o.S == nil {
			if o = rw.rawSlice(k); o.Raw == nil {
				return fmt.Errorf("operators: %s: window state: slice %d of the key missing", RulesType, k)
			}
		}
		p.Slices[i] = o
	}
	rw.w.Pages = append(rw.w.Pages, pageRef{K: ks[0], Hi: ks[len(ks)-1]})
	return rw.putPage(ks[0], p)
}

// putPage writes page k: cold (as putSlice) unless it holds a member of
// the min/max deque.
func (rw *ruleWin) putPage(k int64, p rulePage) error {
	c, ok := rw.pages.(state.ColdPutter[int64, rulePage])
	for _, o := range p.Slices {
		if ok && o.inDeque() {
			ok = false
		}
	}
	if ok {
		return c.PutCold(k, p)
	}
	return rw.pages.Put(k, p)
}

// inDeque reports whether o's slice is in the min/max deque (its flag
// byte's bit, ruleSlice.InDeque, when still bytes).
func (o inlineSlice) inDeque() bool {
	if o.S != nil {
		return o.S.InDeque
	}
	return len(o.Raw) > 1 && o.Raw[1]&(1<<4) != 0
}

// pickSummarySlices returns the slices the summary keeps (newest first,
// in rw.picked): none when the key has none; while the key holds at most
// maxInlineSlices slices, the newest of those the operation read or made
// (the summary's own, and any it read from RulesSliceState) whose sizes
// sum to at most maxInlineSliceBytes; else, and always first, the newest
// alone (version 2's layout: a key with more slices writes one slice
// entry per copy, as it would anyway, and its summary stays small).
func (rw *ruleWin) pickSummarySlices() []int64 {
	keep := rw.picked[:0]
	w := &rw.w
	if w.Slices == 0 {
		rw.picked = keep
		return keep
	}
	keep = append(keep, w.Tail)
	if w.Slices > 1 && w.Slices <= maxInlineSlices && len(rw.cache)+len(rw.raw) > 1 {
		for k := range rw.cache {
			if k != w.Tail {
				keep = append(keep, k)
			}
		}
		for _, o := range rw.raw {
			if o.S == nil {
				keep = append(keep, o.K)
			}
		}
		slices.SortFunc(keep[1:], func(a, b int64) int { return cmp.Compare(b, a) })
		size := 0
		for i, k := range keep {
			n := 0
			if s := rw.cache[k]; s != nil {
				n = ruleSliceSizeAt(s, k)
			} else {
				n = rw.rawSlice(k).size()
			}
			if size += n; i > 0 && size > maxInlineSliceBytes {
				keep = keep[:i]
				break
			}
		}
		slices.Reverse(keep[1:]) // Older is oldest first
	}
	rw.picked = keep
	return keep
}

// rawSlice returns older slice k of the loaded summary, undecoded.
func (rw *ruleWin) rawSlice(k int64) inlineSlice {
	for _, o := range rw.raw {
		if o.K == k {
			return inlineSlice{K: k, Raw: o.Raw}
		}
	}
	return inlineSlice{K: k}
}

// unstore records that the current key's summary is removed.
func (rw *ruleWin) unstore() {
	if rw.stored && rw.hint != nil {
		rw.hint.remove(rw.curKey())
	}
	rw.stored = false
}

// mergeInline moves the distinct counts read or written (dcache) into the
// inline summary's DVals (a new slice: the one loaded may be the stored
// value's), or, when they outgrow the inline bounds, every count into
// RulesDistinctState (left in dcache for flush to write) and the summary
// out of inline mode.
func (rw *ruleWin) mergeInline() error {
	w := &rw.w
	if len(rw.dcache) == 0 {
		return nil
	}
	vals := make([]distinctVal, 0, len(w.DVals)+len(rw.dcache))
	size := 0
	for _, d := range w.DVals {
		if _, ok := rw.dcache[d.V]; !ok {
			vals = append(vals, d)
			size += len(d.V)
		}
	}
	for v, n := range rw.dcache {
		if n > 0 {
			vals = append(vals, distinctVal{V: v, N: n})
			size += len(v)
		}
	}
	if len(vals) > maxInlineDistinct || size > maxInlineDistinctBytes {
		clear(rw.dcache)
		for _, d := range vals {
			rw.dcache[d.V] = d.N
		}
		w.DInline, w.DVals = false, nil
		return nil
	}
	slices.SortFunc(vals, func(a, b distinctVal) int { return strings.Compare(a.V, b.V) })
	w.DVals = vals
	clear(rw.dcache)
	return nil
}

// putSlice writes slice k. Slices outside the min/max deque are cold: a
// copy in time order reads only the summary (and, for min and max, the
// deque's members), a slice is read again when it expires or a copy out of
// time order reaches it, so it is written with state.ColdPutter where the
// state has it: one slice written per record then does not evict the
// summaries from the Pebble write cache (at 5M records of the bench's
// rules-10, 100k summaries read per record behind a stream of slices never
// read).
func (rw *ruleWin) putSlice(k int64, s ruleSlice) error {
	if c, ok := rw.slices.(state.ColdPutter[int64, ruleSlice]); ok && !s.InDeque {
		return c.PutCold(k, s)
	}
	return rw.slices.Put(k, s)
}

// clearKey removes every slice, distinct count and the summary of the
// current key.
func (rw *ruleWin) clearKey() error {
	clear(rw.cache)
	clear(rw.dirty)
	clear(rw.dcache)
	clear(rw.where)
	rw.raw = nil
	clear(rw.loaded)
	rw.w, rw.has = ruleWindow{}, false
	if err := rw.slices.Clear(); err != nil {
		return err
	}
	if err := rw.pages.Clear(); err != nil {
		return err
	}
	if err := rw.distinct.Clear(); err != nil {
		return err
	}
	rw.unstore()
	return rw.agg.Clear()
}

// distinctCount returns the stored count of distinct input v.
func (rw *ruleWin) distinctCount(v []byte) (int64, error) {
	if n, ok := rw.dcache[string(v)]; ok {
		return n, nil
	}
	if rw.w.DInline {
		n := rw.w.inlineCount(v)
		rw.dcache[string(v)] = n
		return n, nil
	}
	n, _, err := rw.distinct.Get(string(v))
	if err != nil {
		return 0, err
	}
	rw.dcache[string(v)] = n
	return n, nil
}

// minMax reports whether the key's fn keeps the deque.
func (w *ruleWindow) minMax() bool { return w.Fn == AggMin || w.Fn == AggMax }

// accSlice adds (sign 1) or subtracts (sign -1) slice s to or from the
// running aggregate (not the deque).
// The slice's records count by s.N, its values by its (pre-aggregated)
// inputs (ruleSlice.fold).
func (rw *ruleWin) accSlice(s *ruleSlice, sign int64) error {
	rw.w.N += sign * s.N
	if rw.w.Fn == AggCount {
		return nil
	}
	for _, in := range s.In {
		if err := rw.accValue(in, sign); err != nil {
			return err
		}
	}
	return nil
}

// accValue adds or subtracts the value of one aggregate input (a record's,
// or a slice's pre-aggregated one) without counting a record.
func (rw *ruleWin) accValue(in []byte, sign int64) error {
	w := &rw.w
	switch w.Fn {
	case AggSum, AggAvg:
		x := parseNumber(in)
		if x.IsFloat {
			w.Floats += sign
			if w.FSum == nil {
				w.FSum = new(big.Float).SetPrec(fsumPrec)
			}
			f := new(big.Float).SetFloat64(x.Float)
			if sign > 0 {
				w.FSum.Add(w.FSum, f)
			} else {
				w.FSum.Sub(w.FSum, f)
			}
			if w.Floats == 0 {
				w.FSum = nil
			}
		} else if sign > 0 {
			w.Ints = w.Ints.add(x)
		} else {
			w.Ints = w.Ints.add(x.neg())
		}
	case AggCountDistinct:
		n, err := rw.distinctCount(in)
		if err != nil {
			return err
		}
		switch {
		case sign > 0 && n == 0:
			w.Distinct++
		case sign < 0 && n == 1:
			w.Distinct--
		}
		rw.dcache[string(in)] = n + sign
	}
	return nil
}

// fold adds the aggregate input in (JSON, as the routing stage wrote it)
// of one more record (counted in N by the caller) to the slice's inputs,
// pre-aggregated by fn: an integer into the first of the slice's integer
// sums it fits into without leaving int64 (sum and avg; appended when
// none), a double appended (the exact sum of doubles is the running
// aggregate's, FSum); for min and max the inputs become the one extreme
// (the first of equal ones, as sliceExt picks); for count_distinct an
// input the slice already holds is not added again. It returns the value
// the running aggregate takes for the record (accValue; nil: none, the
// slice already had it) and the slice's inputs share no memory with in.
func (s *ruleSlice) fold(fn AggregateFn, in []byte) []byte {
	switch fn {
	case AggSum, AggAvg:
		x := parseNumber(in)
		if !x.IsFloat {
			for i, o := range s.In {
				y := parseNumber(o)
				if y.IsFloat {
					continue
				}
				if sum, ok := addInt64(y.Int, x.Int); ok {
					s.In[i] = strconv.AppendInt(s.In[i][:0:0], sum, 10)
					return in
				}
			}
		}
	case AggMin, AggMax:
		if len(s.In) > 0 {
			ext, at := sliceExtAt(fn, s)
			if !beats(fn, parseNumber(in), ext) {
				if len(s.In) > 1 {
					s.In = [][]byte{s.In[at]}
				}
				return in
			}
			s.In = s.In[:0]
		}
	case AggCountDistinct:
		for _, o := range s.In {
			if bytes.Equal(o, in) {
				return nil
			}
		}
	}
	s.In = append(s.In, slices.Clone(in))
	return in
}

// sliceExt is the extreme (min or max, by fn) of slice s's inputs.
func sliceExt(fn AggregateFn, s *ruleSlice) number {
	e, _ := sliceExtAt(fn, s)
	return e
}

// sliceExtAt is sliceExt and the index in s.In of the input that is the
// extreme (the first of equal ones).
func sliceExtAt(fn AggregateFn, s *ruleSlice) (number, int) {
	var e number
	at := 0
	for i, in := range s.In {
		x := parseNumber(in)
		if i == 0 || (fn == AggMax && e.less(x)) || (fn == AggMin && x.less(e)) {
			e, at = x, i
		}
	}
	return e, at
}

// dominates reports whether a slice with extreme a makes an earlier slice
// with extreme b useless for the deque: a >= b for max, a <= b for min.
func dominates(fn AggregateFn, a, b number) bool {
	if fn == AggMax {
		return !a.less(b)
	}
	return !b.less(a)
}

// beats reports whether extreme a is strictly better than b (a > b for
// max, a < b for min).
func beats(fn AggregateFn, a, b number) bool {
	if fn == AggMax {
		return b.less(a)
	}
	return a.less(b)
}

// dqUnlink removes slice k from the deque.
func (rw *ruleWin) dqUnlink(k int64, s *ruleSlice) error {
	w := &rw.w
	if s.HasDPrev {
		p, err := rw.slice(s.DPrev)
		if err != nil {
			return err
		}
		p.DNext, p.HasDNext = s.DNext, s.HasDNext
		rw.touch(s.DPrev)
	} else {
		w.DFront = s.DNext
	}
	if s.HasDNext {
		n, err := rw.slice(s.DNext)
		if err != nil {
			return err
		}
		n.DPrev, n.HasDPrev = s.DPrev, s.HasDPrev
		rw.touch(s.DNext)
	} else {
		w.DBack = s.DPrev
	}
	s.InDeque, s.HasDPrev, s.HasDNext, s.DPrev, s.DNext = false, false, false, 0, 0
	rw.touch(k)
	w.DLen--
	return nil
}

// dqPopDominated removes the deque slices before slice k (a member) that
// k's extreme dominates.
func (rw *ruleWin) dqPopDominated(k int64, s *ruleSlice) error {
	ext := sliceExt(rw.w.Fn, s)
	for s.HasDPrev {
		pk := s.DPrev
		p, err := rw.slice(pk)
		if err != nil {
			return err
		}
		if !dominates(rw.w.Fn, ext, sliceExt(rw.w.Fn, p)) {
			return nil
		}
		if err := rw.dqUnlink(pk, p); err != nil {
			return err
		}
	}
	return nil
}

// dqInsert makes slice k, in the running aggregate and just changed, take
// its place in the deque: a member when its extreme beats every later
// slice's, removing the earlier members it dominates. Its cost is the
// deque members after k plus those removed.
func (rw *ruleWin) dqInsert(k int64, s *ruleSlice) error {
	w := &rw.w
	if !s.InDeque {
		// succ: the member with the smallest key above k (the best of the
		// slices after k); pred: the member before it.
		var succ int64
		hasSucc := false
		cur, hasCur := w.DBack, w.DLen > 0
		for hasCur && cur > k {
			succ, hasSucc = cur, true
			c, err := rw.slice(cur)
			if err != nil {
				return err
			}
			cur, hasCur = c.DPrev, c.HasDPrev
		}
		if hasSucc {
			n, err := rw.slice(succ)
			if err != nil {
				return err
			}
			if !beats(w.Fn, sliceExt(w.Fn, s), sliceExt(w.Fn, n)) {
				return nil
			}
			n.DPrev, n.HasDPrev = k, true
			rw.touch(succ)
		} else {
			w.DBack = k
		}
		s.DNext, s.HasDNext = succ, hasSucc
		s.DPrev, s.HasDPrev = cur, hasCur
		if hasCur {
			p, err := rw.slice(cur)
			if err != nil {
				return err
			}
			p.DNext, p.HasDNext = k, true
			rw.touch(cur)
		} else {
			w.DFront = k
		}
		s.InDeque = true
		w.DLen++
		rw.touch(k)
	}
	return rw.dqPopDominated(k, s)
}

// link inserts the new slice k into the time-ordered list, walking back
// from the tail (the cost of a copy out of time order).
func (rw *ruleWin) link(k int64, s *ruleSlice) error {
	w := &rw.w
	switch {
	case w.Slices == 0:
		w.Head, w.Tail = k, k
	case k > w.Tail:
		t, err := rw.slice(w.Tail)
		if err != nil {
			return err
		}
		t.Next, t.HasNext = k, true
		rw.touch(w.Tail)
		s.Prev, s.HasPrev = w.Tail, true
		w.Tail = k
	default:
		// Walk back from the tail to the first slice before k.
		next := w.Tail
		n, err := rw.slice(next)
		if err != nil {
			return err
		}
		for n.HasPrev && n.Prev > k {
			next = n.Prev
			if n, err = rw.slice(next); err != nil {
				return err
			}
		}
		s.Next, s.HasNext = next, true
		if n.HasPrev {
			p, err := rw.slice(n.Prev)
			if err != nil {
				return err
			}
			p.Next, p.HasNext = k, true
			rw.touch(n.Prev)
			s.Prev, s.HasPrev = n.Prev, true
		} else {
			w.Head = k
		}
		n.Prev, n.HasPrev = k, true
		rw.touch(next)
	}
	w.Slices++
	rw.cache[k] = s
	rw.touch(k)
	return nil
}

// evictBelow takes the slices of the running aggregate older than lo out
// of it (they stay stored until their timers remove them).
func (rw *ruleWin) evictBelow(lo int64) error {
	w := &rw.w
	for w.N > 0 && w.First < lo {
		k := w.First
		s, err := rw.slice(k)
		if err != nil {
			return err
		}
		if err := rw.accSlice(s, -1); err != nil {
			return err
		}
		if s.InDeque {
			if err := rw.dqUnlink(k, s); err != nil {
				return err
			}
		}
		if w.N == 0 {
			break
		}
		w.First = s.Next // N > 0: a later slice is in the aggregate
	}
	return nil
}

// rebuild recomputes the running aggregate for window windowMs from the
// stored slices in [Tail - windowMs, Tail]: when a rule's window changed,
// or after migrating state of the earlier layout.
func (rw *ruleWin) rebuild(windowMs int64) error {
	w := &rw.w
	// Empty the deque and the distinct counts.
	for w.DLen > 0 {
		s, err := rw.slice(w.DFront)
		if err != nil {
			return err
		}
		if err := rw.dqUnlink(w.DFront, s); err != nil {
			return err
		}
	}
	if w.distinctInMap() {
		if err := rw.distinct.Clear(); err != nil {
			return err
		}
	}
	clear(rw.dcache)
	w.WindowMs, w.N, w.Ints, w.Floats, w.FSum, w.Distinct, w.DVals = windowMs, 0, number{}, 0, nil, 0, nil
	if w.Slices == 0 {
		return nil
	}
	var keys []int64
	for k, has := w.Tail, true; has && k >= w.Tail-windowMs; {
		s, err := rw.slice(k)
		if err != nil {
			return err
		}
		keys = append(keys, k)
		k, has = s.Prev, s.HasPrev
	}
	slices.Reverse(keys)
	w.First = keys[0]
	for _, k := range keys {
		s, err := rw.slice(k)
		if err != nil {
			return err
		}
		if err := rw.accSlice(s, 1); err != nil {
			return err
		}
		if w.minMax() {
			if err := rw.dqInsert(k, s); err != nil {
				return err
			}
		}
	}
	return nil
}

// ruleResult is an aggregate over one window, as the alert needs it.
type ruleResult struct {
	n        int64
	ints     number
	floats   int64
	fsum     *big.Float
	distinct int64
	ext      number
}

// value returns the aggregate of fn as a float64 for alert_when and, when
// withJSON (an alert is emitted), as JSON: sums and averages over doubles
// are the exact sum of the window's inputs rounded once (to nearest, ties
// to even). A copy that does not alert asks for the number only.
func (r *ruleResult) value(fn AggregateFn, withJSON bool) ([]byte, float64) {
	var n number
	switch fn {
	case AggCount:
		n = number{Int: r.n}
	case AggCountDistinct:
		n = number{Int: r.distinct}
	case AggMin, AggMax:
		n = r.ext
	default:
		n = r.ints
		if r.floats > 0 {
			t := new(big.Float).SetPrec(fsumPrec + 64).SetInt(r.ints.bigInt())
			t.Add(t, r.fsum)
			f, _ := t.Float64()
			n = number{Float: f, IsFloat: true}
		}
		if fn == AggAvg {
			v := n.float() / float64(r.n)
			if !withJSON {
				return nil, v
			}
			return appendFloat(nil, v), v
		}
	}
	if !withJSON {
		return nil, n.float()
	}
	return n.appendJSON(nil), n.float()
}

// current returns the running aggregate as a result.
func (rw *ruleWin) current() (ruleResult, error) {
	w := &rw.w
	r := ruleResult{n: w.N, ints: w.Ints, floats: w.Floats, fsum: w.FSum, distinct: w.Distinct}
	if w.minMax() && w.DLen > 0 {
		s, err := rw.slice(w.DFront)
		if err != nil {
			return r, err
		}
		r.ext = sliceExt(w.Fn, s)
	}
	return r, nil
}

// resultAt returns the aggregate over the stored slices in [ts - windowMs,
// ts] for a copy older than the key's newest slice (ts < Tail). From the
// running aggregate when ts is in its window: minus the slices after ts,
// plus the stored ones below the aggregate that the window reaches;
// otherwise (or for min/max when the window's extreme lies after ts) by
// walking the window's slices.
func (rw *ruleWin) resultAt(ts, windowMs int64) (ruleResult, error) {
	w := &rw.w
	fn := w.Fn
	lo := ts - windowMs
	if ts >= w.Tail-w.WindowMs && w.N > 0 {
		if !w.minMax() {
			d := ruleDelta{rw: rw, r: ruleResult{n: w.N, ints: w.Ints, floats: w.Floats, distinct: w.Distinct}}
			if w.FSum != nil {
				d.r.fsum = new(big.Float).SetPrec(fsumPrec).Set(w.FSum)
			}
			for k, has := w.Tail, true; has && k > ts; {
				s, err := rw.slice(k)
				if err != nil {
					return d.r, err
				}
				if err := d.slice(s, -1); err != nil {
					return d.r, err
				}
				k, has = s.Prev, s.HasPrev
			}
			if err := rw.walkBelow(w.First, lo, func(s *ruleSlice) error { return d.slice(s, 1) }); err != nil {
				return d.r, err
			}
			return d.r, nil
		}
		front, err := rw.slice(w.DFront)
		if err != nil {
			return ruleResult{}, err
		}
		if w.DFront <= ts {
			r := ruleResult{ext: sliceExt(fn, front)}
			err := rw.walkBelow(w.First, lo, func(s *ruleSlice) error {
				if x := sliceExt(fn, s); beats(fn, x, r.ext) {
					r.ext = x
				}
				return nil
			})
			return r, err
		}
	}
	// Walk the window's slices: from slice ts back to lo.
	d := ruleDelta{rw: rw, fresh: true}
	first := true
	for k, has := ts, true; has && k >= lo; {
		s, err := rw.slice(k)
		if err != nil {
			return d.r, err
		}
		if w.minMax() {
			if x := sliceExt(fn, s); first || beats(fn, x, d.r.ext) {
				d.r.ext = x
			}
			first = false
		} else if err := d.slice(s, 1); err != nil {
			return d.r, err
		}
		k, has = s.Prev, s.HasPrev
	}
	return d.r, nil
}

// walkBelow calls fn for the stored slices before slice first, newest
// first, down to lo (inclusive).
func (rw *ruleWin) walkBelow(first, lo int64, fn func(*ruleSlice) error) error {
	s, err := rw.slice(first)
	if err != nil {
		return err
	}
	for k, has := s.Prev, s.HasPrev; has && k >= lo; {
		p, err := rw.slice(k)
		if err != nil {
			return err
		}
		if err := fn(p); err != nil {
			return err
		}
		k, has = p.Prev, p.HasPrev
	}
	return nil
}

// ruleDelta computes a result from the running aggregate (or, fresh, from
// nothing) plus or minus slices, without changing the state: distinct
// counts go to a local map over the stored ones.
type ruleDelta struct {
	rw    *ruleWin
	r     ruleResult
	fresh bool
	delta map[string]int64
}

func (d *ruleDelta) slice(s *ruleSlice, sign int64) error {
	fn := d.rw.w.Fn
	d.r.n += sign * s.N
	if fn == AggCount {
		return nil
	}
	for _, in := range s.In {
		switch fn {
		case AggSum, AggAvg:
			x := parseNumber(in)
			if !x.IsFloat {
				if sign < 0 {
					x = x.neg()
				}
				d.r.ints = d.r.ints.add(x)
				continue
			}
			d.r.floats += sign
			if d.r.fsum == nil {
				d.r.fsum = new(big.Float).SetPrec(fsumPrec)
			}
			f := new(big.Float).SetFloat64(x.Float)
			if sign > 0 {
				d.r.fsum.Add(d.r.fsum, f)
			} else {
				d.r.fsum.Sub(d.r.fsum, f)
			}
		case AggCountDistinct:
			if d.delta == nil {
				d.delta = map[string]int64{}
			}
			var stored int64
			if !d.fresh {
				n, err := d.rw.distinctCount(in)
				if err != nil {
					return err
				}
				stored = n
			}
			before := stored + d.delta[string(in)]
			d.delta[string(in)] += sign
			switch {
			case sign > 0 && before == 0:
				d.r.distinct++
			case sign < 0 && before == 1:
				d.r.distinct--
			}
		}
	}
	return nil
}

// shapeFn returns the fn of a rule shape (the JSON [fn, of, group_by]).
func shapeFn(shape string) AggregateFn {
	var parts []json.RawMessage
	if json.Unmarshal([]byte(shape), &parts) != nil || len(parts) == 0 {
		return ""
	}
	var fn string
	_ = json.Unmarshal(parts[0], &fn)
	return AggregateFn(fn)
}
