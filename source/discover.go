package source

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// ErrUnknownTopic is returned by Discover when the broker answers that the
// topic does not exist.
var ErrUnknownTopic = errors.New("source: topic does not exist")

// Discover returns the number of partitions of topic. A broker that cannot be
// reached is retried with exponential back-off (100 ms doubling up to 5 s)
// and reported at Warn until ctx ends; a topic that does not exist returns an
// error wrapping ErrUnknownTopic.
func Discover(ctx context.Context, adm *kadm.Client, logger *slog.Logger, topic string) (int32, error) {
	var n int32
	err := retry(ctx, logger, "discover partitions", func(ctx context.Context) error {
		details, err := adm.ListTopics(ctx, topic)
		if err != nil {
			return err
		}
		d, ok := details[topic]
		if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			return permanent{fmt.Errorf("%w: %q", ErrUnknownTopic, topic)}
		}
		if d.Err != nil {
			return d.Err
		}
		n = int32(len(d.Partitions))
		return nil
	})
	return n, err
}

// DiscoverTopics returns the partition count of each topic pattern
// (CompileTopicPattern) matches (MatchTopics), none being no error,
// retrying while the brokers cannot be reached as Discover does.
func DiscoverTopics(ctx context.Context, adm *kadm.Client, logger *slog.Logger, pattern *regexp.Regexp) (map[string]int32, error) {
	out := map[string]int32{}
	err := retry(ctx, logger, "discover topics", func(ctx context.Context) error {
		details, err := adm.ListTopics(ctx)
		if err != nil {
			return err
		}
		clear(out)
		for _, t := range MatchTopics(pattern, details.Names()) {
			if d := details[t]; d.Err == nil {
				out[t] = int32(len(d.Partitions))
			}
		}
		return nil
	})
	return out, err
}

// permanent marks an error retry must not retry.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// attemptTimeout bounds one attempt of retry: franz-go retries a request
// internally for much longer, and a broker that is down must be reported
// while the retrying goes on.
const attemptTimeout = 10 * time.Second

// retry calls fn until it succeeds, returns a permanent error, or ctx ends,
// giving each attempt attemptTimeout, backing off 100 ms doubling to 5 s and
// logging each failure at Warn.
func retry(ctx context.Context, logger *slog.Logger, what string, fn func(ctx context.Context) error) error {
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		err := fn(actx)
		cancel()
		if err == nil {
			return nil
		}
		var p permanent
		if errors.As(err, &p) {
			return p.error
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		logger.Warn(what+" failed; retrying", "attempt", attempt, "backoff", backoff, "err", err)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return ctx.Err()
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}
