// Package kafkaretry retries Kafka operations that fail with transient
// broker errors (a broker that cannot be dialled or answers too late, a
// partition leader or a coordinator that moved or is loading), with
// exponential back-off for a bounded time, counting and logging each retry.
// franz-go retries much by itself (produce batches, fetches, most requests
// within kgo.RetryTimeout); this package covers what it returns to the
// caller: a commit whose EndTxn failed, a request whose retries ran out.
package kafkaretry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// IsTransient reports whether err is worth retrying: a retriable Kafka
// error code (kerr.IsRetriable: not leader, coordinator not available or
// loading, request timed out, ...), CONCURRENT_TRANSACTIONS, a network error
// (dial failures, timeouts, connections reset or closed: net.Error, EOF,
// franz-go's kgo.IsRetryableBrokerErr), or a deadline that ended one attempt.
// Context cancellation, a closed client and every other error are not.
func IsTransient(err error) bool {
	switch {
	case err == nil, errors.Is(err, context.Canceled), errors.Is(err, kgo.ErrClientClosed):
		return false
	case kerr.IsRetriable(err), errors.Is(err, kerr.ConcurrentTransactions), errors.Is(err, kerr.RequestTimedOut),
		errors.Is(err, kerr.CoordinatorLoadInProgress), errors.Is(err, kerr.CoordinatorNotAvailable), errors.Is(err, kerr.NotCoordinator):
		return true
	case kgo.IsRetryableBrokerErr(err), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, context.DeadlineExceeded):
		return true
	}
	var ne net.Error
	return errors.As(err, &ne)
}

// Metrics count retries and failed broker connections.
type Metrics struct {
	retries      *prometheus.CounterVec
	connectFails *prometheus.CounterVec
}

// NewMetrics registers with reg:
//
//	kstreamd_kafka_retries_total{operation}          Kafka operations retried after a transient error (operation: commit, fetch)
//	kstreamd_kafka_connect_errors_total{broker}      failed connection attempts to a broker (host:port), from every client of the job; a broker's series appears with its first connection
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kstreamd_kafka_retries_total",
			Help: "Kafka operations retried after a transient broker error, by operation (commit, fetch).",
		}, []string{"operation"}),
		connectFails: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kstreamd_kafka_connect_errors_total",
			Help: "Failed connection attempts to a Kafka broker (host:port) by the job's clients.",
		}, []string{"broker"}),
	}
	for _, c := range []prometheus.Collector{m.retries, m.connectFails} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, op := range Operations {
		m.retries.WithLabelValues(op)
	}
	return m, nil
}

// Operations are the values of kstreamd_kafka_retries_total's operation label.
var Operations = []string{OpCommit, OpFetch}

// Operation label values.
const (
	OpCommit = "commit" // an exactly-once sink's commit of a pre-committed transaction
	OpFetch  = "fetch"  // a source's fetch
)

// Retried counts one retry of operation; m may be nil.
func (m *Metrics) Retried(operation string) {
	if m != nil {
		m.retries.WithLabelValues(operation).Inc()
	}
}

// Hook returns the franz-go hook that counts failed connections per
// broker; add it to every client with kgo.WithHooks. m may be nil (then
// the hook counts nothing).
func (m *Metrics) Hook() kgo.Hook { return connectHook{m} }

type connectHook struct{ m *Metrics }

// OnBrokerConnect implements kgo.HookBrokerConnect.
func (h connectHook) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if h.m == nil {
		return
	}
	// A successful connection creates the broker's series at 0, so that
	// dashboards see every broker before its first failure.
	c := h.m.connectFails.WithLabelValues(net.JoinHostPort(meta.Host, strconv.Itoa(int(meta.Port))))
	if err != nil {
		c.Inc()
	}
}

// Policy is how Do retries.
type Policy struct {
	// Operation names what is retried: the metric label and the log's
	// operation attribute.
	Operation string
	// Initial and Max bound the back-off between attempts, doubling from
	// Initial; 0 means 100ms and 5s.
	Initial, Max time.Duration
	// MaxElapsed bounds the time spent retrying, from the first failure;
	// 0 means until ctx ends.
	MaxElapsed time.Duration
	// Metrics may be nil; Logger may be nil.
	Metrics *Metrics
	Logger  *slog.Logger
}

// Do calls fn until it returns nil or an error that is not IsTransient
// (returned as it is), ctx ends, or MaxElapsed passed since the first
// failure (then the last error, wrapped with how long it was retried).
// Each retry is counted and logged at Warn with the attempt number, the
// back-off and the error (which names the broker when franz-go knows it).
// attrs are added to the log lines.
func Do(ctx context.Context, p Policy, fn func(ctx context.Context) error, attrs ...any) error {
	initial, maxB := p.Initial, p.Max
	if initial <= 0 {
		initial = 100 * time.Millisecond
	}
	if maxB <= 0 {
		maxB = 5 * time.Second
	}
	backoff := initial
	var first time.Time
	for attempt := 1; ; attempt++ {
		err := fn(ctx)
		if err == nil || !IsTransient(err) {
			return err
		}
		if ctx.Err() != nil {
			return err
		}
		if first.IsZero() {
			first = time.Now()
		}
		if p.MaxElapsed > 0 && time.Since(first) >= p.MaxElapsed {
			return fmt.Errorf("%s: still failing after retrying for %v: %w", p.Operation, p.MaxElapsed, err)
		}
		p.Metrics.Retried(p.Operation)
		if p.Logger != nil {
			p.Logger.Warn("kafka operation failed with a transient error; retrying",
				append([]any{"operation", p.Operation, "attempt", attempt, "backoff", backoff, "err", err}, attrs...)...)
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
		backoff = min(2*backoff, maxB)
	}
}
