package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// pgSinkConfig copies topic events into the table events of the database
// at dsn with a postgres sink in mode insert (every record a row: a record
// written twice would be two rows), exactly once, with checkpoints every
// 100 ms and parallelism p.
func pgSinkConfig(dir, dsn, broker, metrics string, p int) string {
	return jobHead("pgsink", p, dir, brokersKafka(broker), metrics, "info") + `checkpoints:
  interval: 100ms
sources:
  - name: events
    topic: events
sinks:
  - name: rows
    type: postgres
    input: events
    delivery: exactly-once
    params:
      connection:
        dsn: "` + dsn + `"
      table: events
      mode: insert
      columns:
        - name: n
        - name: k
          field: $key
      batch_size: 200
`
}

// pgQuery runs sql on dsn and returns the first row's columns.
func pgQuery(t *testing.T, dsn, sql string, dest ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(ctx, sql).Scan(dest...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// preparedXacts returns the transaction ids of the prepared transactions
// of the job's sink rows.
func preparedXacts(t *testing.T, dsn string) []uint32 {
	t.Helper()
	var xids []uint32
	pgQuery(t, dsn, `SELECT coalesce(array_agg(transaction::text::bigint ORDER BY gid), '{}') FROM pg_prepared_xacts WHERE gid LIKE 'pgsink:rows-%'`, &xids)
	return xids
}

// TestPostgresSinkExactlyOnceUnderKill9 is issue 24's PostgreSQL sink
// acceptance test: 10,000 records copied into a table by an exactly-once
// postgres sink (mode insert, a table without a key: a duplicate would
// stay as a second row) while the daemon is killed with SIGKILL 10 times
// at random points and restarted with a different parallelism each time
// (1 to 4). After each restore no transaction the killed run prepared is
// left (committed or rolled back by the recovery); in the end the table
// holds every record exactly once, each with its key, and after a clean
// stop and one more restore no prepared transaction of the sink is left.
func TestPostgresSinkExactlyOnceUnderKill9(t *testing.T) {
	const records, batch = 10_000, 125 // batch divides records: producePaced writes whole batches
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	t.Logf("seed %d", seed)
	pg := testkit.StartPostgres(t)
	dsn := pg.CreateDatabase(t, "sink")
	pg.Exec(t, "sink", "CREATE TABLE events (n int NOT NULL, k text)")
	_, broker := startKfake(t, []string{"events"})
	dir, metrics := t.TempDir(), testkit.FreeAddr(t)
	cl := newClient(t, broker, kgo.DefaultProduceTopic("events"))
	start := func(p int) *proc {
		d := startProc(t, dir, pgSinkConfig(dir, dsn, broker, metrics, p), broker, metrics)
		waitLogged(t, d, "postgres sink recovered")
		return d
	}
	var killed []uint32
	d, prod := kill9Restarts{rng: rng, kills: 10, operator: "rows", spread: 2000, start: start,
		produce: func() *pacedProducer {
			return producePaced(t, cl, records, batch, 100*time.Millisecond, func(i, j int) []*kgo.Record {
				recs := make([]*kgo.Record, 0, j-i)
				for n := i; n < j; n++ {
					recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "k%d", n%97), Value: fmt.Appendf(nil, `{"n":%d}`, n)})
				}
				return recs
			})
		},
		killed: func(int) string {
			killed = preparedXacts(t, dsn)
			return fmt.Sprintf("%d prepared transactions left", len(killed))
		},
		restarted: func(k int) {
			for _, x := range preparedXacts(t, dsn) {
				if slices.Contains(killed, x) {
					t.Fatalf("restart %d: prepared transaction %d of the killed run outlived the restore", k, x)
				}
			}
		},
	}.run(t, records)
	prod.wait(t, 60*time.Second)
	check := func(when string) {
		t.Helper()
		var rows, distinct, lo, hi, badKeys int
		if !testkit.Poll(60*time.Second, func() bool {
			pgQuery(t, dsn, "SELECT count(*) FROM events", &rows)
			return rows >= records || d.exited()
		}) {
			t.Fatalf("%s: %d rows after 60s, want %d", when, rows, records)
		}
		pgQuery(t, dsn, `SELECT count(*), count(DISTINCT n), min(n), max(n), count(*) FILTER (WHERE k IS DISTINCT FROM 'k' || (n % 97)) FROM events`,
			&rows, &distinct, &lo, &hi, &badKeys)
		if rows != records || distinct != records || lo != 0 || hi != records-1 || badKeys != 0 {
			t.Fatalf("%s: %d rows, %d distinct n in [%d, %d], %d with a wrong key; want %d rows, each n of [0, %d] once, every key k<n%%97>",
				when, rows, distinct, lo, hi, badKeys, records, records-1)
		}
		t.Logf("%s: %d rows, every record exactly once", when, rows)
	}
	check("after the last restart")
	if code, _ := d.terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("exit status %d after SIGTERM:\n%s", code, d.out.String())
	}
	d = start(2)
	// No input is left: after the restore no transaction is prepared.
	if x := preparedXacts(t, dsn); len(x) != 0 {
		t.Fatalf("prepared transactions %v after the final restore", x)
	}
	check("after a clean stop and a restore")
}

// TestExamplePostgresSink runs configs/examples/postgres_sink.yaml against
// a throw-away cluster holding postgres_sink.sql's table: the table ends
// with exactly each customer's total and payment count after its last
// payment (the aggregate's changelog upserted by customer), a payment
// whose amount is no number skipped, and no prepared transaction left.
func TestExamplePostgresSink(t *testing.T) {
	t.Parallel()
	pg := testkit.StartPostgres(t)
	pg.Exec(t, "postgres", "CREATE ROLE kstreamd LOGIN SUPERUSER", "CREATE DATABASE kstreamd OWNER kstreamd")
	sql, err := os.ReadFile(filepath.Join("..", "..", "configs", "examples", "postgres_sink.sql"))
	if err != nil {
		t.Fatal(err)
	}
	pg.Exec(t, "kstreamd", string(sql))
	_, broker := startKfake(t, []string{"payments"})
	dir, metrics := t.TempDir(), testkit.FreeAddr(t)
	cfg := exampleConfig(t, "postgres_sink.yaml", dir, broker, metrics)
	if !strings.Contains(cfg, "port: 5432") {
		t.Fatal("postgres_sink.yaml has no port: 5432 line to replace")
	}
	cfg = strings.Replace(cfg, "port: 5432", fmt.Sprintf("port: %d", pg.Port), 1)
	d := startProcEnv(t, dir, cfg, broker, metrics, []string{"KSTREAMD_PG_PASSWORD=unused-with-trust"})
	ts := time.UnixMilli(1_767_225_600_000)
	var recs []*kgo.Record
	for i, p := range [][2]string{
		{"alice", "10"}, {"bob", "5"}, {"alice", "20.25"}, {"carol", "7.5"}, {"alice", `"ten"`}, {"bob", "15"}, {"alice", "30"}, {"carol", "2"},
	} {
		recs = append(recs, &kgo.Record{Topic: "payments", Key: []byte(p[0]), Timestamp: ts.Add(time.Duration(i) * time.Second),
			Value: fmt.Appendf(nil, `{"customer":%q,"amount":%s}`, p[0], p[1])})
	}
	produce(t, newClient(t, broker), recs...)
	dsn := pg.DSN("kstreamd")
	want := "alice 60.25 3 1767225606000|bob 20.00 2 1767225605000|carol 9.50 2 1767225607000"
	var got string
	if !testkit.Poll(30*time.Second, func() bool {
		pgQuery(t, dsn, `SELECT coalesce(string_agg(customer || ' ' || total || ' ' || payments || ' ' || updated_ms, '|' ORDER BY customer), '') FROM customer_totals`, &got)
		return got == want
	}) {
		t.Fatalf("customer_totals %q, want %q", got, want)
	}
	if code, _ := d.terminate(t, 30*time.Second); code != 0 {
		t.Fatalf("exit status %d after SIGTERM:\n%s", code, d.out.String())
	}
	var prepared int
	pgQuery(t, dsn, "SELECT count(*) FROM pg_prepared_xacts", &prepared)
	pgQuery(t, dsn, `SELECT coalesce(string_agg(customer || ' ' || total || ' ' || payments || ' ' || updated_ms, '|' ORDER BY customer), '') FROM customer_totals`, &got)
	if prepared != 0 || got != want {
		t.Fatalf("after the stop: %d prepared transactions, table %q; want none and %q", prepared, got, want)
	}
}
