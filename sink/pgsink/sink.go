package pgsink

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/runtime"
)

// Type is the sink type's name in the connector registry and in its
// committable envelopes.
const Type = "postgres"

// GIDPrefix is the start of the transaction identifiers (gids) of the
// prepared transactions of the sink of job whose uid is uid (its name
// unless it sets one, so that a sink renamed with its uid kept finds its
// transactions): "<job>:<uid>-"; a subtask's gid for checkpoint epoch id
// is "<job>:<uid>-<subtask>-<id>". A job name holds no ':', so the gids
// of two jobs never share a prefix (with '-' there, job "a" with sink
// "b-c" and job "a-b" with sink "c" would roll back each other's
// transactions); within a job the "<subtask>-<id>" suffix tells a sink
// from one whose uid extends its own.
func GIDPrefix(job, uid string) string { return job + ":" + uid + "-" }

// gidSuffix matches what follows GIDPrefix in a gid of the sink.
var gidSuffix = regexp.MustCompile(`^[0-9]+-[0-9]+$`)

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// undefinedObject reports whether err is SQLSTATE 42704: COMMIT PREPARED
// or ROLLBACK PREPARED of a gid no prepared transaction has (committed or
// rolled back before).
func undefinedObject(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "42704"
}

// Committer is one subtask of an exactly-once postgres sink, the
// connector.Committer a connector.TwoPhaseCommitSink drives (Flink's JDBC
// exactly-once sink, JdbcXaSinkFunction, with PostgreSQL's two-phase
// commit): one database transaction per checkpoint epoch, begun with the
// epoch's first write, prepared at the barrier (PREPARE TRANSACTION with
// the gid "<job>:<uid>-<subtask>-<checkpoint>", the committable) and
// committed (COMMIT PREPARED, on a second connection: the first may have
// the next epoch's transaction open) when the checkpoint completes.
//
// While an earlier epoch's transaction is prepared but not committed,
// writes are buffered instead of sent (beyond batch_size): the next
// epoch's upsert of a row the prepared transaction holds would wait for
// its commit, which runs on this same goroutine.
type Committer struct {
	w          *writer
	commitConn *pgx.Conn
	prefix     string // "<job>-<sink>-<subtask>-"
	inTx       bool
	prepared   int            // pre-committed and not yet committed
	rows       int            // changes written in the open transaction
	gidRows    map[string]int // changes of each prepared transaction, counted at commit
	out        prometheus.Counter
}

// Open connects the subtask (with retries while the database is
// unreachable) and checks the table.
func (c *Committer) open(ctx context.Context) error {
	_, err := c.w.connected(ctx)
	return err
}

// BeginTransaction implements connector.Committer: the transaction begins
// with the epoch's first write.
func (c *Committer) BeginTransaction(context.Context) error { return nil }

// Write implements connector.Committer.
func (c *Committer) Write(ctx context.Context, rec runtime.Record) error {
	if err := c.w.add(&rec); err != nil {
		return err
	}
	if c.w.buffered() >= c.w.p.BatchSize && c.prepared == 0 {
		return c.flush(ctx)
	}
	return nil
}

// flush writes the batch in the epoch's transaction, beginning it first.
// A connection lost inside the transaction loses the epoch's writes: the
// error fails the subtask, which restarts from the checkpoint.
func (c *Committer) flush(ctx context.Context) error {
	if !c.inTx {
		conn, err := c.w.connected(ctx)
		if err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
			c.w.close()
			return fmt.Errorf("pgsink: sink %s: begin: %w", c.w.name, err)
		}
		c.inTx = true
	}
	n := c.w.buffered()
	if err := c.w.flush(ctx, c.w.conn); err != nil {
		return err
	}
	c.rows += n
	return nil
}

// PreCommit implements connector.Committer: it writes the rest of the
// batch and prepares the epoch's transaction; nil for an epoch without
// writes.
func (c *Committer) PreCommit(ctx context.Context, checkpointID int64) ([]byte, error) {
	if c.w.buffered() > 0 {
		if err := c.flush(ctx); err != nil {
			return nil, err
		}
	}
	if !c.inTx {
		return nil, nil
	}
	gid := fmt.Sprintf("%s%d", c.prefix, checkpointID)
	if _, err := c.w.conn.Exec(ctx, "PREPARE TRANSACTION "+quoteLiteral(gid)); err != nil {
		return nil, fmt.Errorf("pgsink: sink %s: prepare transaction %s: %w", c.w.name, gid, err)
	}
	c.inTx = false
	c.prepared++
	c.gidRows[gid], c.rows = c.rows, 0
	return []byte(gid), nil
}

// Commit implements connector.Committer: COMMIT PREPARED, retried while
// the database is unreachable; a gid no longer prepared was committed
// before (by this subtask before a failure, or by Recover).
func (c *Committer) Commit(ctx context.Context, _ int64, committable []byte) error {
	w := c.w
	err := retry(ctx, w.p, w.metrics, w.name, w.logger, "commit prepared", func() error {
		if c.commitConn == nil || c.commitConn.IsClosed() {
			conn, err := pgx.ConnectConfig(ctx, w.connCfg)
			if err != nil {
				return err
			}
			c.commitConn = conn
		}
		return commitPrepared(ctx, c.commitConn, string(committable))
	})
	if err != nil {
		return err
	}
	c.prepared = max(0, c.prepared-1)
	if c.out != nil {
		c.out.Add(float64(c.gidRows[string(committable)]))
	}
	delete(c.gidRows, string(committable))
	if c.prepared == 0 && w.buffered() >= w.p.BatchSize {
		return c.flush(ctx) // what was held back while the earlier epoch was prepared
	}
	return nil
}

// commitPrepared commits the prepared transaction gid; one no longer
// prepared counts as committed.
func commitPrepared(ctx context.Context, conn *pgx.Conn, gid string) error {
	_, err := conn.Exec(ctx, "COMMIT PREPARED "+quoteLiteral(gid))
	if undefinedObject(err) {
		return nil
	}
	return err
}

// AbortOpen implements connector.Committer: it rolls the open transaction
// back and drops the batch.
func (c *Committer) AbortOpen(ctx context.Context) error {
	c.w.reset()
	if !c.inTx {
		return nil
	}
	c.inTx, c.rows = false, 0
	if _, err := c.w.conn.Exec(ctx, "ROLLBACK"); err != nil {
		c.w.close()
	}
	return nil
}

// Close implements connector.Committer; prepared transactions stay for
// the next start's Recover.
func (c *Committer) Close() error {
	c.w.close()
	if c.commitConn != nil {
		c.commitConn.Close(context.Background())
		c.commitConn = nil
	}
	return nil
}

// openSink is a TwoPhaseCommitSink that connects at Open.
type openSink struct {
	*connector.TwoPhaseCommitSink
	c *Committer
}

// Open implements runtime.Operator: connect (retrying while the database
// is unreachable), then open the first transaction.
func (s *openSink) Open(ctx context.Context) error {
	if err := s.c.open(ctx); err != nil {
		return err
	}
	return s.TwoPhaseCommitSink.Open(ctx)
}

// Close implements runtime.Operator.
func (s *openSink) Close() error { return s.TwoPhaseCommitSink.Close() }

// AtLeastOnceSink is one subtask of an at-least-once postgres sink: each
// batch is written in its own transaction, retried (reconnecting) while
// the database is unreachable, and every barrier and the end of input
// write the batch before the checkpoint is acknowledged. After a failure
// the records since the last checkpoint are written again: idempotent in
// mode upsert, duplicated rows in mode insert. It implements
// runtime.Operator and runtime.Snapshotter.
type AtLeastOnceSink struct {
	w   *writer
	out prometheus.Counter // may be nil
}

// Open implements runtime.Operator: it connects and checks the table.
func (s *AtLeastOnceSink) Open(ctx context.Context) error {
	_, err := s.w.connected(ctx)
	return err
}

// ProcessRecord implements runtime.Operator.
func (s *AtLeastOnceSink) ProcessRecord(ctx context.Context, _ int, rec runtime.Record) error {
	if err := s.w.add(&rec); err != nil {
		return err
	}
	if s.w.buffered() >= s.w.p.BatchSize {
		return s.flush(ctx)
	}
	return nil
}

// flush writes the batch in one transaction, retried from the start
// while the database is unreachable.
func (s *AtLeastOnceSink) flush(ctx context.Context) error {
	if s.w.buffered() == 0 {
		return nil
	}
	w := s.w
	return retry(ctx, w.p, w.metrics, w.name, w.logger, "write", func() error {
		conn, err := w.connected(ctx)
		if err != nil {
			return err
		}
		n := w.buffered()
		err = pgx.BeginFunc(ctx, conn, func(pgx.Tx) error { return w.flush(ctx, conn) })
		if err != nil && conn.IsClosed() {
			w.close()
		}
		if err == nil && s.out != nil {
			s.out.Add(float64(n))
		}
		return err
	})
}

// SnapshotState implements runtime.Snapshotter: the batch is written
// before the barrier goes on.
func (s *AtLeastOnceSink) SnapshotState(ctx context.Context, _ *runtime.Barrier) (runtime.SnapshotFinisher, error) {
	if err := s.flush(ctx); err != nil {
		return nil, err
	}
	return func(context.Context) (runtime.TaskSnapshot, error) { return runtime.TaskSnapshot{}, nil }, nil
}

// EndInput implements runtime.Operator.
func (s *AtLeastOnceSink) EndInput(ctx context.Context) error { return s.flush(ctx) }

// Close implements runtime.Operator.
func (s *AtLeastOnceSink) Close() error {
	s.w.close()
	return nil
}

// RecoverConfig is what Recover needs.
type RecoverConfig struct {
	// Job and Sink name the sink; its gids start with GIDPrefix(Job, UID).
	Job, Sink string
	// UID is the sink's uid; "" means Sink.
	UID string
	// Params are the sink's params (the connection).
	Params *Params
	// Committables are the gids the restored checkpoint holds (nil entries
	// are empty epochs).
	Committables [][]byte
	Metrics      *Metrics
	Logger       *slog.Logger
}

// Recover runs before any subtask of an exactly-once postgres sink
// starts (Flink's JDBC XA sink's recovery): it commits every prepared
// transaction the restored checkpoint holds (COMMIT PREPARED; one already
// committed is skipped), then rolls back every other prepared transaction
// of the sink in the database (pg_prepared_xacts by gid prefix: epochs
// after the checkpoint, of subtasks that may no longer exist after a
// rescale). It retries while the database is unreachable and returns the
// gids it committed and rolled back.
func Recover(ctx context.Context, cfg RecoverConfig) (committed, rolledBack []string, err error) {
	connCfg, err := cfg.Params.ConnConfig()
	if err != nil {
		return nil, nil, err
	}
	prefix := GIDPrefix(cfg.Job, cmp.Or(cfg.UID, cfg.Sink))
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	err = retry(ctx, cfg.Params, cfg.Metrics, cfg.Sink, cfg.Logger, "recover", func() error {
		committed, rolledBack = nil, nil
		if conn == nil || conn.IsClosed() {
			c, err := pgx.ConnectConfig(ctx, connCfg)
			if err != nil {
				return err
			}
			conn = c
		}
		for _, b := range cfg.Committables {
			if b == nil {
				continue
			}
			gid := string(b)
			if !strings.HasPrefix(gid, prefix) || !gidSuffix.MatchString(gid[len(prefix):]) {
				return &permanentError{fmt.Errorf("pgsink: sink %s: the checkpoint holds transaction %q, not one of this sink's (%s<subtask>-<checkpoint>)", cfg.Sink, gid, prefix)}
			}
			if err := commitPrepared(ctx, conn, gid); err != nil {
				return err
			}
			committed = append(committed, gid)
		}
		rows, err := conn.Query(ctx, `SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND left(gid, length($1)) = $1 ORDER BY gid`, prefix)
		if err != nil {
			return err
		}
		gids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, gid := range gids {
			if !gidSuffix.MatchString(gid[len(prefix):]) {
				continue // another sink's whose name extends this one's
			}
			if _, err := conn.Exec(ctx, "ROLLBACK PREPARED "+quoteLiteral(gid)); err != nil && !undefinedObject(err) {
				return err
			}
			rolledBack = append(rolledBack, gid)
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("pgsink: sink %s: recover: %w", cfg.Sink, err)
	}
	cfg.Logger.Info("postgres sink recovered", "sink", cfg.Sink, "committed", len(committed), "rolled_back", len(rolledBack))
	return committed, rolledBack, nil
}

// params returns the sink's decoded params.
func params(sk *graph.Sink) (*Params, error) {
	p, ok := sk.Params.(*Params)
	if !ok || p == nil {
		return nil, fmt.Errorf("pgsink: sink %s: params are %T, want *pgsink.Params", sk.Name, sk.Params)
	}
	return p, nil
}

// Factory returns the connector registration of the sink type postgres.
func Factory() connector.SinkFactory {
	return connector.SinkFactory{
		Type:       Type,
		Doc:        "Writes rows to a PostgreSQL table: insert, or upsert and delete by key from a changelog, in batches; exactly-once by one prepared transaction per checkpoint and subtask (Flink's JDBC exactly-once sink).",
		Params:     func() any { return NewParams() },
		Deliveries: []graph.Delivery{graph.DeliveryExactlyOnce, graph.DeliveryAtLeastOnce},
		Recover: func(ctx context.Context, rc connector.RecoverContext) error {
			p, err := params(rc.Sink)
			if err != nil {
				return err
			}
			_, _, err = Recover(ctx, RecoverConfig{Job: rc.Job, Sink: rc.Sink.Name, UID: rc.UID, Params: p, Committables: rc.Committables,
				Metrics: metricsOf(rc.Resources), Logger: rc.Logger})
			return err
		},
		New: func(sc connector.SinkContext) (runtime.Operator, error) {
			p, err := params(sc.Sink)
			if err != nil {
				return nil, err
			}
			logger := sc.Logger.With("sink", sc.Sink.Name, "subtask", sc.Subtask)
			w, err := newWriter(sc.Sink.Name, p, metricsOf(sc.Resources), logger)
			if err != nil {
				return nil, err
			}
			if !sc.Sink.Delivery.ExactlyOnce() {
				return &AtLeastOnceSink{w: w, out: sc.RecordsOut}, nil
			}
			c := &Committer{w: w, prefix: fmt.Sprintf("%s%d-", GIDPrefix(sc.Job, cmp.Or(sc.UID, sc.Sink.Name)), sc.Subtask), gidRows: map[string]int{}, out: sc.RecordsOut}
			return &openSink{TwoPhaseCommitSink: connector.NewTwoPhaseCommitSink(Type, sc.Sink.Name, sc.Subtask, c, sc.Logger), c: c}, nil
		},
	}
}
