package runtime

import (
	"context"
	"testing"
)

// copierOp is an Operator that is a ValueCopier answering ok, counting
// the CopyValues calls.
type copierOp struct {
	ok    bool
	calls int
}

func (c *copierOp) CopyValues() bool { c.calls++; return c.ok }

func (c *copierOp) Open(context.Context) error                       { return nil }
func (c *copierOp) ProcessRecord(context.Context, int, Record) error { return nil }
func (c *copierOp) EndInput(context.Context) error                   { return nil }
func (c *copierOp) Close() error                                     { return nil }

// plainOp is an Operator that is no ValueCopier.
type plainOp struct{ copierOp }

func (plainOp) CopyValues() {} // not ValueCopier's method

// TestOutputLendsValues: an Output lends values only to one chained
// ValueCopier that agreed, with no writer or side writer besides; the
// first call decides and asks the copier once.
func TestOutputLendsValues(t *testing.T) {
	writer := func() *Writer { return NewWriter([]Channel{NewChannel(1)}, ForwardPartitioner{}) }
	cases := []struct {
		name string
		out  func(c *copierOp) *Output
		want bool
	}{
		{"one chained copier", func(c *copierOp) *Output {
			o := NewOutput(nil)
			o.AddChained(&ChainedOperator{Operator: c})
			return o
		}, true},
		{"copier refuses", func(c *copierOp) *Output {
			c.ok = false
			o := NewOutput(nil)
			o.AddChained(&ChainedOperator{Operator: c})
			return o
		}, false},
		{"not a copier", func(*copierOp) *Output {
			o := NewOutput(nil)
			o.AddChained(&ChainedOperator{Operator: &plainOp{}})
			return o
		}, false},
		{"and a writer", func(c *copierOp) *Output {
			o := NewOutput(nil, writer())
			o.AddChained(&ChainedOperator{Operator: c})
			return o
		}, false},
		{"and a side writer", func(c *copierOp) *Output {
			o := NewOutput(nil)
			o.AddSideWriter("late", writer())
			o.AddChained(&ChainedOperator{Operator: c})
			return o
		}, false},
		{"two chained", func(c *copierOp) *Output {
			o := NewOutput(nil)
			o.AddChained(&ChainedOperator{Operator: c})
			o.AddChained(&ChainedOperator{Operator: &copierOp{ok: true}})
			return o
		}, false},
		{"nothing downstream", func(*copierOp) *Output { return NewOutput(nil) }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &copierOp{ok: true}
			o := tc.out(c)
			for range 3 {
				if got := o.LendsValues(); got != tc.want {
					t.Fatalf("LendsValues() = %v, want %v", got, tc.want)
				}
			}
			if c.calls > 1 {
				t.Fatalf("CopyValues called %d times, want at most once", c.calls)
			}
		})
	}
}
