package pgsink

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/runtime"
)

// BenchmarkWriteMethods compares three ways of writing a batch of upserts
// (100,000 rows of four columns in batches of 5,000, one transaction) on
// a throw-away cluster: the sink's one statement over text[] parameters
// unnested into rows; a multi-row INSERT ... VALUES with one text
// parameter per value; COPY into a temporary table then INSERT ... SELECT
// ... ON CONFLICT (which PREPARE TRANSACTION refuses, so exactly-once
// could not use it). rows/s is the figure to compare.
func BenchmarkWriteMethods(b *testing.B) {
	pg := testkit.StartPostgres(b)
	dsn := pg.CreateDatabase(b, "methods")
	ctx := context.Background()
	const rows, batch = 100_000, 5000
	p := NewParams()
	p.Connection.DSN = dsn
	p.Table = "t"
	p.Columns = []ColumnParams{{Name: "id"}, {Name: "key"}, {Name: "amount"}, {Name: "ts"}}
	p.KeyColumns = []string{"id"}
	p.BatchSize = batch
	recs := make([]runtime.Record, rows)
	for i := range recs {
		recs[i] = runtime.Record{Value: fmt.Appendf(nil, `{"id":%d,"key":"k%06d","amount":%d,"ts":%d}`, i, i%10_000, i%1000, 1_700_000_000_000+int64(i))}
	}
	reset := func(b *testing.B) *pgx.Conn {
		pg.Exec(b, "methods", "DROP TABLE IF EXISTS t", "CREATE TABLE t (id bigint PRIMARY KEY, key text, amount int, ts bigint)")
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			b.Fatal(err)
		}
		return conn
	}
	run := func(b *testing.B, write func(conn *pgx.Conn, w *writer) error) {
		for b.Loop() {
			b.StopTimer()
			conn := reset(b)
			w, err := newWriter("bench", p, nil, discardLogger())
			if err != nil {
				b.Fatal(err)
			}
			if err := w.prepare(ctx, conn); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			start := time.Now()
			for i := range recs {
				if err := w.add(&recs[i]); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
				b.Fatal(err)
			}
			if err := write(conn, w); err != nil {
				b.Fatal(err)
			}
			if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(rows/time.Since(start).Seconds(), "rows/s")
			b.StopTimer()
			var n int
			if err := conn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil || n != rows {
				b.Fatalf("%d rows (%v), want %d", n, err, rows)
			}
			conn.Close(ctx)
			b.StartTimer()
		}
	}
	names := `"id", "key", "amount", "ts"`
	conflict := ` ON CONFLICT ("id") DO UPDATE SET "key" = EXCLUDED."key", "amount" = EXCLUDED."amount", "ts" = EXCLUDED."ts"`
	b.Run("unnest", func(b *testing.B) {
		run(b, func(conn *pgx.Conn, w *writer) error { return w.flush(ctx, conn) })
	})
	b.Run("values", func(b *testing.B) {
		run(b, func(conn *pgx.Conn, w *writer) error {
			for i := 0; i < len(w.ops); i += batch {
				chunk := w.ops[i:min(i+batch, len(w.ops))]
				var sb strings.Builder
				sb.WriteString("INSERT INTO t (" + names + ") VALUES ")
				args := make([]any, 0, 4*len(chunk))
				for j, o := range chunk {
					if j > 0 {
						sb.WriteString(", ")
					}
					fmt.Fprintf(&sb, "($%d, $%d, $%d, $%d)", 4*j+1, 4*j+2, 4*j+3, 4*j+4)
					for _, v := range o.vals {
						args = append(args, v.String)
					}
				}
				if _, err := conn.Exec(ctx, sb.String()+conflict, args...); err != nil {
					return err
				}
			}
			w.reset()
			return nil
		})
	})
	b.Run("copy-temp-table", func(b *testing.B) {
		run(b, func(conn *pgx.Conn, w *writer) error {
			if _, err := conn.Exec(ctx, "CREATE TEMP TABLE IF NOT EXISTS stage (id text, key text, amount text, ts text) ON COMMIT DELETE ROWS"); err != nil {
				return err
			}
			for i := 0; i < len(w.ops); i += batch {
				chunk := w.ops[i:min(i+batch, len(w.ops))]
				_, err := conn.CopyFrom(ctx, pgx.Identifier{"stage"}, []string{"id", "key", "amount", "ts"}, pgx.CopyFromSlice(len(chunk), func(j int) ([]any, error) {
					v := chunk[j].vals
					return []any{v[0].String, v[1].String, v[2].String, v[3].String}, nil
				}))
				if err != nil {
					return err
				}
				if _, err := conn.Exec(ctx, "INSERT INTO t ("+names+") SELECT id::bigint, key, amount::int, ts::bigint FROM stage"+conflict); err != nil {
					return err
				}
				if _, err := conn.Exec(ctx, "TRUNCATE stage"); err != nil {
					return err
				}
			}
			w.reset()
			return nil
		})
	})
}
