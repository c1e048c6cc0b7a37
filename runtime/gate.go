package runtime

import (
	"context"
	"reflect"
)

// InputChannel is one channel of an InputGate together with the logical
// input it belongs to (0 for the main input; a two-input operator such as a
// keyed broadcast operator uses 1 for its broadcast side).
type InputChannel struct {
	Ch    Channel
	Input int
}

// BlockReason says why a channel is blocked; a channel is read only when no
// reason holds. The reasons are independent bits.
type BlockReason uint8

const (
	// BlockAlignment holds a channel that delivered barrier n until every
	// channel did (aligned checkpoints).
	BlockAlignment BlockReason = 1 << iota
	// BlockBootstrap holds the keyed input until the broadcast input caught
	// up.
	BlockBootstrap
)

// InputGate reads the input channels of one subtask (Flink's InputGate).
// Single channels can be blocked for one or more reasons: a blocked channel
// is not read (its sender is back-pressured) until every reason is lifted. A channel that delivered end-of-input
// is finished and never read again. Not safe for concurrent use: it belongs
// to the subtask goroutine.
type InputGate struct {
	chans    []InputChannel
	blocked  []BlockReason
	finished []bool
	open     int // channels not finished
	next     int // round-robin start of the fast path
	cases    []reflect.SelectCase
	caseIdx  []int
}

// NewInputGate returns a gate over chans, none blocked.
func NewInputGate(chans []InputChannel) *InputGate {
	return &InputGate{
		chans:    chans,
		blocked:  make([]BlockReason, len(chans)),
		finished: make([]bool, len(chans)),
		open:     len(chans),
	}
}

// NumChannels returns the number of channels, finished ones included.
func (g *InputGate) NumChannels() int { return len(g.chans) }

// Channel returns channel i.
func (g *InputGate) Channel(i int) InputChannel { return g.chans[i] }

// Block stops reading channel i for reason r until Unblock(i, r).
func (g *InputGate) Block(i int, r BlockReason) { g.blocked[i] |= r }

// Unblock lifts reason r from channel i; it is read again once no reason
// holds.
func (g *InputGate) Unblock(i int, r BlockReason) { g.blocked[i] &^= r }

// BlockInput blocks every channel of logical input in for reason r.
func (g *InputGate) BlockInput(in int, r BlockReason) {
	for i, c := range g.chans {
		if c.Input == in {
			g.blocked[i] |= r
		}
	}
}

// UnblockAll lifts reason r from every channel.
func (g *InputGate) UnblockAll(r BlockReason) {
	for i := range g.blocked {
		g.blocked[i] &^= r
	}
}

// IsFinished reports whether channel i delivered end-of-input.
func (g *InputGate) IsFinished(i int) bool { return g.finished[i] }

// Finished reports whether every channel delivered end-of-input.
func (g *InputGate) Finished() bool { return g.open == 0 }

// Next returns the next element and the index of the channel it came from.
// It blocks until an unblocked, unfinished channel has an element, wake is
// signalled (then it returns ok == false and a nil error), or ctx ends (then
// it returns ctx.Err()). An end-of-input element marks its channel finished
// before it is returned. Next on a finished gate returns ok == false at once.
func (g *InputGate) Next(ctx context.Context, wake <-chan struct{}) (el Element, ch int, ok bool, err error) {
	if g.open == 0 {
		return Element{}, -1, false, nil
	}
	if el, ch, ok := g.TryNext(); ok {
		return el, ch, true, nil
	}
	// Slow path: block on every readable channel, wake and ctx.
	g.cases = g.cases[:0]
	g.caseIdx = g.caseIdx[:0]
	for i, c := range g.chans {
		if g.blocked[i] != 0 || g.finished[i] {
			continue
		}
		g.cases = append(g.cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(c.Ch)})
		g.caseIdx = append(g.caseIdx, i)
	}
	g.cases = append(g.cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())})
	if wake != nil {
		g.cases = append(g.cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(wake)})
	}
	chosen, v, _ := reflect.Select(g.cases)
	switch {
	case chosen < len(g.caseIdx):
		i := g.caseIdx[chosen]
		g.next = i + 1
		return g.got(v.Interface().(Element), i), i, true, nil
	case chosen == len(g.caseIdx):
		return Element{}, -1, false, ctx.Err()
	default:
		return Element{}, -1, false, nil
	}
}

// TryNext is Next without blocking: it returns the next element of an
// unblocked, unfinished channel that has one (round robin), or ok == false
// at once when none has.
func (g *InputGate) TryNext() (el Element, ch int, ok bool) {
	n := len(g.chans)
	for k := 0; k < n; k++ {
		i := (g.next + k) % n
		if g.blocked[i] != 0 || g.finished[i] {
			continue
		}
		select {
		case el := <-g.chans[i].Ch:
			g.next = i + 1
			return g.got(el, i), i, true
		default:
		}
	}
	return Element{}, -1, false
}

func (g *InputGate) got(el Element, i int) Element {
	if el.Kind == KindEndOfInput && !g.finished[i] {
		g.finished[i] = true
		g.open--
	}
	return el
}
