package pgsink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/tidwall/gjson"

	"github.com/kstreamd/kstreamd/expression"
	"github.com/kstreamd/kstreamd/operators"
	"github.com/kstreamd/kstreamd/runtime"
)

// column is one mapped column with its SQL type (format_type).
type column struct {
	ident   string // quoted name
	field   string // gjson path, or $key, $timestamp, $value; "" with expr
	expr    operators.Expression
	sqlType string
}

// op is one buffered row change: an upsert (or insert) of vals, or a
// delete of the row whose key vals holds (upsert mode: the last change of
// its key in the batch; delFirst: an earlier change of the batch deleted
// the row, so it is deleted before the upsert, which then inserts afresh).
type op struct {
	vals     []pgtype.Text
	del      bool
	delFirst bool
}

// writer is one subtask's connection to the database and its batch of
// row changes (Flink's JdbcOutputFormat with its batch). It is owned by
// the subtask goroutine.
type writer struct {
	p       *Params
	connCfg *pgx.ConnConfig
	table   pgx.Identifier
	mode    Mode
	name    string
	logger  *slog.Logger
	metrics *Metrics

	conn           *pgx.Conn
	cols           []column
	keyIdx         []int // positions of the key columns in cols
	upsert, delete string

	ops   []op
	index map[string]int // upsert mode: key -> position in ops
	env   operators.RecordEnv
	key   []byte // scratch for the batch key
}

// newWriter returns the writer of the sink called name.
func newWriter(name string, p *Params, m *Metrics, logger *slog.Logger) (*writer, error) {
	cc, err := p.ConnConfig()
	if err != nil {
		return nil, err
	}
	table, err := tableIdent(p.Table)
	if err != nil {
		return nil, err
	}
	w := &writer{p: p, connCfg: cc, table: table, mode: p.mode(), name: name, logger: logger, metrics: m, index: map[string]int{}}
	for _, c := range p.Columns {
		col := column{ident: pgx.Identifier{c.Name}.Sanitize(), field: c.Field, expr: c.Expression}
		if col.field == "" && !col.expr.IsSet() {
			col.field = c.Name
		}
		w.cols = append(w.cols, col)
	}
	for _, k := range p.KeyColumns {
		for i, c := range p.Columns {
			if c.Name == k {
				w.keyIdx = append(w.keyIdx, i)
			}
		}
	}
	return w, nil
}

// connected returns the open connection, connecting (with retries while
// the database is unreachable) when there is none or it broke.
func (w *writer) connected(ctx context.Context) (*pgx.Conn, error) {
	if w.conn != nil && !w.conn.IsClosed() {
		return w.conn, nil
	}
	w.conn = nil
	err := retry(ctx, w.p, w.metrics, w.name, w.logger, "connect", func() error {
		conn, err := pgx.ConnectConfig(ctx, w.connCfg)
		if err != nil {
			return err
		}
		if err := w.prepare(ctx, conn); err != nil {
			conn.Close(context.Background())
			return err
		}
		w.conn = conn
		return nil
	})
	return w.conn, err
}

// prepare sets the session up and, on the first connection, reads the
// table's column types and builds the statements.
func (w *writer) prepare(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, fmt.Sprintf("SET lock_timeout = %d", w.p.LockTimeout.Milliseconds())); err != nil {
		return err
	}
	if w.upsert != "" {
		return nil
	}
	rows, err := conn.Query(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
		WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped`, w.table.Sanitize())
	if err != nil {
		return fmt.Errorf("pgsink: sink %s: table %s: %w", w.name, w.p.Table, err)
	}
	types := map[string]string{}
	var names []string
	for rows.Next() {
		var n, t string
		if err := rows.Scan(&n, &t); err != nil {
			return err
		}
		types[n] = t
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("pgsink: sink %s: table %s: %w", w.name, w.p.Table, err)
	}
	for i, c := range w.p.Columns {
		t, ok := types[c.Name]
		if !ok {
			return &permanentError{fmt.Errorf("pgsink: sink %s: table %s has no column %q (it has %s)", w.name, w.p.Table, c.Name, strings.Join(names, ", "))}
		}
		w.cols[i].sqlType = t
	}
	w.upsert, w.delete = w.statements()
	return nil
}

// statements returns the write statement (INSERT, with ON CONFLICT in
// upsert mode) and the delete statement, each over one text[] parameter
// per column unnested into rows: one statement text for every batch size,
// prepared once per connection.
func (w *writer) statements() (write, del string) {
	var names, params, alias, sel []string
	for i, c := range w.cols {
		names = append(names, c.ident)
		params = append(params, fmt.Sprintf("$%d::text[]", i+1))
		alias = append(alias, fmt.Sprintf("v%d", i+1))
		sel = append(sel, fmt.Sprintf("u.v%d::%s", i+1, c.sqlType))
	}
	table := w.table.Sanitize()
	write = fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM unnest(%s) AS u(%s)", table,
		strings.Join(names, ", "), strings.Join(sel, ", "), strings.Join(params, ", "), strings.Join(alias, ", "))
	if w.mode != ModeUpsert {
		return write, ""
	}
	var conflict, set, kparams, kalias, match []string
	isKey := map[int]bool{}
	for j, i := range w.keyIdx {
		isKey[i] = true
		c := w.cols[i]
		conflict = append(conflict, c.ident)
		kparams = append(kparams, fmt.Sprintf("$%d::text[]", j+1))
		kalias = append(kalias, fmt.Sprintf("k%d", j+1))
		match = append(match, fmt.Sprintf("t.%s = u.k%d::%s", c.ident, j+1, c.sqlType))
	}
	for i, c := range w.cols {
		if !isKey[i] {
			set = append(set, fmt.Sprintf("%s = EXCLUDED.%s", c.ident, c.ident))
		}
	}
	if len(set) == 0 {
		write += fmt.Sprintf(" ON CONFLICT (%s) DO NOTHING", strings.Join(conflict, ", "))
	} else {
		write += fmt.Sprintf(" ON CONFLICT (%s) DO UPDATE SET %s", strings.Join(conflict, ", "), strings.Join(set, ", "))
	}
	del = fmt.Sprintf("DELETE FROM %s AS t USING unnest(%s) AS u(%s) WHERE %s", table,
		strings.Join(kparams, ", "), strings.Join(kalias, ", "), strings.Join(match, " AND "))
	return write, del
}

// add buffers the change rec carries: +I (and, in upsert mode, +U) as an
// upsert, -D as a delete by key (upsert mode); -U is ignored, as by
// Flink's upsert sinks (the +U that follows replaces the row).
func (w *writer) add(rec *runtime.Record) error {
	switch rec.Change {
	case runtime.ChangeUpdateBefore:
		return nil
	case runtime.ChangeDelete, runtime.ChangeUpdateAfter:
		if w.mode != ModeUpsert {
			return fmt.Errorf("pgsink: sink %s: a %s record reached a sink in mode insert (an append-only input only): use mode upsert with key_columns", w.name, rec.Change)
		}
	}
	del := rec.Change == runtime.ChangeDelete
	vals := make([]pgtype.Text, len(w.cols))
	var env *expression.Env
	for i := range w.cols {
		if del && !w.isKey(i) {
			continue
		}
		v, err := w.value(i, rec, &env)
		if err != nil {
			return err
		}
		vals[i] = v
	}
	if w.mode != ModeUpsert {
		w.ops = append(w.ops, op{vals: vals})
		return nil
	}
	w.key = w.key[:0]
	for _, i := range w.keyIdx {
		if !vals[i].Valid {
			return fmt.Errorf("pgsink: sink %s: key column %s is null", w.name, w.cols[i].ident)
		}
		w.key = append(w.key, vals[i].String...)
		w.key = append(w.key, 0)
	}
	if at, ok := w.index[string(w.key)]; ok {
		prev := w.ops[at]
		w.ops[at] = op{vals: vals, del: del, delFirst: prev.del || prev.delFirst}
		return nil
	}
	w.index[string(w.key)] = len(w.ops)
	w.ops = append(w.ops, op{vals: vals, del: del})
	return nil
}

func (w *writer) isKey(i int) bool {
	for _, k := range w.keyIdx {
		if k == i {
			return true
		}
	}
	return false
}

// value returns column i's value for rec as text (PostgreSQL casts it to
// the column type); Valid false is NULL. env is the record's expression
// environment, set up on first need.
func (w *writer) value(i int, rec *runtime.Record, env **expression.Env) (pgtype.Text, error) {
	c := &w.cols[i]
	if c.expr.IsSet() {
		if *env == nil {
			*env = w.env.Reset(rec)
		}
		v, err := c.expr.Program().Eval(*env)
		if err != nil {
			return pgtype.Text{}, fmt.Errorf("pgsink: sink %s: column %s: %w", w.name, c.ident, err)
		}
		return textOf(v)
	}
	switch c.field {
	case "$key":
		return pgtype.Text{String: string(rec.Key), Valid: rec.Key != nil}, nil
	case "$timestamp":
		return pgtype.Text{String: strconv.FormatInt(rec.Timestamp.UnixMilli(), 10), Valid: true}, nil
	case "$value":
		if rec.Format == runtime.FormatText || rec.Value == nil {
			return pgtype.Text{String: string(rec.Value), Valid: rec.Value != nil}, nil
		}
		return jsonText(gjson.ParseBytes(rec.Value)), nil
	}
	if rec.Format == runtime.FormatText {
		return pgtype.Text{}, fmt.Errorf("pgsink: sink %s: column %s: field %q of a value that is not JSON (format string or bytes): use $value", w.name, c.ident, c.field)
	}
	return jsonText(gjson.GetBytes(rec.Value, c.field)), nil
}

// jsonText is the text of a JSON value: a string's contents, a number's
// exact text, true/false, an object's or array's JSON; NULL for null or
// absent.
func jsonText(r gjson.Result) pgtype.Text {
	switch r.Type {
	case gjson.Null:
		return pgtype.Text{}
	case gjson.String:
		return pgtype.Text{String: r.Str, Valid: true}
	case gjson.True:
		return pgtype.Text{String: "true", Valid: true}
	case gjson.False:
		return pgtype.Text{String: "false", Valid: true}
	}
	return pgtype.Text{String: r.Raw, Valid: true}
}

// textOf is the text of an expression result.
func textOf(v any) (pgtype.Text, error) {
	switch x := v.(type) {
	case nil:
		return pgtype.Text{}, nil
	case string:
		return pgtype.Text{String: x, Valid: true}, nil
	case bool:
		return pgtype.Text{String: strconv.FormatBool(x), Valid: true}, nil
	case int64:
		return pgtype.Text{String: strconv.FormatInt(x, 10), Valid: true}, nil
	case uint64:
		return pgtype.Text{String: strconv.FormatUint(x, 10), Valid: true}, nil
	}
	b, err := expression.EncodeJSON(v)
	if err != nil {
		return pgtype.Text{}, err
	}
	return pgtype.Text{String: string(b), Valid: true}, nil
}

// buffered returns the number of buffered changes.
func (w *writer) buffered() int { return len(w.ops) }

// flush writes every buffered change on conn, inside the transaction the
// caller opened, in statements of at most batch_size rows: in upsert mode
// first the deletes (a key's delete, and the delete before an upsert that
// follows one), then the upserts.
func (w *writer) flush(ctx context.Context, conn *pgx.Conn) error {
	if w.mode == ModeUpsert {
		if err := w.execChunks(ctx, conn, w.delete, w.keyIdx, func(o *op) bool { return o.del || o.delFirst }); err != nil {
			return err
		}
	}
	all := make([]int, len(w.cols))
	for i := range all {
		all[i] = i
	}
	if err := w.execChunks(ctx, conn, w.upsert, all, func(o *op) bool { return !o.del }); err != nil {
		return err
	}
	w.reset()
	return nil
}

// execChunks runs stmt over the ops keep selects, columns cols of each as
// the text[] parameters, batch_size rows at a time.
func (w *writer) execChunks(ctx context.Context, conn *pgx.Conn, stmt string, cols []int, keep func(*op) bool) error {
	arrays := make([][]pgtype.Text, len(cols))
	args := make([]any, len(cols))
	run := func() error {
		if len(arrays[0]) == 0 {
			return nil
		}
		for j := range arrays {
			args[j] = arrays[j]
		}
		if _, err := conn.Exec(ctx, stmt, args...); err != nil {
			return fmt.Errorf("pgsink: sink %s: write: %w", w.name, err)
		}
		for j := range arrays {
			arrays[j] = arrays[j][:0]
		}
		return nil
	}
	for i := range w.ops {
		o := &w.ops[i]
		if !keep(o) {
			continue
		}
		for j, c := range cols {
			arrays[j] = append(arrays[j], o.vals[c])
		}
		if len(arrays[0]) >= w.p.BatchSize {
			if err := run(); err != nil {
				return err
			}
		}
	}
	return run()
}

// reset drops the buffered changes.
func (w *writer) reset() {
	clear(w.ops)
	w.ops = w.ops[:0]
	clear(w.index)
}

// close closes the connection.
func (w *writer) close() {
	if w.conn != nil {
		w.conn.Close(context.Background())
		w.conn = nil
	}
}

// permanentError is an error retry does not retry.
type permanentError struct{ error }

func (e *permanentError) Unwrap() error { return e.error }

// retryable reports whether err means the database is unreachable or
// shedding load (a connection failure, SQLSTATE class 08, 57P01-57P03
// shutdown or start-up, 53300 too many connections), so the operation is
// tried again; any other error (SQL, constraint, missing table) is not.
func retryable(err error) bool {
	var pe *permanentError
	if errors.As(err, &pe) || errors.Is(err, context.Canceled) {
		return false
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return strings.HasPrefix(pg.Code, "08") || pg.Code == "57P01" || pg.Code == "57P02" || pg.Code == "57P03" || pg.Code == "53300"
	}
	var ne net.Error
	var ce *pgconn.ConnectError
	return errors.As(err, &ce) || errors.As(err, &ne) || pgconn.SafeToRetry(err) || pgconn.Timeout(err) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(err.Error(), "conn closed")
}

// retry runs f until it succeeds, returns an error that is not retryable,
// or ctx ends, waiting with exponential back-off (min_backoff to
// max_backoff) between attempts; each retry is logged and counted, and
// kstreamd_postgres_sink_up says whether the database answers.
func retry(ctx context.Context, p *Params, m *Metrics, sink string, logger *slog.Logger, what string, f func() error) error {
	d := p.MinBackoff
	for {
		err := f()
		if err == nil {
			m.up(sink, true)
			return nil
		}
		if !retryable(err) || ctx.Err() != nil {
			return err
		}
		m.up(sink, false)
		m.retried(sink)
		logger.Warn("postgres sink: database unreachable; retrying", "sink", sink, "operation", what, "backoff", d, "error", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgsink: sink %s: %s: %w (while retrying: %v)", sink, what, ctx.Err(), err)
		case <-time.After(d):
		}
		d = min(2*d, p.MaxBackoff)
	}
}
