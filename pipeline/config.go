package pipeline

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/kstreamd/kstreamd/state/keygroup"
)

// Built-in operator types an operators[].type may name.
const (
	// OperatorShapePairMatcher is the keyed broadcast operator that pairs
	// items of one key (a color) against the shape-pair rules broadcast to
	// every subtask. It needs key_by and broadcast.
	OperatorShapePairMatcher = "shape_pair_matcher"
	// OperatorCountWindowAverage averages a numeric field over a count
	// window per key. It needs key_by and refuses broadcast.
	OperatorCountWindowAverage = "count_window_average"
	// OperatorKeyedCount counts records per key. It needs key_by and refuses
	// broadcast.
	OperatorKeyedCount = "keyed_count"
)

// KnownOperatorTypes lists every built-in operator type, in the order
// messages list them. Every one of them is keyed (needs key_by); only
// OperatorShapePairMatcher takes a broadcast input, and requires it. It is
// the one list Validate checks operators[].type against; do not modify it.
var KnownOperatorTypes = []string{
	OperatorShapePairMatcher,
	OperatorCountWindowAverage,
	OperatorKeyedCount,
}

// operatorKeyed reports whether an operator type partitions its input by
// key_by (a KeyedStream in Flink's terms). All built-in types are keyed.
func operatorKeyed(typ string) bool { return slices.Contains(KnownOperatorTypes, typ) }

// operatorBroadcast reports whether an operator type reads a broadcast
// input (Flink's KeyedBroadcastProcessFunction); such types require one.
func operatorBroadcast(typ string) bool { return typ == OperatorShapePairMatcher }

// StartFrom says where a source starts reading a partition that has no
// committed position yet.
type StartFrom string

// StartFrom values.
const (
	StartFromEarliest StartFrom = "earliest" // the log start offset
	StartFromLatest   StartFrom = "latest"   // the end offset: only records produced from now on
)

// RecordFormat is how a source decodes record values.
type RecordFormat string

// RecordFormatJSON decodes each record value as one JSON object. It is the
// only format for now.
const RecordFormatJSON RecordFormat = "json"

// Delivery is a sink's delivery guarantee.
type Delivery string

// Delivery values.
const (
	// DeliveryAtLeastOnce waits for the broker's acknowledgement of every
	// record; after a failure some records may be written twice.
	DeliveryAtLeastOnce Delivery = "at-least-once"
	// DeliveryNone fires and forgets: records may be lost.
	DeliveryNone Delivery = "none"
	// DeliveryExactlyOnce writes one Kafka transaction per checkpoint
	// epoch, committed when the checkpoint completes (two-phase commit):
	// read_committed readers see every record once. It needs checkpoints.
	DeliveryExactlyOnce Delivery = "exactly-once"
)

// StateBackend names where keyed state lives.
type StateBackend string

// StateBackend values.
const (
	StateBackendHashMap StateBackend = "hashmap" // on the heap, full snapshots
	StateBackendPebble  StateBackend = "pebble"  // one Pebble DB per keyed subtask under the state dir
)

// LogLevel is the least severe level logged.
type LogLevel string

// LogLevel values.
const (
	LogLevelDebug LogLevel = "debug"
	LogLevelInfo  LogLevel = "info"
	LogLevelWarn  LogLevel = "warn"
	LogLevelError LogLevel = "error"
)

// SlogLevel returns the slog level of l; an unknown level (which Validate
// refuses) maps to slog.LevelInfo.
func (l LogLevel) SlogLevel() slog.Level {
	switch l {
	case LogLevelDebug:
		return slog.LevelDebug
	case LogLevelWarn:
		return slog.LevelWarn
	case LogLevelError:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

// LogFormat is the log line format.
type LogFormat string

// LogFormat values.
const (
	LogFormatText LogFormat = "text" // slog.TextHandler: key=value pairs
	LogFormatJSON LogFormat = "json" // slog.JSONHandler: one JSON object per line
)

// Config is one pipeline: the job, where it keeps its files, the Kafka
// cluster, and the graph of sources, operators and sinks. It is what
// `kstreamd run --config FILE` runs and `kstreamd validate --config FILE`
// checks.
//
// Build one with Load or Parse, which start from Default, decode the file
// strictly and Validate the result. A Config built in code should also start
// from Default and be checked with Validate. A Config is a plain value: it is
// not safe for concurrent modification, and concurrent reads are fine.
type Config struct {
	// Job names the job and sets its default parallelism.
	Job JobConfig `yaml:"job"`
	// DataDir is the root of every file kstreamd writes: the embedded
	// broker's log and the state backend, unless their own dirs are set.
	// Default "./data"; a relative path resolves against the process's
	// working directory.
	DataDir string `yaml:"data_dir"`
	// Kafka is the cluster the job reads from and writes to.
	Kafka KafkaConfig `yaml:"kafka"`
	// State selects the keyed state backend.
	State StateConfig `yaml:"state"`
	// Checkpoints configures consistent checkpoints, restore and savepoints.
	Checkpoints CheckpointsConfig `yaml:"checkpoints"`
	// Metrics is the HTTP listener of /metrics and /healthz.
	Metrics MetricsConfig `yaml:"metrics"`
	// Log sets the level and format of the process's log.
	Log LogConfig `yaml:"log"`
	// Sources are the Kafka topics the job reads; at least one.
	Sources []SourceConfig `yaml:"sources"`
	// Operators transform the streams, in data-flow order: an operator's
	// input is a source or an operator listed before it; at least one.
	Operators []OperatorConfig `yaml:"operators"`
	// Sinks write streams to Kafka topics; at least one.
	Sinks []SinkConfig `yaml:"sinks"`
	// Demo is the built-in demo producer.
	Demo DemoConfig `yaml:"demo"`

	// src records where each field was written, so Validate can name
	// file:line:col; nil for a Config built in code.
	src *origin
}

// JobConfig names the job and sets its parallelism.
type JobConfig struct {
	// Name identifies the job; it names the job's checkpoint and state
	// directories. Required; must match [a-z0-9][a-z0-9_-]*.
	Name string `yaml:"name"`
	// Parallelism is the number of subtasks of every source and keyed
	// operator that does not set its own. Default 2; in [1, 32768].
	Parallelism int `yaml:"parallelism"`
	// MaxParallelism is the number of key groups keyed state is split
	// into, the upper bound of any keyed operator's parallelism. It is part
	// of the checkpoint format and cannot change across a restore. Default 0:
	// derived as keygroup.DefaultMaxParallelism of the largest operator
	// parallelism (see Config.MaxParallelism); otherwise in [1, 32768] and at
	// least every operator's parallelism.
	MaxParallelism int `yaml:"max_parallelism"`
}

// KafkaConfig is the cluster the job talks to.
type KafkaConfig struct {
	// Brokers are the seed brokers, each host:port. Required unless
	// Embedded.Enabled; when it is empty and Embedded.Enabled, the embedded
	// broker's address is used (see Config.Brokers). Default empty.
	Brokers []string `yaml:"brokers"`
	// ClientID is the Kafka client id of every client the job opens.
	// Default "kstreamd"; must not be empty.
	ClientID string `yaml:"client_id"`
	// Embedded runs an in-process development broker.
	Embedded EmbeddedKafkaConfig `yaml:"embedded"`
	// TLS dials the brokers with TLS: CA, client certificate, server name.
	// Default off. Validate reads its files (see TLSConfig).
	TLS TLSConfig `yaml:"tls"`
	// SASL authenticates every client: PLAIN, SCRAM-SHA-256 or
	// SCRAM-SHA-512, the password from an environment variable or a file.
	// Default off. Validate reads the password (see SASLConfig).
	SASL SASLConfig `yaml:"sasl"`
}

// EmbeddedKafkaConfig is an in-process development broker (franz-go's kfake)
// so the job runs on a fresh machine; production leaves it disabled and points
// Brokers at a real cluster.
type EmbeddedKafkaConfig struct {
	// Enabled starts the broker before the job. Default false.
	Enabled bool `yaml:"enabled"`
	// Address is the host:port the broker listens on (an empty host listens
	// on every interface). Default "127.0.0.1:9092".
	Address string `yaml:"address"`
	// DataDir holds the broker's log, which survives restarts. Default ""
	// meaning "<data_dir>/kafka" (see Config.EmbeddedDataDir).
	DataDir string `yaml:"data_dir"`
	// Partitions is the partition count of each topic the broker creates.
	// Default 4; >= 1.
	Partitions int `yaml:"partitions"`
}

// StateConfig selects and tunes the keyed state backend.
type StateConfig struct {
	// Backend is "hashmap" or "pebble". Default "pebble".
	Backend StateBackend `yaml:"backend"`
	// Dir holds the backend's files. Default "" meaning "<data_dir>/state"
	// (see Config.StateDir).
	Dir string `yaml:"dir"`
	// BlockCacheBytes is the size in bytes of the block cache the Pebble
	// instances of this process share. Default 67108864 (64 MiB); >= 0.
	BlockCacheBytes int64 `yaml:"block_cache_bytes"`
}

// CheckpointsConfig configures checkpoints (Flink's execution.checkpointing.*
// options) and where checkpoints and savepoints are kept.
type CheckpointsConfig struct {
	// Interval is the time between checkpoint triggers, a Go duration such
	// as "10s". Default 0: no periodic checkpoints (savepoints still work);
	// otherwise >= 10ms.
	Interval time.Duration `yaml:"interval"`
	// Timeout aborts a checkpoint that has not completed after this long.
	// Default "10m"; > 0.
	Timeout time.Duration `yaml:"timeout"`
	// MinPause is the least time between the end of one checkpoint and the
	// start of the next. Default 0; >= 0.
	MinPause time.Duration `yaml:"min_pause"`
	// TolerableFailures is how many consecutive checkpoints may fail before
	// the job fails. Default 3; >= 0 (Flink's default is 0).
	TolerableFailures int `yaml:"tolerable_failures"`
	// Retained is how many completed checkpoints are kept. Default 3; >= 1.
	Retained int `yaml:"retained"`
	// Incremental makes Pebble checkpoints upload only the files the
	// retained checkpoints do not already hold. Default false.
	Incremental bool `yaml:"incremental"`
	// Dir holds the checkpoints, as <dir>/<job>/chk-<n>. Default "" meaning
	// "<data_dir>/checkpoints" (see Config.CheckpointDir).
	Dir string `yaml:"dir"`
	// SavepointDir receives savepoints. Default "" meaning
	// "<data_dir>/savepoints" (see Config.SavepointDir).
	SavepointDir string `yaml:"savepoint_dir"`
}

// MetricsConfig is the HTTP listener of /metrics and /healthz.
type MetricsConfig struct {
	// Address is the host:port to listen on (an empty host listens on every
	// interface). It serves /metrics, /healthz, /readyz and the job API
	// under /api/v1/. Default "127.0.0.1:9249"; write `address: ""` to
	// disable the listener.
	Address string `yaml:"address"`
	// BearerTokenEnv names an environment variable holding a bearer token;
	// when set (or BearerTokenFile), every /api/v1/ request must carry
	// "Authorization: Bearer <token>". /metrics and the health endpoints
	// stay open. Default "": no token.
	BearerTokenEnv string `yaml:"bearer_token_env"`
	// BearerTokenFile is a file holding the bearer token (a trailing
	// newline is ignored). At most one of BearerTokenEnv and
	// BearerTokenFile. Default "".
	BearerTokenFile string `yaml:"bearer_token_file"`
}

// BearerToken returns the API's bearer token from metrics.bearer_token_env
// or metrics.bearer_token_file, "" when none is configured. It fails when the
// variable is unset or empty, or the file cannot be read or is empty.
func (c *Config) BearerToken() (string, error) {
	m := &c.Metrics
	switch {
	case m.BearerTokenEnv != "":
		t := os.Getenv(m.BearerTokenEnv)
		if t == "" {
			return "", fmt.Errorf("metrics.bearer_token_env: environment variable %s is unset or empty", m.BearerTokenEnv)
		}
		return t, nil
	case m.BearerTokenFile != "":
		b, err := os.ReadFile(m.BearerTokenFile)
		if err != nil {
			return "", fmt.Errorf("metrics.bearer_token_file: %w", err)
		}
		t := strings.TrimRight(string(b), "\r\n")
		if t == "" {
			return "", fmt.Errorf("metrics.bearer_token_file: %s is empty", m.BearerTokenFile)
		}
		return t, nil
	}
	return "", nil
}

// LogConfig sets the process's log.
type LogConfig struct {
	// Level is debug, info, warn or error. Default "info".
	Level LogLevel `yaml:"level"`
	// Format is text or json. Default "text".
	Format LogFormat `yaml:"format"`
}

// SourceConfig reads one Kafka topic.
type SourceConfig struct {
	// Name identifies the source; operators and sinks refer to it by name.
	// Required; unique among sources, operators and sinks.
	Name string `yaml:"name"`
	// Topic is the Kafka topic read. Required; a valid topic name: at most
	// 249 of [a-zA-Z0-9._-], not "." or "..".
	Topic string `yaml:"topic"`
	// StartFrom is where a partition without a committed position starts:
	// earliest or latest. Default "earliest".
	StartFrom StartFrom `yaml:"start_from"`
	// Format decodes record values; only "json" for now. Default "json".
	Format RecordFormat `yaml:"format"`
	// Parallelism is the number of source subtasks. Default 0 meaning
	// job.parallelism (see Config.SourceParallelism); else in [1, 32768].
	Parallelism int `yaml:"parallelism"`
	// OnError is what happens to a bad record (not JSON, not an object, key
	// field missing or of the wrong type, empty, over max_record_bytes, or
	// an undecodable rule on a broadcast source): "fail" stops the job
	// with an error naming topic, partition and offset; "skip" counts it in
	// kstreamd_source_records_skipped_total and logs it (rate-limited);
	// "dead-letter" writes the original record to dead_letter_topic with
	// headers kstreamd.error, kstreamd.source.topic,
	// kstreamd.source.partition and kstreamd.source.offset, and counts it in
	// kstreamd_source_records_dead_lettered_total. Default "skip".
	OnError OnError `yaml:"on_error"`
	// DeadLetterTopic receives bad records when on_error is dead-letter.
	// Required then; a valid topic name.
	DeadLetterTopic string `yaml:"dead_letter_topic"`
	// MaxRecordBytes is the largest record value accepted, in bytes; a
	// larger one is a bad record. Default 1048576 (1 MiB); 0 means no limit.
	MaxRecordBytes int `yaml:"max_record_bytes"`
	// PartitionDiscoveryInterval is how often the source looks for
	// partitions added to its topic (read from the earliest offset, Flink's
	// partition.discovery.interval.ms). Default "30s"; 0 disables discovery
	// after start; otherwise >= 100ms.
	PartitionDiscoveryInterval time.Duration `yaml:"partition_discovery_interval"`
}

// OnError is a source's bad-record policy.
type OnError string

// OnError values.
const (
	OnErrorFail       OnError = "fail"
	OnErrorSkip       OnError = "skip"
	OnErrorDeadLetter OnError = "dead-letter"
)

// setDefaults sets the defaults of a list item before it is decoded.
func (s *SourceConfig) setDefaults() {
	s.StartFrom = StartFromEarliest
	s.Format = RecordFormatJSON
	s.OnError = OnErrorSkip
	s.MaxRecordBytes = 1 << 20
	s.PartitionDiscoveryInterval = 30 * time.Second
}

// OperatorConfig is one built-in operator.
type OperatorConfig struct {
	// Name identifies the operator; later operators and sinks refer to it
	// by name. Required; unique among sources, operators and sinks.
	Name string `yaml:"name"`
	// Type is one of KnownOperatorTypes. Required.
	Type string `yaml:"type"`
	// Input is the name of the source or earlier operator whose records the
	// operator reads. Required.
	Input string `yaml:"input"`
	// KeyBy is the top-level JSON field of the input's records whose value
	// is the key. Required for keyed types (all of KnownOperatorTypes).
	KeyBy string `yaml:"key_by"`
	// Broadcast is the name of a source whose records reach every subtask
	// (the rules stream). Required for shape_pair_matcher, refused for the
	// other types. Default "".
	Broadcast string `yaml:"broadcast"`
	// Parallelism is the number of subtasks. Default 0 meaning
	// job.parallelism (see Config.OperatorParallelism); else in [1, 32768]
	// and at most job.max_parallelism.
	Parallelism int `yaml:"parallelism"`
	// AsyncState enables Flink's State V2 asynchronous state access for
	// this keyed operator (EnableAsyncState); default false; only
	// count_window_average and keyed_count support it for now.
	AsyncState bool `yaml:"async_state"`
}

// SinkConfig writes one stream to a Kafka topic.
type SinkConfig struct {
	// Name identifies the sink. Required; unique among sources, operators
	// and sinks.
	Name string `yaml:"name"`
	// Input is the name of the operator (or source) whose records are
	// written. Required.
	Input string `yaml:"input"`
	// Topic is the Kafka topic written. Required; a valid topic name.
	Topic string `yaml:"topic"`
	// Delivery is exactly-once, at-least-once or none. Default
	// "at-least-once". exactly-once needs checkpoints.interval > 0.
	Delivery Delivery `yaml:"delivery"`
	// Parallelism is the number of sink subtasks. Default 0 meaning the
	// input's parallelism (see Config.SinkParallelism); else in [1, 32768].
	Parallelism int `yaml:"parallelism"`
	// TransactionalIDPrefix starts the Kafka transactional ids of an
	// exactly-once sink: <prefix>-<subtask>-<slot>. Default "" meaning
	// "kstreamd-<job>-<sink name>" (see Config.TransactionalIDPrefix). Two
	// jobs must never share a prefix.
	TransactionalIDPrefix string `yaml:"transactional_id_prefix"`
	// TransactionTimeout is the Kafka transaction timeout of an
	// exactly-once sink. It must exceed checkpoints.interval plus the time
	// a restart takes (a transaction pre-committed before a crash must
	// still be open when the restarted job commits it), and must not
	// exceed the brokers' transaction.max.timeout.ms (checked at start).
	// A pre-committed transaction waits for its checkpoint to complete, so
	// keep it above checkpoints.interval plus checkpoints.timeout.
	// Default "15m", Kafka's default transaction.max.timeout.ms (0 in a
	// Config built in code means the default).
	TransactionTimeout time.Duration `yaml:"transaction_timeout"`
	// PoolSize is the number of transactional ids per sink subtask.
	// Default 5 (0 in a Config built in code means the default); in
	// [3, 100].
	PoolSize int `yaml:"pool_size"`
	// IgnoreLostTransactions keeps the job running when a pre-committed
	// transaction can no longer be committed (the broker aborted it after
	// its timeout): its output is lost, logged and counted. Default false:
	// the job stops with an error naming the transaction (Flink's
	// ignoreFailuresAfterTransactionTimeout).
	IgnoreLostTransactions bool `yaml:"ignore_lost_transactions"`
	// BufferThreshold, when > 0, buffers up to this many records in memory
	// and writes them when the buffer is full or a checkpoint completes
	// (Flink's BufferingSink); the buffer is kept in checkpoints, so a
	// crash loses nothing. at-least-once only. Default 0: no buffering.
	BufferThreshold int `yaml:"buffer_threshold"`
}

// setDefaults sets the defaults of a list item before it is decoded.
func (s *SinkConfig) setDefaults() {
	s.Delivery = DeliveryAtLeastOnce
	s.TransactionTimeout = 15 * time.Minute
	s.PoolSize = 5
}

// TransactionalIDPrefix returns the sink's transactional_id_prefix, or
// "kstreamd-<job>-<sink>" when it is empty.
func (c *Config) TransactionalIDPrefix(s *SinkConfig) string {
	if s.TransactionalIDPrefix != "" {
		return s.TransactionalIDPrefix
	}
	return "kstreamd-" + c.Job.Name + "-" + s.Name
}

// DemoConfig is the built-in demo producer: it writes made-up items and
// rules so the reference job shows matches on a fresh machine.
type DemoConfig struct {
	// Enabled starts the producer with the job. Default false.
	Enabled bool `yaml:"enabled"`
	// ItemsTopic is where items are written. Required when Enabled; must be
	// the topic of one of the sources.
	ItemsTopic string `yaml:"items_topic"`
	// RulesTopic is where rules are written. Required when Enabled; must be
	// the topic of one of the sources, other than ItemsTopic.
	RulesTopic string `yaml:"rules_topic"`
	// ItemsPerSecond is the rate of items written, per second. Default 5;
	// finite and > 0.
	ItemsPerSecond float64 `yaml:"items_per_second"`
}

// Default returns a Config holding every default: what Load and Parse start
// from before decoding. It has no sources, operators or sinks, so it does
// not validate on its own.
func Default() *Config {
	return &Config{
		Job:     JobConfig{Parallelism: 2},
		DataDir: "./data",
		Kafka: KafkaConfig{
			ClientID: "kstreamd",
			Embedded: EmbeddedKafkaConfig{Address: "127.0.0.1:9092", Partitions: 4},
		},
		State: StateConfig{Backend: StateBackendPebble, BlockCacheBytes: 64 << 20},
		Checkpoints: CheckpointsConfig{
			Timeout: 10 * time.Minute, TolerableFailures: 3, Retained: 3,
		},
		Metrics: MetricsConfig{Address: "127.0.0.1:9249"},
		Log:     LogConfig{Level: LogLevelInfo, Format: LogFormatText},
		Demo:    DemoConfig{ItemsPerSecond: 5},
	}
}

// Load reads the file at path and returns its Config, as Parse does with
// path as the file name in messages. An error reading the file is returned
// wrapped (errors.Is(err, fs.ErrNotExist) works); every problem with its
// content is returned as ConfigErrors.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pipeline: read config: %w", err)
	}
	return Parse(path, data)
}

// Parse decodes data, one YAML document, into a Config: it starts from
// Default, sets each list item's defaults before decoding it, refuses unknown
// fields, wrong types and duplicate keys at every level, and runs Validate.
// name is the file name used in messages.
//
// On failure the Config is nil and the error is a ConfigErrors listing every
// problem found, in file order, each with its line and column (a YAML syntax
// error stops decoding and is the only one reported).
func Parse(name string, data []byte) (*Config, error) {
	o := &origin{
		file: name,
		keys: map[string]position{},
		vals: map[string]position{},
		bad:  map[string]bool{},
	}
	root, perr := parseDocument(name, data)
	if perr != nil {
		return nil, ConfigErrors{perr}
	}
	c := Default()
	c.src = o
	d := &decoder{o: o}
	o.vals[""] = posOf(root)
	d.decode(root, reflect.ValueOf(c).Elem(), "")
	if d.tooLarge != nil {
		return nil, ConfigErrors{d.tooLarge}
	}
	errs := append(d.errs, c.validate()...)
	if len(errs) > 0 {
		errs.sort()
		return nil, errs
	}
	return c, nil
}

// Validate checks the Config and returns nil or a ConfigErrors listing every
// problem: impossible values, missing required fields, duplicate names, and
// references to names that do not exist. Load and Parse call it; call it
// again after changing a Config in code. Problems in a Config that came from
// a file carry its file, line and column.
func (c *Config) Validate() error {
	if errs := c.validate(); len(errs) > 0 {
		errs.sort()
		return errs
	}
	return nil
}

// Brokers returns the seed brokers the job's clients dial: kafka.brokers,
// or the embedded broker's address when brokers is empty and the embedded
// broker is enabled. The slice is a copy.
func (c *Config) Brokers() []string {
	if len(c.Kafka.Brokers) > 0 {
		return slices.Clone(c.Kafka.Brokers)
	}
	if c.Kafka.Embedded.Enabled {
		return []string{c.Kafka.Embedded.Address}
	}
	return nil
}

// EmbeddedDataDir returns the directory of the embedded broker's log:
// kafka.embedded.data_dir, or "<data_dir>/kafka" when it is empty.
func (c *Config) EmbeddedDataDir() string {
	if c.Kafka.Embedded.DataDir != "" {
		return c.Kafka.Embedded.DataDir
	}
	return filepath.Join(c.DataDir, "kafka")
}

// CheckpointDir returns checkpoints.dir, or "<data_dir>/checkpoints" when it
// is empty.
func (c *Config) CheckpointDir() string {
	if c.Checkpoints.Dir != "" {
		return c.Checkpoints.Dir
	}
	return filepath.Join(c.DataDir, "checkpoints")
}

// SavepointDir returns checkpoints.savepoint_dir, or "<data_dir>/savepoints"
// when it is empty.
func (c *Config) SavepointDir() string {
	if c.Checkpoints.SavepointDir != "" {
		return c.Checkpoints.SavepointDir
	}
	return filepath.Join(c.DataDir, "savepoints")
}

// StateDir returns the directory of the state backend: state.dir, or
// "<data_dir>/state" when it is empty.
func (c *Config) StateDir() string {
	if c.State.Dir != "" {
		return c.State.Dir
	}
	return filepath.Join(c.DataDir, "state")
}

// SourceByName returns the source called name, pointing into c.Sources.
func (c *Config) SourceByName(name string) (*SourceConfig, bool) {
	for i := range c.Sources {
		if c.Sources[i].Name == name {
			return &c.Sources[i], true
		}
	}
	return nil, false
}

// OperatorByName returns the operator called name, pointing into c.Operators.
func (c *Config) OperatorByName(name string) (*OperatorConfig, bool) {
	for i := range c.Operators {
		if c.Operators[i].Name == name {
			return &c.Operators[i], true
		}
	}
	return nil, false
}

// SinkByName returns the sink called name, pointing into c.Sinks.
func (c *Config) SinkByName(name string) (*SinkConfig, bool) {
	for i := range c.Sinks {
		if c.Sinks[i].Name == name {
			return &c.Sinks[i], true
		}
	}
	return nil, false
}

// SourceParallelism returns the number of subtasks of s: its parallelism,
// or job.parallelism when that is 0.
func (c *Config) SourceParallelism(s *SourceConfig) int {
	if s.Parallelism > 0 {
		return s.Parallelism
	}
	return c.Job.Parallelism
}

// OperatorParallelism returns the number of subtasks of op: its
// parallelism, or job.parallelism when that is 0.
func (c *Config) OperatorParallelism(op *OperatorConfig) int {
	if op.Parallelism > 0 {
		return op.Parallelism
	}
	return c.Job.Parallelism
}

// SinkParallelism returns the number of subtasks of s: its parallelism, or,
// when that is 0, the parallelism of its input (job.parallelism if the input
// names nothing, which Validate refuses).
func (c *Config) SinkParallelism(s *SinkConfig) int {
	if s.Parallelism > 0 {
		return s.Parallelism
	}
	if op, ok := c.OperatorByName(s.Input); ok {
		return c.OperatorParallelism(op)
	}
	if src, ok := c.SourceByName(s.Input); ok {
		return c.SourceParallelism(src)
	}
	return c.Job.Parallelism
}

// MaxParallelism returns the job's number of key groups: job.max_parallelism,
// or, when that is 0, keygroup.DefaultMaxParallelism of the largest operator
// parallelism (of job.parallelism when there are no operators). Flink derives
// it the same way; the result is fixed by the first checkpoint, so set it
// explicitly before scaling a job beyond what the derived value allows.
func (c *Config) MaxParallelism() int {
	if c.Job.MaxParallelism != 0 {
		return c.Job.MaxParallelism
	}
	p := c.Job.Parallelism
	if len(c.Operators) > 0 {
		p = 0
		for i := range c.Operators {
			p = max(p, c.OperatorParallelism(&c.Operators[i]))
		}
	}
	return keygroup.DefaultMaxParallelism(p)
}

// Topics returns every topic the pipeline names (sources, sinks and the
// demo producer), deduplicated and sorted.
func (c *Config) Topics() []string {
	var ts []string
	for _, s := range c.Sources {
		ts = append(ts, s.Topic, s.DeadLetterTopic)
	}
	for _, s := range c.Sinks {
		ts = append(ts, s.Topic)
	}
	if c.Demo.Enabled {
		ts = append(ts, c.Demo.ItemsTopic, c.Demo.RulesTopic)
	}
	ts = slices.DeleteFunc(ts, func(t string) bool { return t == "" })
	slices.Sort(ts)
	return slices.Compact(ts)
}

// ConfigError is one problem with a config: where it is and what is wrong.
type ConfigError struct {
	// File is the file name given to Load or Parse; "" for a Config built in
	// code.
	File string
	// Line and Column are 1-based; 0 when unknown (a Config built in code,
	// or a YAML syntax error for which yaml gives no column).
	Line, Column int
	// Path is the field path, as in "operators[0].parallelism"; "" for a
	// problem with the file as a whole.
	Path string
	// Msg says what is wrong, lowercase, naming the offending value.
	Msg string
}

// Error formats the problem as "FILE:LINE:COL: PATH: MSG", leaving out the
// parts that are unknown.
func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		if e.File != "" {
			b.WriteByte(':')
		}
		b.WriteString(strconv.Itoa(e.Line))
		if e.Column > 0 {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(e.Column))
		}
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// ConfigErrors is every problem Load, Parse or Validate found; it is never
// empty when returned as an error. Check for it with errors.As; each
// *ConfigError is also reachable with errors.As through Unwrap.
type ConfigErrors []*ConfigError

// Error formats one problem per line.
func (es ConfigErrors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the problems as errors.
func (es ConfigErrors) Unwrap() []error {
	errs := make([]error, len(es))
	for i, e := range es {
		errs[i] = e
	}
	return errs
}

// sort orders problems by position, keeping the order of those at the same
// position (and of those without one).
func (es ConfigErrors) sort() {
	slices.SortStableFunc(es, func(a, b *ConfigError) int {
		if a.Line != b.Line {
			return a.Line - b.Line
		}
		return a.Column - b.Column
	})
}

// position is a 1-based line and column in the file.
type position struct{ line, col int }

func posOf(n *yaml.Node) position { return position{n.Line, n.Column} }

// origin records where each field of a decoded Config was written.
type origin struct {
	file string
	// keys maps a field path to the position of its key, or of the item
	// for a list item ("sources[0]").
	keys map[string]position
	// vals maps a field path to the position of its value; "" is the root.
	vals map[string]position
	// bad holds the paths whose value could not be decoded; Validate does
	// not report again on them or below them.
	bad map[string]bool
}

// position returns where to report a problem with path: its key when it
// was written, else the value of its nearest written ancestor (the mapping
// a missing field belongs in).
func (o *origin) position(path string) position {
	if p, ok := o.keys[path]; ok {
		return p
	}
	for path != "" {
		path = parentPath(path)
		if p, ok := o.vals[path]; ok {
			return p
		}
	}
	return position{}
}

// suppressed reports whether path is at or below a path that failed to
// decode.
func (o *origin) suppressed(path string) bool {
	for {
		if o.bad[path] {
			return true
		}
		if path == "" {
			return false
		}
		path = parentPath(path)
	}
}

func (o *origin) newError(path, msg string) *ConfigError {
	p := o.position(path)
	return &ConfigError{File: o.file, Line: p.line, Column: p.col, Path: path, Msg: msg}
}

// parentPath strips the last ".field" or "[i]" from path.
func parentPath(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// syntaxLineRE matches the line yaml.v3 puts in its syntax errors.
var syntaxLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// maxLineSearch and maxLineSearchBytes bound the prefixes findErrorLine
// parses: their number and their total size.
const (
	maxLineSearch      = 2000
	maxLineSearchBytes = 4 << 20
)

// parseDocument parses data into the root mapping of its only document.
func parseDocument(name string, data []byte) (*yaml.Node, *ConfigError) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &ConfigError{File: name, Line: 1, Column: 1, Msg: "config is empty"}
		}
		return nil, syntaxError(name, data, err)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, syntaxError(name, data, err)
	default:
		return nil, &ConfigError{File: name, Line: extra.Line, Column: extra.Column,
			Msg: "a second YAML document: a config is exactly one document"}
	}
	if len(doc.Content) != 1 {
		return nil, &ConfigError{File: name, Line: 1, Column: 1, Msg: "config is empty"}
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		return nil, &ConfigError{File: name, Line: 1, Column: 1, Msg: "config is empty"}
	}
	if root.Kind != yaml.MappingNode {
		return nil, &ConfigError{File: name, Line: root.Line, Column: root.Column,
			Msg: "config must be a mapping of fields, got " + describe(root)}
	}
	return root, nil
}

// syntaxError turns a yaml.v3 parse error into a ConfigError at yaml's own
// line. yaml gives no column, and no line for errors on the first line or
// found after parsing (an unknown anchor); for those the line is the first
// whose prefix of the file fails with the same message.
func syntaxError(name string, data []byte, err error) *ConfigError {
	msg := err.Error()
	if m := syntaxLineRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &ConfigError{File: name, Line: line, Msg: "yaml syntax: " + m[2]}
	}
	msg = strings.TrimPrefix(msg, "yaml: ")
	return &ConfigError{File: name, Line: findErrorLine(data, err.Error()), Msg: "yaml syntax: " + msg}
}

// findErrorLine returns the first line n such that the first n lines of
// data fail to parse with message msg, or 0.
func findErrorLine(data []byte, msg string) int {
	end, parsed := 0, 0
	for line := 1; line <= maxLineSearch && end < len(data) && parsed < maxLineSearchBytes; line++ {
		if i := bytes.IndexByte(data[end:], '\n'); i >= 0 {
			end += i + 1
		} else {
			end = len(data)
		}
		parsed += end
		dec := yaml.NewDecoder(bytes.NewReader(data[:end]))
		for {
			var n yaml.Node
			err := dec.Decode(&n)
			if err == nil {
				continue
			}
			if err.Error() == msg {
				return line
			}
			break
		}
	}
	return 0
}

// describe names what a node holds, for "got ..." in messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!str" {
			return strconv.Quote(n.Value)
		}
		return n.Value
	default:
		return "an alias"
	}
}

// maxDecodeNodes bounds the keys and values one decode visits (a config of
// a thousand operators visits about 15,000), so that aliases cannot blow a
// small file up into a huge amount of work or of problems.
const maxDecodeNodes = 50_000

// decoder walks a yaml.Node tree into a struct, strictly: yaml.v3's
// KnownFields is lost by node.Decode (go-yaml/yaml issue 460), so the walk
// itself refuses unknown and duplicate keys and wrong types at every level,
// keeping each problem's line and column.
type decoder struct {
	o       *origin
	errs    ConfigErrors
	visited int
	// tooLarge is set once visited exceeds maxDecodeNodes.
	tooLarge *ConfigError
}

// defaulter is implemented by list item types with defaults; the decoder
// calls setDefaults on each new item before decoding into it.
type defaulter interface{ setDefaults() }

var durationType = reflect.TypeFor[time.Duration]()

// integerRE matches a decimal integer, which yaml resolves to a float when
// it does not fit in 64 bits.
var integerRE = regexp.MustCompile(`^[-+]?[0-9]+$`)

// fail records a problem with path and stops Validate from reporting on it
// again.
func (d *decoder) fail(path, msg string) {
	d.errs = append(d.errs, d.o.newError(path, msg))
	d.o.bad[path] = true
}

// failAt records a problem at an explicit position.
func (d *decoder) failAt(n *yaml.Node, path, msg string) {
	d.errs = append(d.errs, &ConfigError{File: d.o.file, Line: n.Line, Column: n.Column, Path: path, Msg: msg})
}

func resolveAlias(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// step counts one more node visited and reports whether the budget allows
// visiting it; past the budget it records tooLarge, the only problem Parse
// then reports.
func (d *decoder) step(n *yaml.Node, path string) bool {
	d.visited++
	if d.visited <= maxDecodeNodes {
		return true
	}
	if d.tooLarge == nil {
		d.tooLarge = &ConfigError{File: d.o.file, Line: n.Line, Column: n.Column, Path: path,
			Msg: fmt.Sprintf("config too large: more than %d fields and values after expanding aliases", maxDecodeNodes)}
	}
	return false
}

func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	n = resolveAlias(n)
	if !d.step(n, path) {
		return
	}
	tag := n.ShortTag()
	if n.Kind == yaml.ScalarNode && tag == "!!null" {
		return // like yaml.v3: null keeps the default
	}
	if !strings.HasPrefix(tag, "!!") {
		d.fail(path, "unsupported YAML tag "+n.Tag)
		return
	}
	if v.Type() == durationType {
		d.decodeDuration(n, v, path)
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Slice:
		d.decodeSlice(n, v, path)
	case reflect.String:
		if n.Kind != yaml.ScalarNode || !slices.Contains([]string{"!!str", "!!int", "!!float", "!!timestamp"}, tag) {
			d.fail(path, "must be a string, got "+describe(n))
			return
		}
		v.SetString(n.Value)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		var i int64
		if n.Kind == yaml.ScalarNode && tag == "!!float" && integerRE.MatchString(n.Value) {
			d.fail(path, "integer out of range: "+n.Value) // yaml resolves too large an integer to a float
			return
		}
		if n.Kind != yaml.ScalarNode || tag != "!!int" {
			d.fail(path, "must be an integer, got "+describe(n))
			return
		}
		if err := n.Decode(&i); err != nil || v.OverflowInt(i) {
			d.fail(path, "integer out of range: "+n.Value)
			return
		}
		v.SetInt(i)
	case reflect.Float32, reflect.Float64:
		var f float64
		if n.Kind != yaml.ScalarNode || (tag != "!!int" && tag != "!!float") {
			d.fail(path, "must be a number, got "+describe(n))
			return
		}
		if err := n.Decode(&f); err != nil {
			d.fail(path, "number out of range: "+n.Value)
			return
		}
		v.SetFloat(f)
	case reflect.Bool:
		var b bool
		if n.Kind != yaml.ScalarNode || tag != "!!bool" {
			d.fail(path, "must be true or false, got "+describe(n))
			return
		}
		if err := n.Decode(&b); err != nil {
			d.fail(path, "must be true or false, got "+describe(n))
			return
		}
		v.SetBool(b)
	default:
		d.fail(path, "pipeline: no decoder for field type "+v.Type().String())
	}
}

func (d *decoder) decodeDuration(n *yaml.Node, v reflect.Value, path string) {
	tag := n.ShortTag()
	if n.Kind == yaml.ScalarNode && (tag == "!!str" || tag == "!!int") {
		if dur, err := time.ParseDuration(n.Value); err == nil {
			v.SetInt(int64(dur))
			return
		}
	}
	d.fail(path, "must be a duration such as 30s or 1m30s, got "+describe(n))
}

func (d *decoder) decodeSlice(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.SequenceNode {
		d.fail(path, "must be a list, got "+describe(n))
		return
	}
	s := reflect.MakeSlice(v.Type(), 0, len(n.Content))
	for i, item := range n.Content {
		ipath := fmt.Sprintf("%s[%d]", path, i)
		d.o.keys[ipath] = posOf(item)
		d.o.vals[ipath] = posOf(resolveAlias(item))
		e := reflect.New(v.Type().Elem())
		if df, ok := e.Interface().(defaulter); ok {
			df.setDefaults()
		}
		d.decode(item, e.Elem(), ipath)
		s = reflect.Append(s, e.Elem())
	}
	v.Set(s)
}

// fieldNames returns the yaml names of a struct type's fields, mapped to
// their index, and in declaration order.
func fieldNames(t reflect.Type) (map[string]int, []string) {
	idx := map[string]int{}
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		idx[name] = i
		names = append(names, name)
	}
	return idx, names
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(path, "must be a mapping of fields, got "+describe(n))
		return
	}
	idx, names := fieldNames(v.Type())
	seen := map[string]int{}
	var suggested []string // fields a misspelt key probably meant
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := resolveAlias(n.Content[i]), n.Content[i+1]
		if !d.step(k, path) {
			return
		}
		if k.Kind != yaml.ScalarNode {
			d.failAt(k, path, "field names must be strings, got "+describe(k))
			continue
		}
		if k.ShortTag() == "!!merge" {
			d.failAt(k, path, "merge keys (<<) are not supported; write the fields out")
			d.o.bad[path] = true // the merged fields would be missing
			continue
		}
		fpath := joinPath(path, k.Value)
		if line, dup := seen[k.Value]; dup {
			d.failAt(k, fpath, fmt.Sprintf("duplicate field (first set on line %d)", line))
			continue
		}
		seen[k.Value] = k.Line
		fi, ok := idx[k.Value]
		if !ok {
			msg, s := unknownField(k.Value, names)
			d.failAt(k, fpath, msg)
			if s != "" {
				suggested = append(suggested, s)
			}
			continue
		}
		d.o.keys[fpath] = posOf(k)
		d.o.vals[fpath] = posOf(resolveAlias(val))
		d.decode(val, v.Field(fi), fpath)
	}
	// A field a misspelt key meant is not also reported missing.
	for _, s := range suggested {
		if _, set := seen[s]; !set {
			d.o.bad[joinPath(path, s)] = true
		}
	}
}

// fieldAliases maps names other systems use to the field kstreamd calls it,
// for "did you mean"; a suggestion is only made when that field exists
// where the unknown one was written.
var fieldAliases = map[string]string{
	"bootstrap":          "brokers",
	"bootstrap_servers":  "brokers",
	"bootstrap.servers":  "brokers",
	"servers":            "brokers",
	"seed_brokers":       "brokers",
	"auto_offset_reset":  "start_from",
	"auto.offset.reset":  "start_from",
	"offset":             "start_from",
	"startup_mode":       "start_from",
	"delivery_guarantee": "delivery",
	"semantic":           "delivery",
	"guarantee":          "delivery",
	"key":                "key_by",
	"keyed_by":           "key_by",
	"partition_by":       "key_by",
	"kind":               "type",
	"from":               "input",
	"source":             "input",
	"max_parallel":       "max_parallelism",
}

// unknownField returns the message for an unknown key among the fields
// names, and the field it probably meant, if any.
func unknownField(key string, names []string) (msg, meant string) {
	if alias, ok := fieldAliases[key]; ok && slices.Contains(names, alias) {
		meant = alias
	} else {
		meant = suggest(key, names)
	}
	if meant != "" {
		return fmt.Sprintf("unknown field (did you mean %q?)", meant), meant
	}
	return "unknown field; known fields are " + strings.Join(names, ", "), ""
}

// suggest returns the candidate closest to s in edit distance, if it is
// close enough to be a likely typo, else "".
func suggest(s string, candidates []string) string {
	best, bestDist := "", math.MaxInt
	for _, c := range candidates {
		if d := editDistance(strings.ToLower(s), c); d < bestDist {
			best, bestDist = c, d
		}
	}
	if bestDist <= max(1, min(len(s), len(best))/3) {
		return best
	}
	return ""
}

// editDistance is the Levenshtein distance of a and b, counting an
// adjacent transposition as one edit.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	if len(ra) > 64 || len(rb) > 64 {
		if a == b {
			return 0
		}
		return math.MaxInt / 2
	}
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}

// validator collects the problems Validate finds.
type validator struct {
	c    *Config
	errs ConfigErrors
	// inputNames are the names of sources and operators, sorted; built on
	// the first unknown reference.
	inputNames []string
	// suggested caches "did you mean" answers by unknown name.
	suggested map[string]string
}

func (v *validator) errorf(path, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if v.c.src == nil {
		v.errs = append(v.errs, &ConfigError{Path: path, Msg: msg})
		return
	}
	if v.c.src.suppressed(path) {
		return
	}
	v.errs = append(v.errs, v.c.src.newError(path, msg))
}

// required reports a required field that is unset.
func (v *validator) required(path string) {
	switch _, written := v.c.src.keyWritten(path); {
	case v.c.src == nil:
		v.errorf(path, "required")
	case written:
		v.errorf(path, "must not be empty")
	default:
		v.errorf(path, "required field is missing")
	}
}

func (o *origin) keyWritten(path string) (position, bool) {
	if o == nil {
		return position{}, false
	}
	p, ok := o.keys[path]
	return p, ok
}

// oneOf reports value unless it is one of allowed.
func (v *validator) oneOf(path, value string, allowed ...string) {
	if slices.Contains(allowed, value) {
		return
	}
	want := strings.Join(allowed, ", ")
	if value == "" {
		v.errorf(path, "must be one of %s", want)
		return
	}
	if s := suggest(value, allowed); s != "" {
		v.errorf(path, "unknown value %q (did you mean %q?); want one of %s", value, s, want)
		return
	}
	v.errorf(path, "unknown value %q; want one of %s", value, want)
}

// parallelism checks a parallelism field: in [lo, 32768], where lo is 0 for
// fields whose 0 means "inherit".
func (v *validator) parallelism(path string, p, lo int) {
	switch {
	case p < lo && lo == 0:
		v.errorf(path, "must be >= 0 (0 inherits), got %d", p)
	case p < lo:
		v.errorf(path, "must be >= %d, got %d", lo, p)
	case p > keygroup.UpperBoundMaxParallelism:
		v.errorf(path, "must be <= %d, got %d", keygroup.UpperBoundMaxParallelism, p)
	}
}

// hostPort checks a host:port address; the host may be empty only for a
// listen address.
func (v *validator) hostPort(path, addr string, listen bool) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		v.errorf(path, "invalid address %q: want host:port", addr)
		return
	}
	if host == "" && !listen {
		v.errorf(path, "invalid address %q: missing host", addr)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		v.errorf(path, "invalid address %q: port must be a number in [1, 65535]", addr)
	}
}

// topicNameRE is the alphabet of Kafka topic names.
var topicNameRE = regexp.MustCompile(`^[a-zA-Z0-9._-]+$`)

// maxTopicNameLen is Kafka's limit on topic name length.
const maxTopicNameLen = 249

// topic checks a Kafka topic name as the broker does (Kafka's
// org.apache.kafka.common.internals.Topic.validate).
func (v *validator) topic(path, t string) {
	switch {
	case t == "":
		v.required(path)
	case t == "." || t == "..":
		v.errorf(path, "invalid topic name %q: cannot be \".\" or \"..\"", t)
	case len(t) > maxTopicNameLen:
		v.errorf(path, "invalid topic name: %d characters, at most %d allowed", len(t), maxTopicNameLen)
	case !topicNameRE.MatchString(t):
		v.errorf(path, "invalid topic name %q: only ASCII letters, digits, '.', '_' and '-' are allowed", t)
	}
}

var jobNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// stage is a named source, operator or sink.
type stage struct {
	kind  string // "source", "operator" or "sink"
	index int
	path  string // e.g. "operators[1]"
}

func (c *Config) validate() ConfigErrors {
	v := &validator{c: c}
	c.validateJob(v)
	c.validateRuntime(v)
	stages := c.validateNames(v)
	c.validateSources(v)
	c.validateOperators(v, stages)
	c.validateSinks(v, stages)
	c.validateDemo(v)
	return v.errs
}

func (c *Config) validateJob(v *validator) {
	switch {
	case c.Job.Name == "":
		v.required("job.name")
	case !jobNameRE.MatchString(c.Job.Name):
		v.errorf("job.name", "invalid job name %q: must match [a-z0-9][a-z0-9_-]*", c.Job.Name)
	}
	v.parallelism("job.parallelism", c.Job.Parallelism, 1)
	mp := c.Job.MaxParallelism
	if mp == 0 {
		return
	}
	if mp < 1 || mp > keygroup.UpperBoundMaxParallelism {
		v.errorf("job.max_parallelism", "must be 0 (derive) or in [1, %d], got %d", keygroup.UpperBoundMaxParallelism, mp)
		return
	}
	for i := range c.Operators {
		op := &c.Operators[i]
		if p := c.OperatorParallelism(op); p > mp {
			v.errorf("job.max_parallelism", "%d is less than the parallelism %d of operators[%d] (%q)", mp, p, i, op.Name)
		}
	}
}

func (c *Config) validateRuntime(v *validator) {
	if c.DataDir == "" {
		v.required("data_dir")
	}
	k := &c.Kafka
	if len(k.Brokers) == 0 && !k.Embedded.Enabled {
		v.errorf("kafka.brokers", "required unless kafka.embedded.enabled is true")
	}
	for i, b := range k.Brokers {
		v.hostPort(fmt.Sprintf("kafka.brokers[%d]", i), b, false)
	}
	if k.ClientID == "" {
		v.required("kafka.client_id")
	}
	v.hostPort("kafka.embedded.address", k.Embedded.Address, true)
	if k.Embedded.Partitions < 1 {
		v.errorf("kafka.embedded.partitions", "must be >= 1, got %d", k.Embedded.Partitions)
	}
	c.validateSecurity(v)
	v.oneOf("state.backend", string(c.State.Backend), string(StateBackendHashMap), string(StateBackendPebble))
	if c.State.BlockCacheBytes < 0 {
		v.errorf("state.block_cache_bytes", "must be >= 0, got %d", c.State.BlockCacheBytes)
	}
	if c.Metrics.Address != "" {
		v.hostPort("metrics.address", c.Metrics.Address, true)
	}
	if c.Metrics.BearerTokenEnv != "" && c.Metrics.BearerTokenFile != "" {
		v.errorf("metrics.bearer_token_file", "set at most one of bearer_token_env and bearer_token_file")
	}
	cp := &c.Checkpoints
	if cp.Interval != 0 && cp.Interval < 10*time.Millisecond {
		v.errorf("checkpoints.interval", "must be 0 (off) or >= 10ms, got %v", cp.Interval)
	}
	if cp.Timeout <= 0 {
		v.errorf("checkpoints.timeout", "must be > 0, got %v", cp.Timeout)
	}
	if cp.MinPause < 0 {
		v.errorf("checkpoints.min_pause", "must be >= 0, got %v", cp.MinPause)
	}
	if cp.TolerableFailures < 0 {
		v.errorf("checkpoints.tolerable_failures", "must be >= 0, got %d", cp.TolerableFailures)
	}
	if cp.Retained < 1 {
		v.errorf("checkpoints.retained", "must be >= 1, got %d", cp.Retained)
	}
	v.oneOf("log.level", string(c.Log.Level),
		string(LogLevelDebug), string(LogLevelInfo), string(LogLevelWarn), string(LogLevelError))
	v.oneOf("log.format", string(c.Log.Format), string(LogFormatText), string(LogFormatJSON))
}

// validateNames checks that every stage has a unique name and returns the
// stages by name (the first, for a duplicate).
func (c *Config) validateNames(v *validator) map[string]stage {
	stages := map[string]stage{}
	add := func(kind, list string, i int, name string) {
		path := fmt.Sprintf("%s[%d]", list, i)
		if name == "" {
			v.required(path + ".name")
			return
		}
		if prev, dup := stages[name]; dup {
			v.errorf(path+".name", "duplicate name %q: %s already uses it", name, prev.path)
			return
		}
		stages[name] = stage{kind: kind, index: i, path: path}
	}
	if len(c.Sources) == 0 {
		v.errorf("sources", "at least one source is required")
	}
	for i, s := range c.Sources {
		add("source", "sources", i, s.Name)
	}
	if len(c.Operators) == 0 {
		v.errorf("operators", "at least one operator is required")
	}
	for i, op := range c.Operators {
		add("operator", "operators", i, op.Name)
	}
	if len(c.Sinks) == 0 {
		v.errorf("sinks", "at least one sink is required")
	}
	for i, s := range c.Sinks {
		add("sink", "sinks", i, s.Name)
	}
	return stages
}

func (c *Config) validateSources(v *validator) {
	for i, s := range c.Sources {
		p := fmt.Sprintf("sources[%d]", i)
		v.topic(p+".topic", s.Topic)
		v.oneOf(p+".start_from", string(s.StartFrom), string(StartFromEarliest), string(StartFromLatest))
		v.oneOf(p+".format", string(s.Format), string(RecordFormatJSON))
		v.parallelism(p+".parallelism", s.Parallelism, 0)
		if s.OnError != "" {
			v.oneOf(p+".on_error", string(s.OnError), string(OnErrorFail), string(OnErrorSkip), string(OnErrorDeadLetter))
		}
		switch {
		case s.OnError == OnErrorDeadLetter && s.DeadLetterTopic == "":
			v.errorf(p+".dead_letter_topic", "required when on_error is dead-letter")
		case s.DeadLetterTopic != "":
			v.topic(p+".dead_letter_topic", s.DeadLetterTopic)
			if s.DeadLetterTopic == s.Topic {
				v.errorf(p+".dead_letter_topic", "must differ from the source's topic %q", s.Topic)
			}
		}
		if s.MaxRecordBytes < 0 {
			v.errorf(p+".max_record_bytes", "must be >= 0, got %d", s.MaxRecordBytes)
		}
		if d := s.PartitionDiscoveryInterval; d != 0 && d < 100*time.Millisecond {
			v.errorf(p+".partition_discovery_interval", "must be 0 (off) or >= 100ms, got %v", d)
		}
	}
}

// maxSuggestCandidates bounds the names a "did you mean" compares against.
const maxSuggestCandidates = 1000

// unknownRef reports a reference to a name no stage has.
func (v *validator) unknownRef(path, name, what string, stages map[string]stage) {
	if v.inputNames == nil {
		for n, s := range stages {
			if s.kind != "sink" {
				v.inputNames = append(v.inputNames, n)
			}
		}
		slices.Sort(v.inputNames)
		v.suggested = map[string]string{}
	}
	s, ok := v.suggested[name]
	if !ok && len(v.inputNames) <= maxSuggestCandidates {
		s = suggest(name, v.inputNames)
		v.suggested[name] = s
	}
	if s != "" {
		v.errorf(path, "no %s is called %q (did you mean %q?)", what, name, s)
		return
	}
	v.errorf(path, "no %s is called %q", what, name)
}

func (c *Config) validateOperators(v *validator, stages map[string]stage) {
	for i, op := range c.Operators {
		p := fmt.Sprintf("operators[%d]", i)
		known := slices.Contains(KnownOperatorTypes, op.Type)
		if op.Type == "" {
			v.required(p + ".type")
		} else {
			v.oneOf(p+".type", op.Type, KnownOperatorTypes...)
		}
		switch in, ok := stages[op.Input]; {
		case op.Input == "":
			v.required(p + ".input")
		case !ok:
			v.unknownRef(p+".input", op.Input, "source or operator", stages)
		case in.kind == "sink":
			v.errorf(p+".input", "%q is a sink (%s); an input must be a source or an operator", op.Input, in.path)
		case in.kind == "operator" && in.index == i:
			v.errorf(p+".input", "an operator cannot read its own output")
		case in.kind == "operator" && in.index > i:
			v.errorf(p+".input", "%q is %s, listed after this operator; list operators in data-flow order", op.Input, in.path)
		}
		if known && operatorKeyed(op.Type) && op.KeyBy == "" {
			v.errorf(p+".key_by", "required for operator type %s: the top-level JSON field holding the key", op.Type)
		}
		switch bc, ok := stages[op.Broadcast]; {
		case !known:
		case !operatorBroadcast(op.Type):
			if op.Broadcast != "" {
				v.errorf(p+".broadcast", "operator type %s takes no broadcast input; only %s does", op.Type, OperatorShapePairMatcher)
			}
		case op.Broadcast == "":
			v.errorf(p+".broadcast", "required for operator type %s: the source of the rules broadcast to every subtask", op.Type)
		case !ok:
			v.unknownRef(p+".broadcast", op.Broadcast, "source", stages)
		case bc.kind != "source":
			v.errorf(p+".broadcast", "%q is %s; a broadcast input must be a source", op.Broadcast, bc.path)
		case op.Broadcast == op.Input:
			v.errorf(p+".broadcast", "%q is also the input; the broadcast input must be another source", op.Broadcast)
		}
		if op.AsyncState && known && op.Type != OperatorCountWindowAverage && op.Type != OperatorKeyedCount {
			v.errorf(p+".async_state", "operator type %s has no async state version; only %s and %s do", op.Type, OperatorCountWindowAverage, OperatorKeyedCount)
		}
		v.parallelism(p+".parallelism", op.Parallelism, 0)
	}
}

func (c *Config) validateSinks(v *validator, stages map[string]stage) {
	for i, s := range c.Sinks {
		p := fmt.Sprintf("sinks[%d]", i)
		switch in, ok := stages[s.Input]; {
		case s.Input == "":
			v.required(p + ".input")
		case !ok:
			v.unknownRef(p+".input", s.Input, "operator or source", stages)
		case in.kind == "sink":
			v.errorf(p+".input", "%q is a sink (%s); an input must be an operator or a source", s.Input, in.path)
		}
		v.topic(p+".topic", s.Topic)
		v.oneOf(p+".delivery", string(s.Delivery), string(DeliveryExactlyOnce), string(DeliveryAtLeastOnce), string(DeliveryNone))
		if s.Delivery == DeliveryExactlyOnce {
			iv := c.Checkpoints.Interval
			switch {
			case iv == 0:
				v.errorf(p+".delivery", "exactly-once needs checkpoints: set checkpoints.interval (transactions commit when a checkpoint completes)")
			case s.TransactionTimeout != 0 && s.TransactionTimeout <= iv:
				v.errorf(p+".transaction_timeout", "%v must exceed checkpoints.interval %v plus the time a restart takes", s.TransactionTimeout, iv)
			}
		}
		if s.BufferThreshold < 0 {
			v.errorf(p+".buffer_threshold", "must be >= 0, got %d", s.BufferThreshold)
		} else if s.BufferThreshold > 0 && s.Delivery != DeliveryAtLeastOnce {
			v.errorf(p+".buffer_threshold", "buffering applies to at-least-once sinks, this one is %s", s.Delivery)
		}
		if s.PoolSize != 0 && (s.PoolSize < 3 || s.PoolSize > 100) {
			v.errorf(p+".pool_size", "must be in [3, 100], got %d", s.PoolSize)
		}
		v.parallelism(p+".parallelism", s.Parallelism, 0)
	}
}

func (c *Config) validateDemo(v *validator) {
	d := &c.Demo
	if math.IsNaN(d.ItemsPerSecond) || math.IsInf(d.ItemsPerSecond, 0) || d.ItemsPerSecond <= 0 {
		v.errorf("demo.items_per_second", "must be a finite number > 0, got %v", d.ItemsPerSecond)
	}
	if !d.Enabled {
		return
	}
	sourceTopic := func(path, t string) {
		if t == "" {
			v.errorf(path, "required when demo.enabled is true")
			return
		}
		if !slices.ContainsFunc(c.Sources, func(s SourceConfig) bool { return s.Topic == t }) {
			v.errorf(path, "no source reads topic %q; the demo writes only to source topics", t)
		}
	}
	sourceTopic("demo.items_topic", d.ItemsTopic)
	sourceTopic("demo.rules_topic", d.RulesTopic)
	if d.ItemsTopic != "" && d.ItemsTopic == d.RulesTopic {
		v.errorf("demo.rules_topic", "%q is also demo.items_topic; items and rules need their own topics", d.RulesTopic)
	}
}
