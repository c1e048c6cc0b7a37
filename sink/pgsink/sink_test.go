package pgsink

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/operators"
	"github.com/kstreamd/kstreamd/runtime"
)

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestParamsCheck(t *testing.T) {
	cols := []ColumnParams{{Name: "id"}, {Name: "n"}}
	for _, tc := range []struct {
		name string
		p    Params
		want []string
	}{
		{"dsn upsert", Params{Connection: ConnectionParams{DSN: "postgres://u@h/db"}, Table: "s.t", Columns: cols, KeyColumns: []string{"id"}, BatchSize: 1, MinBackoff: 1, MaxBackoff: 1}, nil},
		{"host insert", Params{Connection: ConnectionParams{Host: "h", User: "u", Database: "d", PasswordEnv: "PW"}, Table: "t", Columns: cols, BatchSize: 1, MinBackoff: 1, MaxBackoff: 1}, nil},
		{"nothing", Params{}, []string{
			"connection: required: dsn, or host, user and database", "table: required", "columns: at least one column is required",
			"batch_size: must be at least 1, got 0", "min_backoff: must be positive and at most max_backoff"}},
		{"both connections", Params{Connection: ConnectionParams{DSN: "x", Host: "h"}, Table: "a.b.c", Columns: cols, BatchSize: 1, MinBackoff: 1, MaxBackoff: 1}, []string{
			"connection.dsn: exclusive with host, port, user, password_env, database and sslmode", `table: must be table or schema.table, got "a.b.c"`}},
		{"host fields", Params{Connection: ConnectionParams{Port: 70000, PasswordEnv: "A-B", SSLMode: "on"}, Table: "t", Columns: cols, BatchSize: 1, MinBackoff: 1, MaxBackoff: 1}, []string{
			"connection.host: required", "connection.database: required", "connection.user: required", "connection.port: must be in 1..65535, got 70000",
			`connection.password_env: must be an environment variable name, got "A-B"`,
			`connection.sslmode: must be one of disable, allow, prefer, require, verify-ca, verify-full, got "on"`}},
		{"columns and keys", Params{Connection: ConnectionParams{DSN: "postgres://h/d"}, Table: "t", Mode: ModeUpsert,
			Columns: []ColumnParams{{Name: "a"}, {Name: "a"}, {Field: "x"}}, KeyColumns: []string{"b", "a", "a"}, BatchSize: 1, MinBackoff: 1, MaxBackoff: 1}, []string{
			`columns[1].name: duplicate column "a"`, "columns[2].name: required", `key_columns[0]: "b" is not among columns`, `key_columns[2]: duplicate key column "a"`}},
		{"upsert without keys", Params{Connection: ConnectionParams{DSN: "postgres://h/d"}, Table: "t", Mode: ModeUpsert, Columns: cols, BatchSize: 1, MinBackoff: 1, MaxBackoff: 1}, []string{
			"key_columns: required for mode upsert: the columns of the table's primary key or a unique index"}},
		{"insert with keys", Params{Connection: ConnectionParams{DSN: "postgres://h/d"}, Table: "t", Mode: ModeInsert, Columns: cols, KeyColumns: []string{"id"}, BatchSize: 1, MinBackoff: 1, MaxBackoff: 1}, []string{
			"key_columns: only for mode upsert"}},
		{"bad mode", Params{Connection: ConnectionParams{DSN: "postgres://h/d"}, Table: "t", Mode: "merge", Columns: cols, BatchSize: 1, MinBackoff: 1, MaxBackoff: 1}, []string{
			`mode: must be insert or upsert, got "merge"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			tc.p.CheckParams(func(field, msg string) { got = append(got, field+": "+msg) })
			if !slices.Equal(got, tc.want) {
				t.Fatalf("problems\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

// fixture is a database of the package's shared test cluster.
type fixture struct {
	pg  *testkit.Postgres
	db  string
	dsn string
}

// newFixture returns a fresh database with table t (id int primary key,
// name text, amount numeric(10,2), tags jsonb, ts bigint).
func newFixture(t *testing.T, pg *testkit.Postgres, db string) *fixture {
	dsn := pg.CreateDatabase(t, db)
	pg.Exec(t, db, "CREATE TABLE t (id int PRIMARY KEY, name text, amount numeric(10,2), tags jsonb, ts bigint)")
	return &fixture{pg: pg, db: db, dsn: dsn}
}

func (f *fixture) query(t *testing.T, sql string) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, sql)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		var parts []string
		for _, v := range vals {
			parts = append(parts, fmt.Sprint(v))
		}
		out = append(out, strings.Join(parts, "|"))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// rows returns table t ordered by id, amounts and tags as text.
func (f *fixture) rows(t *testing.T) []string {
	return f.query(t, "SELECT id, coalesce(name, 'NULL'), coalesce(amount::text, 'NULL'), coalesce(tags::text, 'NULL'), coalesce(ts::text, 'NULL') FROM t ORDER BY id")
}

func (f *fixture) prepared(t *testing.T) []string {
	return f.query(t, "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() ORDER BY gid")
}

// params returns the params of a sink writing t: id, name, amount (an
// expression), tags (a JSON array), ts ($timestamp).
func (f *fixture) params(t *testing.T, batch int) *Params {
	p := NewParams()
	p.Connection.DSN = f.dsn
	p.Table = "public.t"
	amount, err := operators.CompileExpression(`price * double(qty)`)
	if err != nil {
		t.Fatal(err)
	}
	p.Columns = []ColumnParams{{Name: "id"}, {Name: "name", Field: "who.name"}, {Name: "amount", Expression: amount}, {Name: "tags"}, {Name: "ts", Field: "$timestamp"}}
	p.KeyColumns = []string{"id"}
	p.BatchSize = batch
	p.MinBackoff, p.MaxBackoff = 10*time.Millisecond, 50*time.Millisecond
	return p
}

func rec(change runtime.ChangeKind, id int, name string, ts int64) runtime.Record {
	v := fmt.Sprintf(`{"id":%d,"who":{"name":%q},"price":1.25,"qty":%d,"tags":["a",%d]}`, id, name, id, id)
	if name == "" {
		v = fmt.Sprintf(`{"id":%d,"price":0.5,"qty":2}`, id)
	}
	return runtime.Record{Value: []byte(v), Timestamp: time.UnixMilli(ts), Change: change}
}

// newSink builds subtask sub of the sink through the factory.
func newSink(t *testing.T, p *Params, delivery graph.Delivery, sub int, res *connector.Resources) runtime.Operator {
	t.Helper()
	return newSinkOf(t, "job", "pg", "", p, delivery, sub, res)
}

// newSinkOf builds subtask sub of sink name (uid uid, "" for the name) of
// job through the factory.
func newSinkOf(t *testing.T, job, name, uid string, p *Params, delivery graph.Delivery, sub int, res *connector.Resources) runtime.Operator {
	t.Helper()
	op, err := Factory().New(connector.SinkContext{Job: job, Sink: &graph.Sink{Name: name, Type: Type, Params: p, Delivery: delivery, Parallelism: 2},
		UID: uid, Subtask: sub, Parallelism: 2, Resources: res, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := op.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { op.Close() })
	return op
}

func process(t *testing.T, op runtime.Operator, recs ...runtime.Record) {
	t.Helper()
	for _, r := range recs {
		if err := op.ProcessRecord(context.Background(), 0, r); err != nil {
			t.Fatal(err)
		}
	}
}

func snapshot(t *testing.T, op runtime.Operator, id int64) {
	t.Helper()
	fin, err := op.(runtime.Snapshotter).SnapshotState(context.Background(), &runtime.Barrier{CheckpointID: id})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fin(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestPostgresSink runs the sink against a real PostgreSQL server (one
// throw-away cluster for the subtests, a database each).
func TestPostgresSink(t *testing.T) {
	pg := testkit.StartPostgres(t)

	// A changelog through an at-least-once upsert sink, in batches of 2:
	// -U ignored, +U replaces, -D deletes, a key deleted then inserted
	// again within one batch is inserted afresh; values cast from text to
	// int, numeric (an expression's exact product), jsonb and bigint.
	t.Run("upsert changelog", func(t *testing.T) {
		f := newFixture(t, pg, "upsert")
		op := newSink(t, f.params(t, 2), graph.DeliveryAtLeastOnce, 0, nil)
		process(t, op,
			rec(runtime.ChangeInsert, 1, "ann", 1000),
			rec(runtime.ChangeInsert, 2, "bob", 2000),
			rec(runtime.ChangeUpdateBefore, 1, "ann", 1000),
			rec(runtime.ChangeUpdateAfter, 1, "anna", 3000),
			rec(runtime.ChangeDelete, 2, "bob", 2000),
			rec(runtime.ChangeInsert, 3, "cy", 4000),
			rec(runtime.ChangeDelete, 3, "cy", 4000),
			rec(runtime.ChangeInsert, 3, "", 5000), // name absent: NULL
			rec(runtime.ChangeInsert, 4, "dee", 6000),
		)
		want := []string{`1|anna|1.25|["a", 1]|3000`, `3|NULL|1.00|NULL|5000`, `4|dee|5.00|["a", 4]|6000`}
		if got := f.rows(t); !slices.Equal(got, want) { // every batch of 2 changes written
			t.Fatalf("rows\n%q\nwant\n%q", got, want)
		}
		process(t, op, rec(runtime.ChangeInsert, 5, "eve", 7000))
		if got := f.rows(t); !slices.Equal(got, want) {
			t.Fatalf("a batch of 1 written before the barrier: %q", got)
		}
		snapshot(t, op, 1)
		want = append(want, `5|eve|6.25|["a", 5]|7000`)
		if got := f.rows(t); !slices.Equal(got, want) {
			t.Fatalf("rows after the barrier\n%q\nwant\n%q", got, want)
		}
		// replayed after a failure: the same rows (idempotent upserts)
		process(t, op, rec(runtime.ChangeInsert, 4, "dee", 6000))
		if err := op.EndInput(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := f.rows(t); !slices.Equal(got, want) {
			t.Fatalf("after a replay\n%q\nwant\n%q", got, want)
		}
	})

	// Mode insert appends rows and refuses a delete.
	t.Run("insert", func(t *testing.T) {
		f := newFixture(t, pg, "insert")
		p := f.params(t, 100)
		p.KeyColumns = nil
		op := newSink(t, p, graph.DeliveryAtLeastOnce, 0, nil)
		process(t, op, rec(runtime.ChangeInsert, 7, "g", 1), rec(runtime.ChangeInsert, 8, "h", 2))
		if err := op.EndInput(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := f.rows(t); len(got) != 2 || got[0] != `7|g|8.75|["a", 7]|1` {
			t.Fatalf("rows %q", got)
		}
		err := op.ProcessRecord(context.Background(), 0, rec(runtime.ChangeDelete, 7, "g", 1))
		if err == nil || !strings.Contains(err.Error(), "a -D record reached a sink in mode insert") {
			t.Fatalf("delete in mode insert: %v", err)
		}
	})

	// Exactly-once: the epoch's rows are invisible until the checkpoint
	// completes, prepared under the gid "<job>:<uid>-<subtask>-<checkpoint>";
	// an epoch without records prepares nothing; while an epoch is
	// prepared, full batches of the next are held back (not written), then
	// written after the commit.
	t.Run("exactly once", func(t *testing.T) {
		f := newFixture(t, pg, "exactly")
		reg := prometheus.NewRegistry()
		res := connector.NewResources()
		SetMetrics(res, NewMetrics(reg))
		op := newSink(t, f.params(t, 2), graph.DeliveryExactlyOnce, 1, res)
		process(t, op, rec(runtime.ChangeInsert, 1, "a", 1), rec(runtime.ChangeInsert, 2, "b", 2), rec(runtime.ChangeInsert, 3, "c", 3))
		snapshot(t, op, 5)
		if got := f.rows(t); len(got) != 0 {
			t.Fatalf("rows visible before the checkpoint completed: %q", got)
		}
		if got := f.prepared(t); !slices.Equal(got, []string{"job:pg-1-5"}) {
			t.Fatalf("prepared %q", got)
		}
		process(t, op, rec(runtime.ChangeUpdateAfter, 1, "a2", 4), rec(runtime.ChangeInsert, 9, "z", 5), rec(runtime.ChangeInsert, 10, "y", 6))
		if got := f.query(t, "SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' AND granted = false"); got[0] != "0" {
			t.Fatalf("a write waits for a lock: %q", got)
		}
		if err := op.(runtime.CheckpointListener).NotifyCheckpointComplete(context.Background(), 5); err != nil {
			t.Fatal(err)
		}
		if got := f.prepared(t); len(got) != 0 {
			t.Fatalf("prepared after the commit: %q", got)
		}
		if got := f.rows(t); len(got) != 3 || got[0] != `1|a|1.25|["a", 1]|1` {
			t.Fatalf("rows after checkpoint 5: %q", got)
		}
		snapshot(t, op, 6)
		snapshot(t, op, 7) // empty epoch
		if got := f.prepared(t); !slices.Equal(got, []string{"job:pg-1-6"}) {
			t.Fatalf("prepared %q", got)
		}
		if err := op.(runtime.CheckpointListener).NotifyCheckpointComplete(context.Background(), 7); err != nil {
			t.Fatal(err)
		}
		want := []string{`1|a2|1.25|["a", 1]|4`, `2|b|2.50|["a", 2]|2`, `3|c|3.75|["a", 3]|3`, `9|z|11.25|["a", 9]|5`, `10|y|12.50|["a", 10]|6`}
		if got := f.rows(t); !slices.Equal(got, want) {
			t.Fatalf("rows\n%q\nwant\n%q", got, want)
		}
		// records after the last barrier are rolled back at the end
		process(t, op, rec(runtime.ChangeInsert, 11, "x", 7), rec(runtime.ChangeInsert, 12, "w", 8))
		if err := op.EndInput(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := f.rows(t); !slices.Equal(got, want) {
			t.Fatalf("rows after the end\n%q\nwant\n%q", got, want)
		}
		if up := testutil.ToFloat64(NewMetrics(reg).upGauge.WithLabelValues("pg")); up != 1 {
			t.Fatalf("up %v", up)
		}
	})

	// Recover commits the checkpoint's gids (one committed before is
	// skipped) and rolls back every other prepared transaction of the sink,
	// of subtasks that no longer exist included, but not another sink's
	// whose name extends this one's, nor another job's.
	t.Run("recover", func(t *testing.T) {
		f := newFixture(t, pg, "recover")
		prepare := func(gid string, id int) {
			f.pg.Exec(t, f.db, "BEGIN", fmt.Sprintf("INSERT INTO t (id, name) VALUES (%d, %s)", id, quoteLiteral(gid)), "PREPARE TRANSACTION "+quoteLiteral(gid))
		}
		prepare("job:pg-0-4", 1)
		prepare("job:pg-1-4", 2)
		prepare("job:pg-0-5", 3) // after the checkpoint
		prepare("job:pg-3-5", 4) // a subtask of the old parallelism
		prepare("job:pg-b-0-4", 5)
		prepare("other:pg-0-4", 6)
		committed, rolledBack, err := Recover(context.Background(), RecoverConfig{Job: "job", Sink: "pg", Params: f.params(t, 10),
			Committables: [][]byte{[]byte("job:pg-0-4"), nil, []byte("job:pg-1-4"), []byte("job:pg-2-3")}, Logger: discardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"job:pg-0-4", "job:pg-1-4", "job:pg-2-3"}; !slices.Equal(committed, want) {
			t.Fatalf("committed %q, want %q", committed, want)
		}
		if want := []string{"job:pg-0-5", "job:pg-3-5"}; !slices.Equal(rolledBack, want) {
			t.Fatalf("rolled back %q, want %q", rolledBack, want)
		}
		if got, want := f.query(t, "SELECT id FROM t ORDER BY id"), []string{"1", "2"}; !slices.Equal(got, want) {
			t.Fatalf("ids %q, want %q", got, want)
		}
		if got, want := f.prepared(t), []string{"job:pg-b-0-4", "other:pg-0-4"}; !slices.Equal(got, want) {
			t.Fatalf("prepared %q, want %q", got, want)
		}
		_, _, err = Recover(context.Background(), RecoverConfig{Job: "job", Sink: "pg", Params: f.params(t, 10),
			Committables: [][]byte{[]byte("job:pgx-0-4")}, Logger: discardLogger()})
		if err == nil || !strings.Contains(err.Error(), `the checkpoint holds transaction "job:pgx-0-4", not one of this sink's (job:pg-<subtask>-<checkpoint>)`) {
			t.Fatalf("a foreign committable: %v", err)
		}
	})

	// Two jobs share the database: job "a" with sink "b-c" and job "a-b"
	// with sink "c" (with the gid prefix "<job>-<sink>-" both were "a-b-c-",
	// so a's recovery rolled back a-b's prepared epoch, whose commit then
	// took the missing gid for committed: its rows were lost). And a sink
	// renamed with its uid kept recovers its prepared transaction by the
	// uid (by name, the checkpoint's gid was refused as another sink's).
	t.Run("recover apart from other jobs, by uid", func(t *testing.T) {
		f := newFixture(t, pg, "recoveruid")
		ab := newSinkOf(t, "a-b", "c", "", f.params(t, 10), graph.DeliveryExactlyOnce, 0, nil)
		process(t, ab, rec(runtime.ChangeInsert, 1, "ab", 1))
		snapshot(t, ab, 4)
		old := newSinkOf(t, "a", "old-name", "", f.params(t, 10), graph.DeliveryExactlyOnce, 1, nil)
		process(t, old, rec(runtime.ChangeInsert, 2, "a", 2))
		snapshot(t, old, 7)
		prepared := f.prepared(t)
		if want := []string{"a-b:c-0-4", "a:old-name-1-7"}; !slices.Equal(prepared, want) {
			t.Fatalf("prepared %q, want %q", prepared, want)
		}
		// job a restarts from checkpoint 7 with its sink renamed "b-c",
		// uid "old-name"
		err := Factory().Recover(context.Background(), connector.RecoverContext{Job: "a", Sink: &graph.Sink{Name: "b-c", Type: Type, Params: f.params(t, 10),
			Delivery: graph.DeliveryExactlyOnce, Parallelism: 2}, UID: "old-name", Committables: [][]byte{nil, []byte("a:old-name-1-7")},
			OldParallelism: 2, Parallelism: 2, Logger: discardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := f.prepared(t), []string{"a-b:c-0-4"}; !slices.Equal(got, want) {
			t.Fatalf("prepared after job a's recovery %q, want %q (job a-b's untouched)", got, want)
		}
		if err := ab.(runtime.CheckpointListener).NotifyCheckpointComplete(context.Background(), 4); err != nil {
			t.Fatal(err)
		}
		if got, want := f.query(t, "SELECT id, name FROM t ORDER BY id"), []string{"1|ab", "2|a"}; !slices.Equal(got, want) {
			t.Fatalf("rows %q, want %q", got, want)
		}
	})

	// A database that is unreachable is retried with back-off, counted and
	// reported down, until it answers; then the records are written.
	t.Run("database down", func(t *testing.T) {
		f := newFixture(t, pg, "down")
		addr := testkit.FreeAddr(t)
		p := f.params(t, 100)
		p.Connection.DSN = strings.Replace(f.dsn, fmt.Sprintf("127.0.0.1:%d", pg.Port), addr, 1)
		reg := prometheus.NewRegistry()
		m := NewMetrics(reg)
		res := connector.NewResources()
		SetMetrics(res, m)
		op, err := Factory().New(connector.SinkContext{Job: "job", Sink: &graph.Sink{Name: "pg", Type: Type, Params: p, Delivery: graph.DeliveryAtLeastOnce, Parallelism: 1},
			Parallelism: 1, Resources: res, Logger: discardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		opened := make(chan error, 1)
		go func() { opened <- op.Open(context.Background()) }()
		if !testkit.Poll(10*time.Second, func() bool { return testutil.ToFloat64(m.retries.WithLabelValues("pg")) >= 3 }) {
			t.Fatal("no retries counted while the database is unreachable")
		}
		if up := testutil.ToFloat64(m.upGauge.WithLabelValues("pg")); up != 0 {
			t.Fatalf("up %v while unreachable", up)
		}
		select {
		case err := <-opened:
			t.Fatalf("Open returned while the database is unreachable: %v", err)
		default:
		}
		proxy(t, addr, fmt.Sprintf("127.0.0.1:%d", pg.Port))
		if err := <-opened; err != nil {
			t.Fatal(err)
		}
		defer op.Close()
		process(t, op, rec(runtime.ChangeInsert, 1, "a", 1))
		if err := op.EndInput(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := f.rows(t); len(got) != 1 {
			t.Fatalf("rows %q", got)
		}
		if up := testutil.ToFloat64(m.upGauge.WithLabelValues("pg")); up != 1 {
			t.Fatalf("up %v after the database answered", up)
		}
	})

	// A column the table lacks fails at once (not retried), naming the
	// table's columns.
	t.Run("missing column", func(t *testing.T) {
		f := newFixture(t, pg, "missing")
		p := f.params(t, 10)
		p.Columns = append(p.Columns, ColumnParams{Name: "nope"})
		op, err := Factory().New(connector.SinkContext{Job: "job", Sink: &graph.Sink{Name: "pg", Type: Type, Params: p, Delivery: graph.DeliveryExactlyOnce, Parallelism: 1},
			Parallelism: 1, Logger: discardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		err = op.Open(context.Background())
		if err == nil || !strings.Contains(err.Error(), `table public.t has no column "nope" (it has id, name, amount, tags, ts)`) {
			t.Fatalf("Open: %v", err)
		}
	})
}

// proxy forwards connections to addr to target until the test ends.
func proxy(t *testing.T, addr, target string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer u.Close()
				go io.Copy(u, c)
				io.Copy(c, u)
			}()
		}
	}()
}
