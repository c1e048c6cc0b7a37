package sink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// RecoverConfig configures RecoverTransactions.
type RecoverConfig struct {
	// Name is the sink's name.
	Name string
	// ClientOpts are the job's franz-go options.
	ClientOpts []kgo.Opt
	// Committables are every committable the restored checkpoint holds for
	// the sink (all old subtasks).
	Committables []Committable
	// TransactionalIDPrefix and PoolSize give the sink's transactional ids.
	TransactionalIDPrefix string
	PoolSize              int
	// Subtasks is the number of subtasks whose ids are fenced: the larger of
	// the old and the new parallelism, so ids of subtasks that no longer
	// exist after a downscale are fenced too.
	Subtasks int
	// TransactionTimeout is sent with the fencing InitProducerId requests.
	TransactionTimeout time.Duration
	// IgnoreLost logs a lost committable instead of failing.
	IgnoreLost bool
	// Metrics may be nil.
	Metrics *Metrics
	Logger  *slog.Logger
}

// RecoverTransactions runs before the sink subtasks start, as Flink's
// recoverAndCommit and abort-lingering-transactions do, in this order:
//  1. every restored committable is committed with a raw EndTxn carrying the
//     transactional id, producer id and epoch recorded at pre-commit (a
//     transaction that was already committed commits again harmlessly);
//  2. every transactional id the sink may have used (<prefix>-<subtask>-<slot>
//     for every subtask below Subtasks and slot below PoolSize) is fenced
//     with InitProducerId, which aborts its open transaction, so
//     read_committed readers are not held back by a previous run's
//     transactions.
//
// Committing first matters: an InitProducerId would abort the very
// transactions the checkpoint must commit. A committable that can no longer
// be committed returns a *LostOutputError unless IgnoreLost.
func RecoverTransactions(ctx context.Context, cfg RecoverConfig) error {
	cs := slices.Clone(cfg.Committables)
	slices.SortFunc(cs, func(a, b Committable) int { return int(a.CheckpointID - b.CheckpointID) })
	for _, c := range cs {
		if c.Records == 0 {
			continue
		}
		err := CommitRecovered(ctx, cfg.ClientOpts, c)
		var le *LostOutputError
		if errors.As(err, &le) {
			cfg.Metrics.transaction(cfg.Name, "lost")
			if !cfg.IgnoreLost {
				return err
			}
			cfg.Logger.Error("lost output ignored (ignore_lost_transactions)", "transactional_id", c.TransactionalID, "checkpoint_id", c.CheckpointID, "err", le.Err)
			continue
		}
		if err != nil {
			return fmt.Errorf("sink %s: commit restored transaction %s of checkpoint %d: %w", cfg.Name, c.TransactionalID, c.CheckpointID, err)
		}
		cfg.Metrics.transaction(cfg.Name, "committed")
		cfg.Logger.Info("committed restored transaction", "transactional_id", c.TransactionalID, "checkpoint_id", c.CheckpointID, "records", c.Records)
	}
	cl, err := kgo.NewClient(cfg.ClientOpts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	for sub := 0; sub < cfg.Subtasks; sub++ {
		for slot := 0; slot < cfg.PoolSize; slot++ {
			id := TransactionalID(cfg.TransactionalIDPrefix, sub, slot)
			if err := fence(ctx, cl, id, cfg.TransactionTimeout); err != nil {
				return fmt.Errorf("sink %s: fence transactional id %s: %w", cfg.Name, id, err)
			}
		}
	}
	cfg.Logger.Info("fenced the sink's transactional ids", "sink", cfg.Name, "subtasks", cfg.Subtasks, "pool_size", cfg.PoolSize)
	return nil
}

// CommitRecovered commits a committable whose producer is gone with a raw
// EndTxn request. It retries while the coordinator is busy and returns a
// *LostOutputError when the broker says the transaction cannot be committed.
func CommitRecovered(ctx context.Context, opts []kgo.Opt, c Committable) error {
	if c.Records == 0 {
		return nil
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	return retryTxn(ctx, func() error {
		req := kmsg.NewPtrEndTxnRequest()
		req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = c.TransactionalID, c.ProducerID, c.Epoch, true
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return classify(c, err)
		}
		return nil
	})
}

// fence sends InitProducerId for id: the broker aborts the id's open
// transaction and bumps its epoch.
func fence(ctx context.Context, cl *kgo.Client, id string, timeout time.Duration) error {
	return retryTxn(ctx, func() error {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID = &id
		req.TransactionTimeoutMillis = int32(timeout.Milliseconds())
		req.ProducerID, req.ProducerEpoch = -1, -1
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		return kerr.ErrorForCode(resp.ErrorCode)
	})
}

// retryTxn retries fn while it fails with a retriable broker error
// (coordinator loading or moving, concurrent transactions), backing off
// from 50 ms to 1 s, until ctx ends.
func retryTxn(ctx context.Context, fn func() error) error {
	backoff := 50 * time.Millisecond
	for {
		err := fn()
		if err == nil || !(kerr.IsRetriable(err) || errors.Is(err, kerr.ConcurrentTransactions)) {
			return err
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		}
		backoff = min(2*backoff, time.Second)
	}
}

// ErrTransactionTimeout is wrapped by CheckTransactionTimeout's error.
var ErrTransactionTimeout = errors.New("sink: transaction timeout does not fit")

// CheckTransactionTimeout reads the brokers' transaction.max.timeout.ms and
// refuses timeout when it exceeds it (the broker would refuse every
// transaction), naming both values.
func CheckTransactionTimeout(ctx context.Context, opts []kgo.Opt, sinkName string, timeout time.Duration) error {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	rcs, err := kadm.NewClient(cl).DescribeBrokerConfigs(ctx)
	if err != nil {
		return fmt.Errorf("sink %s: read the brokers' transaction.max.timeout.ms: %w", sinkName, err)
	}
	for _, rc := range rcs {
		for _, c := range rc.Configs {
			if c.Key != "transaction.max.timeout.ms" || c.Value == nil {
				continue
			}
			ms, err := strconv.ParseInt(*c.Value, 10, 64)
			if err != nil {
				continue
			}
			if max := time.Duration(ms) * time.Millisecond; timeout > max {
				return fmt.Errorf("%w: sink %s: transaction_timeout %v exceeds the broker's transaction.max.timeout.ms %v", ErrTransactionTimeout, sinkName, timeout, max)
			}
		}
	}
	return nil
}
