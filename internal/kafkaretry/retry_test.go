package kafkaretry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestIsTransient(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: &net.AddrError{Err: "connection refused", Addr: "127.0.0.1:1"}}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"not leader", kerr.NotLeaderForPartition, true},
		{"coordinator loading", fmt.Errorf("end txn: %w", kerr.CoordinatorLoadInProgress), true},
		{"not coordinator", kerr.NotCoordinator, true},
		{"request timed out", kerr.RequestTimedOut, true},
		{"concurrent transactions", kerr.ConcurrentTransactions, true},
		{"dial", fmt.Errorf("unable to dial: %w", dial), true},
		{"connection refused", fmt.Errorf("x: %w", syscall.ECONNREFUSED), true},
		{"eof", io.EOF, true},
		{"attempt deadline", context.DeadlineExceeded, true},
		{"cancelled", context.Canceled, false},
		{"client closed", kgo.ErrClientClosed, false},
		{"fenced", kerr.ProducerFenced, false},
		{"invalid txn state", kerr.InvalidTxnState, false},
		{"other", errors.New("boom"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsTransient(tc.err); got != tc.want {
				t.Errorf("IsTransient(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestDo(t *testing.T) {
	for _, tc := range []struct {
		name       string
		errs       []error // returned by the attempts in turn; nil after them
		maxElapsed time.Duration
		wantErr    string
		wantCalls  int
		wantRetry  float64
	}{
		{"success", nil, 0, "", 1, 0},
		{"transient then success", []error{kerr.NotCoordinator, kerr.CoordinatorLoadInProgress}, 0, "", 3, 2},
		{"permanent", []error{kerr.ProducerFenced}, 0, kerr.ProducerFenced.Error(), 1, 0},
		{"transient then permanent", []error{kerr.NotCoordinator, kerr.InvalidTxnState}, 0, kerr.InvalidTxnState.Error(), 2, 1},
		{"bounded", []error{kerr.NotCoordinator, kerr.NotCoordinator, kerr.NotCoordinator, kerr.NotCoordinator}, time.Nanosecond,
			"commit: still failing after retrying for 1ns: " + kerr.NotCoordinator.Error(), 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := NewMetrics(prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			calls := 0
			err = Do(context.Background(), Policy{Operation: OpCommit, Initial: time.Microsecond, Max: time.Microsecond, MaxElapsed: tc.maxElapsed, Metrics: m},
				func(context.Context) error {
					calls++
					if calls <= len(tc.errs) {
						return tc.errs[calls-1]
					}
					return nil
				})
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.wantErr || calls != tc.wantCalls {
				t.Errorf("Do: err %q after %d calls, want %q after %d", got, calls, tc.wantErr, tc.wantCalls)
			}
			if v := counter(t, m.retries.WithLabelValues(OpCommit)); v != tc.wantRetry {
				t.Errorf("retries = %v, want %v", v, tc.wantRetry)
			}
		})
	}
}

func TestDoStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := Do(ctx, Policy{Operation: OpFetch, Initial: time.Hour}, func(context.Context) error {
		calls++
		cancel()
		return kerr.NotLeaderForPartition
	})
	if !errors.Is(err, kerr.NotLeaderForPartition) || calls != 1 {
		t.Errorf("Do after cancel: %v after %d calls, want the last error after 1", err, calls)
	}
}

func TestConnectHook(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	h := m.Hook().(interface {
		OnBrokerConnect(kgo.BrokerMetadata, time.Duration, net.Conn, error)
	})
	h.OnBrokerConnect(kgo.BrokerMetadata{Host: "127.0.0.1", Port: 9092}, 0, nil, syscall.ECONNREFUSED)
	h.OnBrokerConnect(kgo.BrokerMetadata{Host: "127.0.0.1", Port: 9092}, 0, nil, nil)
	h.OnBrokerConnect(kgo.BrokerMetadata{Host: "127.0.0.1", Port: 9093}, 0, nil, nil)
	if v := counter(t, m.connectFails.WithLabelValues("127.0.0.1:9093")); v != 0 {
		t.Errorf("connect errors of a broker that answered = %v, want 0", v)
	}
	if v := counter(t, m.connectFails.WithLabelValues("127.0.0.1:9092")); v != 1 {
		t.Errorf("connect errors = %v, want 1", v)
	}
}

func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
