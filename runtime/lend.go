package runtime

// ValueCopier is implemented by an Operator, a sink, that can take
// records whose Value its caller writes again once ProcessRecord returned
// (Flink's object reuse between chained operators): CopyValues switches
// the operator to copying every record's Value before ProcessRecord
// returns, if it keeps it at all, and reports whether it did; an operator
// that cannot (it encodes values, or batches them) returns false and
// stays as it was. Once it returned true the operator never hands such a
// value to anything that keeps it: its ProcessRecord returns no
// *RecordError (which would pass the record to a bad-record policy, and
// perhaps a dead-letter writer).
type ValueCopier interface {
	CopyValues() bool
}

// LendsValues reports whether the operator emitting to o may emit
// records whose Value it writes again after Emit returns (lent values,
// as Flink's object reuse lends records to chained operators): true when
// o has no writer (no channel keeps a record), no side output, and one
// chained operator, a ValueCopier whose CopyValues returned true. The
// first call decides, and asks the chained operator: call it once the
// job is wired (a task's first record, not Open), and add nothing to o
// after it. Lent values are only for records Emit takes; records given
// to EmitSide are kept by their writers.
func (o *Output) LendsValues() bool {
	if o.lends == 0 {
		o.lends = lendsNo
		if len(o.writers) == 0 && len(o.side) == 0 && len(o.chained) == 1 {
			if c, ok := o.chained[0].Operator.(ValueCopier); ok && c.CopyValues() {
				o.lends = lendsYes
			}
		}
	}
	return o.lends == lendsYes
}

// Output.lends: unknown (0) until LendsValues decides.
const (
	lendsYes int8 = 1 + iota
	lendsNo
)
