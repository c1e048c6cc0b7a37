package pgsink

import (
	"cmp"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kstreamd/kstreamd/operators"
)

// Mode is how records are written: Insert appends rows, Upsert inserts or
// updates by the key columns and deletes on -D.
type Mode string

// Modes.
const (
	// ModeInsert appends one row per +I (INSERT; an append-only input).
	ModeInsert Mode = "insert"
	// ModeUpsert writes +I and +U as INSERT ... ON CONFLICT (key columns)
	// DO UPDATE, -D as a DELETE by key, and ignores -U (Flink's JDBC
	// upsert sink).
	ModeUpsert Mode = "upsert"
)

// Defaults of Params.
const (
	DefaultBatchSize   = 5000
	DefaultMinBackoff  = 100 * time.Millisecond
	DefaultMaxBackoff  = 10 * time.Second
	DefaultLockTimeout = time.Minute
)

// MaxGIDPrefix bounds GIDPrefix's length: PostgreSQL's transaction
// identifiers hold at most 199 bytes, and "<subtask>-<checkpoint>" needs up
// to 26.
const MaxGIDPrefix = 170

// Params are the params of a sink of type postgres (sinks[].params).
type Params struct {
	// Connection says which database to write to.
	Connection ConnectionParams `yaml:"connection" doc:"The database: {dsn} (a postgres:// URL or key=value string) or {host, port (default 5432), user, password_env (the environment variable holding the password), database, sslmode (default prefer)}; connect_timeout (default 10s)."`
	// Table is the target table, optionally schema-qualified (a.b).
	Table string `yaml:"table" doc:"The table written to, optionally schema-qualified (schema.table); it must exist, with a unique index or primary key on key_columns for upsert."`
	// Columns map record fields or expressions to table columns.
	Columns []ColumnParams `yaml:"columns" doc:"The columns written, each {name, field} or {name, expression}: field a path into the value (a.b; default: the name) or $key, $timestamp (milliseconds), $value; expression an expression over the record. Values go as text and PostgreSQL casts them to the column's type; null or absent is NULL."`
	// KeyColumns are the columns of the upsert key.
	KeyColumns []string `yaml:"key_columns" doc:"The columns of the table's primary key or a unique index: the conflict target of upserts and the key deletes match; required for mode upsert."`
	// Mode is insert or upsert; default upsert with key_columns, else
	// insert.
	Mode Mode `yaml:"mode" doc:"upsert (+I and +U insert or update by key_columns, -D deletes by key, -U is ignored) or insert (append rows; an append-only input); default upsert when key_columns are given, else insert."`
	// BatchSize is the number of rows written per statement.
	BatchSize int `yaml:"batch_size" doc:"Rows buffered before they are written in one statement (and always at a checkpoint barrier); default 5000."`
	// MinBackoff and MaxBackoff bound the retry of an unreachable
	// database.
	MinBackoff time.Duration `yaml:"min_backoff" doc:"First wait before retrying a database that is unreachable (doubling each time); default 100ms."`
	MaxBackoff time.Duration `yaml:"max_backoff" doc:"Longest wait between retries; default 10s."`
	// LockTimeout bounds a wait for a row lock (exactly-once: rows an
	// earlier epoch's prepared transaction holds).
	LockTimeout time.Duration `yaml:"lock_timeout" doc:"Longest wait of a write for a row lock (exactly-once: rows of an earlier epoch whose checkpoint has not completed yet); past it the subtask fails and restarts from the checkpoint; default 1m."`
}

// ConnectionParams are the database connection.
type ConnectionParams struct {
	DSN            string        `yaml:"dsn" doc:"A libpq connection string or postgres:// URL; exclusive with host and the other fields."`
	Host           string        `yaml:"host" doc:"Host name or address."`
	Port           int           `yaml:"port" doc:"Port; default 5432."`
	User           string        `yaml:"user" doc:"User name."`
	PasswordEnv    string        `yaml:"password_env" doc:"Name of the environment variable holding the password (never the password itself in the config)."`
	Database       string        `yaml:"database" doc:"Database name."`
	SSLMode        string        `yaml:"sslmode" doc:"disable, allow, prefer (default), require, verify-ca or verify-full."`
	ConnectTimeout time.Duration `yaml:"connect_timeout" doc:"Timeout of one connection attempt; default 10s."`
}

// ColumnParams is one column of the table.
type ColumnParams struct {
	Name       string               `yaml:"name" doc:"The column name; required, unique."`
	Field      string               `yaml:"field" doc:"A path into the value (a.b), or $key, $timestamp, $value; default: the name."`
	Expression operators.Expression `yaml:"expression" doc:"An expression over the record giving the value; exclusive with field."`
}

// NewParams returns the params of a postgres sink holding the defaults.
func NewParams() *Params {
	return &Params{BatchSize: DefaultBatchSize, MinBackoff: DefaultMinBackoff, MaxBackoff: DefaultMaxBackoff, LockTimeout: DefaultLockTimeout}
}

var sslModes = []string{"disable", "allow", "prefer", "require", "verify-ca", "verify-full"}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// CheckParams implements operators.ParamsChecker: every problem, with its
// field path.
func (p *Params) CheckParams(report func(field, msg string)) {
	c := p.Connection
	hostSet := c.Host != "" || c.Port != 0 || c.User != "" || c.PasswordEnv != "" || c.Database != "" || c.SSLMode != ""
	switch {
	case c.DSN == "" && !hostSet:
		report("connection", "required: dsn, or host, user and database")
	case c.DSN != "" && hostSet:
		report("connection.dsn", "exclusive with host, port, user, password_env, database and sslmode")
	case c.DSN != "":
		if _, err := pgx.ParseConfig(c.DSN); err != nil {
			report("connection.dsn", "does not parse: "+redact(err.Error(), c.DSN))
		}
	default:
		if c.Host == "" {
			report("connection.host", "required")
		}
		if c.Database == "" {
			report("connection.database", "required")
		}
		if c.User == "" {
			report("connection.user", "required")
		}
		if c.Port < 0 || c.Port > 65535 {
			report("connection.port", fmt.Sprintf("must be in 1..65535, got %d", c.Port))
		}
		if c.PasswordEnv != "" && !envNameRE.MatchString(c.PasswordEnv) {
			report("connection.password_env", fmt.Sprintf("must be an environment variable name, got %q", c.PasswordEnv))
		}
		if c.SSLMode != "" && !slices.Contains(sslModes, c.SSLMode) {
			report("connection.sslmode", fmt.Sprintf("must be one of %s, got %q", strings.Join(sslModes, ", "), c.SSLMode))
		}
	}
	if c.ConnectTimeout < 0 {
		report("connection.connect_timeout", "must not be negative")
	}
	if p.Table == "" {
		report("table", "required")
	} else if _, err := tableIdent(p.Table); err != nil {
		report("table", err.Error())
	}
	if len(p.Columns) == 0 {
		report("columns", "at least one column is required")
	}
	seen := map[string]bool{}
	for i, col := range p.Columns {
		at := fmt.Sprintf("columns[%d]", i)
		switch {
		case col.Name == "":
			report(at+".name", "required")
		case seen[col.Name]:
			report(at+".name", fmt.Sprintf("duplicate column %q", col.Name))
		}
		seen[col.Name] = true
		if col.Field != "" && col.Expression.IsSet() {
			report(at+".expression", "exclusive with field")
		}
	}
	mode := p.mode()
	switch mode {
	case ModeUpsert:
		if len(p.KeyColumns) == 0 {
			report("key_columns", "required for mode upsert: the columns of the table's primary key or a unique index")
		}
	case ModeInsert:
		if len(p.KeyColumns) > 0 && p.Mode == ModeInsert {
			report("key_columns", "only for mode upsert")
		}
	default:
		report("mode", fmt.Sprintf("must be insert or upsert, got %q", p.Mode))
	}
	keys := map[string]bool{}
	for i, k := range p.KeyColumns {
		at := fmt.Sprintf("key_columns[%d]", i)
		switch {
		case keys[k]:
			report(at, fmt.Sprintf("duplicate key column %q", k))
		case !seen[k]:
			report(at, fmt.Sprintf("%q is not among columns", k))
		}
		keys[k] = true
	}
	if p.BatchSize < 1 {
		report("batch_size", fmt.Sprintf("must be at least 1, got %d", p.BatchSize))
	}
	if p.MinBackoff <= 0 || p.MaxBackoff < p.MinBackoff {
		report("min_backoff", "must be positive and at most max_backoff")
	}
	if p.LockTimeout < 0 {
		report("lock_timeout", "must not be negative")
	}
}

// mode is the effective mode.
func (p *Params) mode() Mode {
	if p.Mode != "" {
		return p.Mode
	}
	if len(p.KeyColumns) > 0 {
		return ModeUpsert
	}
	return ModeInsert
}

// ConnConfig returns the pgx connection config of the params; a password
// comes from the environment variable password_env names.
func (p *Params) ConnConfig() (*pgx.ConnConfig, error) {
	c := p.Connection
	dsn := c.DSN
	if dsn == "" {
		u := url.URL{Scheme: "postgres", Host: net.JoinHostPort(c.Host, strconv.Itoa(cmp.Or(c.Port, 5432))), Path: "/" + c.Database}
		if c.PasswordEnv != "" {
			pw, ok := os.LookupEnv(c.PasswordEnv)
			if !ok {
				return nil, fmt.Errorf("pgsink: the environment variable %s (connection.password_env) is not set", c.PasswordEnv)
			}
			u.User = url.UserPassword(c.User, pw)
		} else {
			u.User = url.User(c.User)
		}
		q := url.Values{}
		if c.SSLMode != "" {
			q.Set("sslmode", c.SSLMode)
		}
		u.RawQuery = q.Encode()
		dsn = u.String()
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("pgsink: connection: %s", redact(err.Error(), dsn))
	}
	cfg.ConnectTimeout = cmp.Or(c.ConnectTimeout, cmp.Or(cfg.ConnectTimeout, 10*time.Second))
	cfg.RuntimeParams["application_name"] = "kstreamd"
	return cfg, nil
}

// redact removes the DSN (which may hold a password) from an error text.
func redact(msg, dsn string) string {
	if dsn == "" {
		return msg
	}
	return strings.ReplaceAll(msg, dsn, "<dsn>")
}

// tableIdent returns the quoted identifier of table "t" or "schema.t".
func tableIdent(table string) (pgx.Identifier, error) {
	parts := strings.Split(table, ".")
	if len(parts) > 2 || slices.Contains(parts, "") {
		return nil, fmt.Errorf("must be table or schema.table, got %q", table)
	}
	return pgx.Identifier(parts), nil
}
