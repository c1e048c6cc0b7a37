package bench

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// pipe is the broker's limit: a plain franz-go consume-then-produce copy of
// a topic, one consumer client and one producer client. With txn every
// interval's records go into one Kafka transaction (what an exactly-once
// sink with that checkpoint interval costs the broker); without, each
// record counts once the broker acknowledged it.
type pipe struct {
	brokers  []string
	in, out  string
	txnID    string
	txn      bool
	interval time.Duration

	done atomic.Int64
	// wrote counts the records handed to the producer (into the open
	// transaction with txn), committed or not.
	wrote atomic.Int64
}

func (p *pipe) committed() int64              { return p.done.Load() }
func (p *pipe) written() int64                { return p.wrote.Load() }
func (p *pipe) checkpoints() []checkpointStat { return nil }

func (p *pipe) run(ctx context.Context) error {
	cons, err := kgo.NewClient(kgo.SeedBrokers(p.brokers...), kgo.ConsumeTopics(p.in),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return err
	}
	defer cons.Close()
	opts := []kgo.Opt{kgo.SeedBrokers(p.brokers...), kgo.DefaultProduceTopic(p.out), kgo.MaxBufferedRecords(100_000)}
	if p.txn {
		opts = append(opts, kgo.TransactionalID(p.txnID), kgo.TransactionTimeout(time.Minute))
	}
	prod, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer prod.Close()
	var failed atomic.Pointer[error]
	fail := func(err error) { failed.CompareAndSwap(nil, &err) }
	var open int64 // records in the open transaction
	next := time.Now().Add(p.interval)
	for {
		pctx, cancel := context.WithDeadline(ctx, next)
		fs := cons.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			if p.txn && open > 0 {
				actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				_ = prod.AbortBufferedRecords(actx)
				_ = prod.EndTransaction(actx, kgo.TryAbort)
				cancel()
			}
			return nil
		}
		if err := fs.Err0(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("bench: pipe: consume: %w", err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if p.txn && open == 0 {
				if err := prod.BeginTransaction(); err != nil {
					fail(err)
					return
				}
			}
			open++
			p.wrote.Add(1)
			prod.Produce(ctx, &kgo.Record{Key: r.Key, Value: r.Value, Timestamp: r.Timestamp, Headers: r.Headers}, func(_ *kgo.Record, err error) {
				if err != nil {
					fail(err)
				} else if !p.txn {
					p.done.Add(1)
				}
			})
		})
		if e := failed.Load(); e != nil {
			return fmt.Errorf("bench: pipe: produce: %w", *e)
		}
		if !p.txn {
			open = 0
			next = time.Now().Add(p.interval)
			continue
		}
		if time.Now().Before(next) {
			continue
		}
		next = time.Now().Add(p.interval)
		if open == 0 {
			continue
		}
		if err := prod.Flush(ctx); err != nil {
			return fmt.Errorf("bench: pipe: flush: %w", err)
		}
		if e := failed.Load(); e != nil {
			return fmt.Errorf("bench: pipe: produce: %w", *e)
		}
		if err := prod.EndTransaction(ctx, kgo.TryCommit); err != nil {
			return fmt.Errorf("bench: pipe: commit: %w", err)
		}
		p.done.Add(open)
		open = 0
	}
}
