package filesink

import (
	"fmt"
	"strings"
	"time"

	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/runtime"
)

// BucketAssigner chooses the bucket of a record: a relative directory of
// the output, '/'-separated, "" for the output's root (Flink's
// BucketAssigner). Called on the sink subtask's goroutine.
type BucketAssigner interface {
	// BucketID returns rec's bucket; an error is a *runtime.RecordError.
	BucketID(rec runtime.Record, now time.Time) (string, error)
}

// BasePathBucketAssigner puts every record in the output's root (Flink's
// BasePathBucketAssigner).
type BasePathBucketAssigner struct{}

// BucketID implements BucketAssigner: "".
func (BasePathBucketAssigner) BucketID(runtime.Record, time.Time) (string, error) { return "", nil }

// DateTimeBucketAssigner buckets by a time formatted with a Go layout
// (Flink's DateTimeBucketAssigner, whose default "yyyy-MM-dd--HH" is the
// layout "2006-01-02--15").
type DateTimeBucketAssigner struct {
	// Layout is the time.Format layout; it may hold '/' to nest
	// directories ("2006/01/02").
	Layout string
	// Location is the time zone the time is formatted in; nil means UTC.
	Location *time.Location
	// ProcessingTime buckets by the wall clock when the sink writes the
	// record instead of the record's timestamp (event time, the default:
	// a record written again after a restore lands in the same bucket).
	ProcessingTime bool
}

// BucketID implements BucketAssigner.
func (a DateTimeBucketAssigner) BucketID(rec runtime.Record, now time.Time) (string, error) {
	t := rec.Timestamp
	if a.ProcessingTime {
		t = now
	}
	loc := a.Location
	if loc == nil {
		loc = time.UTC
	}
	return checkBucket(t.In(loc).Format(a.Layout))
}

// ExpressionBucketAssigner buckets by the value of an expression over the
// record (the expression language of filter and map): a string, a number
// or a boolean, used as its text.
type ExpressionBucketAssigner struct {
	prog *expression.Program
	env  expression.Env
	in   expression.Input
	hdrs []expression.Header
}

// NewExpressionBucketAssigner compiles src; a compile error is an
// *expression.CompileError.
func NewExpressionBucketAssigner(src string) (*ExpressionBucketAssigner, error) {
	p, err := expression.Compile(src)
	if err != nil {
		return nil, err
	}
	return &ExpressionBucketAssigner{prog: p}, nil
}

// BucketID implements BucketAssigner. An expression that fails, yields
// null, a list or a map, or a text that is no safe relative path, is a
// *runtime.RecordError (reason eval_error).
func (a *ExpressionBucketAssigner) BucketID(rec runtime.Record, _ time.Time) (string, error) {
	a.in = expression.Input{Key: rec.Key, Timestamp: rec.Timestamp}
	if rec.Format == runtime.FormatText {
		a.in.Value = string(rec.Value)
	} else {
		a.in.JSON = rec.Value
	}
	a.hdrs = a.hdrs[:0]
	for _, h := range rec.Headers {
		a.hdrs = append(a.hdrs, expression.Header{Key: h.Key, Value: h.Value})
	}
	a.in.Headers = a.hdrs
	a.env.Reset(&a.in)
	v, err := a.prog.Eval(&a.env)
	if err != nil {
		return "", &runtime.RecordError{Reason: runtime.ReasonEvalError, Detail: "file sink bucket: " + err.Error()}
	}
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case bool, int64, uint64, float64, int:
		s = fmt.Sprint(x)
	default:
		return "", &runtime.RecordError{Reason: runtime.ReasonEvalError,
			Detail: fmt.Sprintf("file sink bucket: %s yielded %s, not a string or number", a.prog.Source(), expression.TypeName(v))}
	}
	id, err := checkBucket(s)
	if err != nil {
		return "", &runtime.RecordError{Reason: runtime.ReasonEvalError, Detail: fmt.Sprintf("file sink bucket: %s: %v", a.prog.Source(), err)}
	}
	return id, nil
}

// checkBucket refuses a bucket id that is no safe relative path: empty
// segments, "." or "..", a segment starting with '.' (readers skip those
// names), a backslash or a NUL.
func checkBucket(id string) (string, error) {
	if id == "" {
		return "", nil
	}
	for _, seg := range strings.Split(id, "/") {
		if seg == "" || strings.HasPrefix(seg, ".") || strings.ContainsAny(seg, "\\\x00") {
			return "", fmt.Errorf("bucket %q is not a relative path of plain names (no empty, hidden, . or .. segments)", id)
		}
	}
	return id, nil
}
