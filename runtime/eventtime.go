package runtime

import (
	"fmt"
	"time"
)

// The bounds of a record's event time, in milliseconds since the Unix
// epoch (UTC), both inclusive: a source makes a record whose event time is
// outside them a bad record with reason ReasonEventTimeOutOfRange (its
// on_error policy), so that it never reaches an event-time operator nor
// moves the watermark.
//
// MinEventTime is the epoch itself: an event time is epoch milliseconds, so
// a negative one is a mistake (Kafka's producers refuse negative
// timestamps; -1 is Kafka's "no timestamp"). MaxEventTime is the last
// millisecond of 9999-12-31 (253402300799999), the largest time RFC 3339
// can write. It keeps every millisecond value of a real date and refuses a
// microsecond value of any date after 1978-01-12 (today's are about
// 1.7e15, 7 times the bound) and a nanosecond value of any date after
// 1970-01-03 (today's are about 1.7e18), as well as the int64 extremes:
// such a record would otherwise move the watermark tens of thousands or
// millions of years ahead, fire every open window at once and make every
// later record late. The bound also leaves a window end (start + size, size
// far below 7,000 years) and the watermark arithmetic far from int64
// overflow.
const (
	MinEventTime int64 = 0
	MaxEventTime int64 = 253402300799999
)

// CheckEventTime returns a *RecordError with reason
// ReasonEventTimeOutOfRange when ms (milliseconds since the epoch) is
// outside [MinEventTime, MaxEventTime], and nil otherwise. what names the
// time's origin for the detail ("timestamp expression \"ts\"", "the Kafka
// timestamp").
func CheckEventTime(ms int64, what string) *RecordError {
	if ms >= MinEventTime && ms <= MaxEventTime {
		return nil
	}
	return EventTimeOutOfRange(what, fmt.Sprintf("%d ms", ms))
}

// EventTimeOutOfRange returns the *RecordError (reason
// ReasonEventTimeOutOfRange) of an event time outside [MinEventTime,
// MaxEventTime]: what gave got (the value as read, with its unit).
func EventTimeOutOfRange(what, got string) *RecordError {
	return &RecordError{Reason: ReasonEventTimeOutOfRange, Detail: fmt.Sprintf(
		"%s gave %s, outside [%d, %d] ms since the epoch (1970-01-01 to 9999-12-31 UTC): a time in µs or ns given as ms?",
		what, got, MinEventTime, MaxEventTime)}
}

// CheckEventTimeAhead returns a *RecordError with reason
// ReasonEventTimeOutOfRange when ms is more than maxAhead ahead of now
// (processing time), and nil otherwise or when maxAhead is 0 (off).
func CheckEventTimeAhead(ms int64, now time.Time, maxAhead time.Duration, what string) *RecordError {
	if maxAhead <= 0 {
		return nil
	}
	limit := now.UnixMilli() + maxAhead.Milliseconds()
	if ms <= limit {
		return nil
	}
	return &RecordError{Reason: ReasonEventTimeOutOfRange, Detail: fmt.Sprintf(
		"%s gave %d ms (%s), %v ahead of the wall clock %s, more than timestamp.max_ahead %v", what, ms,
		time.UnixMilli(ms).UTC().Format(time.RFC3339Nano), time.Duration(ms-now.UnixMilli())*time.Millisecond,
		now.UTC().Format(time.RFC3339Nano), maxAhead)}
}
