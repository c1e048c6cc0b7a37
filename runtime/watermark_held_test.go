package runtime

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// holdStage is a stage that holds every watermark back
// (ErrWatermarkHeld) and forwards the latest held one itself, on its
// Output, after it emitted its next record (as the aggregate's mini_batch
// with allow_latency does at a batch's end).
type holdStage struct {
	*stage
	held    time.Time
	holding bool
}

func (h *holdStage) ProcessWatermark(_ context.Context, wm time.Time) error {
	h.wms = append(h.wms, wm.UnixMilli())
	h.held, h.holding = wm, true
	return ErrWatermarkHeld
}

func (h *holdStage) ProcessRecord(ctx context.Context, input int, rec Record) error {
	if err := h.stage.ProcessRecord(ctx, input, rec); err != nil {
		return err
	}
	if !h.holding {
		return nil
	}
	h.holding = false
	return h.out.Broadcast(ctx, Element{Kind: KindWatermark, Watermark: h.held})
}

// TestWatermarkHeldIsNotForwarded: a watermark whose ProcessWatermark
// returns ErrWatermarkHeld is not forwarded by the task (an operator at
// the head of the chain) nor by the chain (a chained operator), and what
// the holder forwards itself later arrives downstream after the record it
// emitted first, once; the operators after the holder see the watermark
// only then.
func TestWatermarkHeldIsNotForwarded(t *testing.T) {
	for _, holder := range []string{"a", "b"} {
		t.Run("holder "+holder, func(t *testing.T) {
			in, down := NewChannel(64), NewChannel(64)
			a, b, c := &stage{tag: "a"}, &stage{tag: "b"}, &stage{tag: "c"}
			task := chainOf(in, down, a, b, c, &idResponder{}, nil, nil, nil)
			h := &holdStage{stage: map[string]*stage{"a": a, "b": b}[holder]}
			if holder == "a" {
				task.op = h
			} else {
				task.chain[0].Operator = h
			}
			in <- rec("1")
			in <- Element{Kind: KindWatermark, Watermark: time.UnixMilli(5)}
			in <- rec("2")
			in <- endOfInput()
			if err := task.Run(context.Background(), nil); err != nil {
				t.Fatal(err)
			}
			var got []string
			for el := range drain(down) {
				switch el.Kind {
				case KindRecords:
					for _, r := range el.Batch.Records {
						got = append(got, string(r.Value))
					}
				case KindWatermark:
					got = append(got, fmt.Sprintf("wm %d", el.Watermark.UnixMilli()))
				default:
					got = append(got, el.Kind.String())
				}
			}
			if want := []string{"1abc", "2abc", "wm 5", "end-of-input"}; !slices.Equal(got, want) {
				t.Errorf("downstream got %v, want %v", got, want)
			}
			if want := []int64{5}; !slices.Equal(c.wms, want) {
				t.Errorf("c saw watermarks %v, want %v", c.wms, want)
			}
		})
	}
}
