package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgTable is the table of a Postgres scenario's run called base.
func pgTable(base string) string { return strings.ReplaceAll(base, "-", "_") }

// pgCreateTable creates the run's table (a BRIN index on ts, cheap to
// keep while rows arrive in time order, lets the reader find new rows
// without scanning the table) and returns a function dropping it.
func pgCreateTable(ctx context.Context, dsn, table string) (func(), error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("bench: postgres: %w", err)
	}
	defer conn.Close(context.Background())
	id := pgx.Identifier{table}.Sanitize()
	for _, s := range []string{"DROP TABLE IF EXISTS " + id, "CREATE TABLE " + id + " (id bigint, key text, amount int, ts bigint)",
		"CREATE INDEX ON " + id + " USING brin (ts)"} {
		if _, err := conn.Exec(ctx, s); err != nil {
			return nil, fmt.Errorf("bench: postgres: %s: %w", s, err)
		}
	}
	return func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(dctx, dsn); err == nil {
			_, _ = c.Exec(dctx, "DROP TABLE IF EXISTS "+id)
			c.Close(context.Background())
		}
	}, nil
}

// pgCheck compares the run's table with the expected rows: ids 1 to n,
// each once (the generator numbers its items); "" when equal.
func pgCheck(ctx context.Context, dsn, table string, n int64) (string, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", fmt.Errorf("bench: postgres: %w", err)
	}
	defer conn.Close(context.Background())
	var rows, distinct, lo, hi, nulls int64
	err = conn.QueryRow(ctx, `SELECT count(*), count(DISTINCT id), coalesce(min(id), 0), coalesce(max(id), 0),
		count(*) FILTER (WHERE key IS NULL OR amount IS NULL OR ts IS NULL) FROM `+pgx.Identifier{table}.Sanitize()).Scan(&rows, &distinct, &lo, &hi, &nulls)
	if err != nil {
		return "", fmt.Errorf("bench: postgres: check: %w", err)
	}
	if rows != n || distinct != n || lo != 1 || hi != n || nulls != 0 {
		return fmt.Sprintf("table %s: %d rows, %d distinct ids in [%d, %d], %d with a null column; want ids 1 to %d once each", table, rows, distinct, lo, hi, nulls, n), nil
	}
	return "", nil
}

// pgReader counts the rows a postgres sink committed to table, polling
// every 10 ms: n1 those whose ts (the record timestamp, ms) is before
// phase2 (counted once, when it starts: the throughput phase waited for
// their commit), n2 the others, keeping the latency (the time the poll
// found a row minus its ts) of each row newer than every row seen before.
type pgReader struct {
	dsn, table string
	phase2     time.Time
	n1, n2     atomic.Int64
	mu         sync.Mutex
	lat        []time.Duration
}

func (pr *pgReader) run(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, pr.dsn)
	if err != nil {
		return fmt.Errorf("bench: postgres reader: %w", err)
	}
	defer conn.Close(context.Background())
	id := pgx.Identifier{pr.table}.Sanitize()
	p2 := pr.phase2.UnixMilli()
	var n1 int64
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+id+" WHERE ts < $1", p2).Scan(&n1); err != nil {
		return fmt.Errorf("bench: postgres reader: %w", err)
	}
	pr.n1.Store(n1)
	last := p2 - 1
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		var n2 int64
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+id+" WHERE ts >= $1", p2).Scan(&n2); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("bench: postgres reader: %w", err)
		}
		now := time.Now()
		rows, err := conn.Query(ctx, "SELECT ts FROM "+id+" WHERE ts > $1", last)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("bench: postgres reader: %w", err)
		}
		tss, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("bench: postgres reader: %w", err)
		}
		pr.mu.Lock()
		for _, ts := range tss {
			pr.lat = append(pr.lat, now.Sub(time.UnixMilli(ts)))
			last = max(last, ts)
		}
		pr.mu.Unlock()
		pr.n2.Store(n2)
	}
}

func (pr *pgReader) count() int64 { return pr.n1.Load() + pr.n2.Load() }

func (pr *pgReader) latencies() []time.Duration {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return append([]time.Duration(nil), pr.lat...)
}
