package state

import "time"

// Clock is the processing-time source of a backend: TTL timestamps and
// expiry checks use Now at millisecond resolution. Implementations must be
// safe for concurrent use (async state reads may call Now on other
// goroutines). Tests inject a fake; BackendConfig.Clock nil means the wall
// clock.
type Clock interface {
	Now() time.Time
}

// wallClock is the default Clock, time.Now.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }
