package pipeline

import (
	"cmp"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/job"
	"github.com/kstreamd/kstreamd/operators"
	"github.com/kstreamd/kstreamd/sink"
	"github.com/kstreamd/kstreamd/state/keygroup"
	"gopkg.in/yaml.v3"
)

// Built-in operator types an operators[].type may name (the registry of
// operators.NewBuiltinRegistry holds them with their traits and params).
const (
	// OperatorShapePairMatcher is the keyed broadcast operator that pairs
	// items of one key (a color) against the shape-pair rules broadcast to
	// every subtask. It needs key_by and broadcast.
	OperatorShapePairMatcher = operators.ShapePairMatcherType
	// OperatorCountWindowAverage averages a numeric field over a count
	// window per key. It needs key_by and refuses broadcast.
	OperatorCountWindowAverage = operators.CountWindowAverageType
	// OperatorKeyedCount counts records per key. It needs key_by and refuses
	// broadcast.
	OperatorKeyedCount = operators.KeyedCountType
)

// StartFrom says where a source starts reading a partition that has no
// committed position yet.
type StartFrom string

// StartFrom values.
const (
	StartFromEarliest StartFrom = "earliest" // the log start offset
	StartFromLatest   StartFrom = "latest"   // the end offset: only records produced from now on
)

// RecordFormat is how a source decodes record values: graph.Format, which
// the YAML decoder fills with the config's spelling and Validate checks.
type RecordFormat = graph.Format

// Record formats. RecordFormatJSON checks each value is one JSON value; it
// is the default (graph.DefaultFormat). RecordFormatString and
// RecordFormatBytes pass values through unchecked.
const (
	RecordFormatString = graph.FormatString
	RecordFormatBytes  = graph.FormatBytes
)

// RecordFormatJSON decodes each record value as one JSON value.
const RecordFormatJSON = graph.FormatJSON

// Delivery is a sink's delivery guarantee: graph.Delivery, which the YAML
// decoder fills with the config's spelling and Validate checks.
type Delivery = graph.Delivery

// Delivery values (graph's; the default is graph.DefaultDelivery,
// at-least-once).
const (
	// DeliveryAtLeastOnce waits for the broker's acknowledgement of every
	// record; after a failure some records may be written twice.
	DeliveryAtLeastOnce = graph.DeliveryAtLeastOnce
	// DeliveryNone fires and forgets: records may be lost.
	DeliveryNone = graph.DeliveryNone
	// DeliveryExactlyOnce writes one Kafka transaction per checkpoint
	// epoch, committed when the checkpoint completes (two-phase commit):
	// read_committed readers see every record once. It needs checkpoints.
	DeliveryExactlyOnce = graph.DeliveryExactlyOnce
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
	// Restart is the restart strategy after a task failure.
	Restart RestartConfig `yaml:"restart"`
	// Metrics is the HTTP listener of /metrics and /healthz.
	Metrics MetricsConfig `yaml:"metrics"`
	// Log sets the level and format of the process's log.
	Log LogConfig `yaml:"log"`
	// Process tunes the Go runtime of the process running the job: the
	// garbage collector's pacing and soft memory limit.
	Process ProcessConfig `yaml:"process"`
	// Sources are the Kafka topics the job reads; at least one.
	Sources []SourceConfig `yaml:"sources"`
	// Operators transform the streams: an operator's input is a source or
	// any other operator (in any order, without cycles). Default none: a
	// sink may read a source directly (a plain copy of a topic).
	Operators []OperatorConfig `yaml:"operators"`
	// Sinks write streams to Kafka topics; at least one.
	Sinks []SinkConfig `yaml:"sinks"`
	// Demo is the built-in demo producer.
	Demo DemoConfig `yaml:"demo"`
	// Cluster runs the job on several daemons (docs/scale-out.md). Default
	// off.
	Cluster ClusterConfig `yaml:"cluster"`
	// SchemaRegistry is the Schema Registry of the avro, protobuf and
	// json_schema formats (schemaregistry.go).
	SchemaRegistry SchemaRegistryConfig `yaml:"schema_registry"`

	// src records where each field was written, so Validate can name
	// file:line:col; nil for a Config built in code.
	src *origin
	// derivedTimeout is set when Parse derived Checkpoints.Timeout from a
	// transaction timeout (deriveCheckpointTimeout), for messages.
	derivedTimeout bool
	// reg is the operator registry the config was parsed with; nil means
	// operators.NewBuiltinRegistry.
	reg *operators.Registry
	// conns is the connector registry (source, sink and format types)
	// the config was parsed with; nil means job.NewBuiltinConnectors.
	conns *connector.Registry
	// params holds each operator's decoded params by operator name, as the
	// last validation left them.
	params map[string]any
	// connParams holds the decoded params of each source and sink
	// ("<name>") and of its format ("<name>.format"), by vertex name, as
	// the last validation left them.
	connParams map[string]any
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
	// Chaining runs consecutive operators joined by a forward edge (same
	// parallelism, no key_by, one input) in one task with no channel
	// between them (Flink's operator chaining,
	// pipeline.operator-chaining). Default true; false gives every
	// operator a task of its own. Output and checkpoints are the same
	// either way: a checkpoint taken with chaining on restores with it off
	// and the other way round.
	Chaining *bool `yaml:"chaining"`
}

// ChainingOn reports whether operator chaining is on (job.chaining,
// default true).
func (j JobConfig) ChainingOn() bool { return j.Chaining == nil || *j.Chaining }

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
	// DataDir holds the broker's log, which survives clean restarts; the
	// broker refuses a dir left by an unclean stop (kill -9; see package
	// internal/embedded). Default "" meaning "<data_dir>/kafka" (see
	// Config.EmbeddedDataDir).
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
	// WriteCacheBytes is the write-back cache of decoded values of each
	// keyed subtask on pebble (state.BackendConfig.WriteCacheBytes), in
	// bytes. Default 0 meaning 16 MiB; -1 disables it (every read goes
	// to Pebble, and with remote state possibly to the store); >= -1.
	WriteCacheBytes int64 `yaml:"write_cache_bytes"`
	// L0CompactionThreshold is the number of L0 sublevels at which a
	// keyed subtask's Pebble compacts L0 into its base level
	// (state.BackendConfig.L0CompactionThreshold; writes stop at 3 times
	// it). Default 0 meaning 16 (state.DefaultL0CompactionThreshold);
	// >= 0.
	L0CompactionThreshold int `yaml:"l0_compaction_threshold"`
	// Remote, when present, makes the pebble backend disaggregated: its
	// SST files live on an object store (by default the checkpoints'
	// directory, <checkpoints dir>/<job>/remote; or an S3-compatible
	// store, RemoteStateConfig.Store), the local state dir holds only
	// the WAL, the MANIFEST and a bounded cache, and checkpoints refer to
	// the store's files instead of copying them (Flink 2.0's ForSt).
	Remote *RemoteStateConfig `yaml:"remote"`
}

// RemoteStateConfig tunes the disaggregated pebble backend
// (state.RemoteConfig).
type RemoteStateConfig struct {
	// CacheBytes is the local on-disk cache of remote blocks per keyed
	// subtask, in bytes. Default 0 meaning 67108864 (64 MiB); -1: no
	// cache; >= -1.
	CacheBytes int64 `yaml:"cache_bytes"`
	// ReadLatency is added to every read of the store (a Go duration):
	// for measuring a slower store on one machine. Default 0; in
	// [0, 1s].
	ReadLatency time.Duration `yaml:"read_latency"`
	// MaxDeltaCheckpoints is how many delta checkpoints (no Pebble flush:
	// the base checkpoint's tables plus the batches committed since, Flink's
	// changelog backend) may follow a base checkpoint before the next base
	// (state.RemoteConfig.MaxDeltaCheckpoints). Default 0 meaning 8; -1:
	// every checkpoint is a base (no deltas; what a binary older than
	// session 40 can restore); >= -1. More deltas shorten checkpoints and
	// lengthen restores, which apply the chain.
	MaxDeltaCheckpoints int `yaml:"max_delta_checkpoints"`
	// MaxDeltaBytes bounds a chain's delta objects per keyed subtask, in
	// bytes: a checkpoint that would pass it is a base; it also bounds the
	// delta log kept in memory (state.RemoteConfig.MaxDeltaBytes). Default
	// 0 meaning 67108864 (64 MiB); >= 0.
	MaxDeltaBytes int64 `yaml:"max_delta_bytes"`
	// Store is where the SST files live: "filesystem" (the checkpoints'
	// directory <checkpoints dir>/<job>/remote, a filesystem every
	// instance mounts) or "s3" (an S3-compatible store, S3). Default
	// "filesystem".
	Store string `yaml:"store"`
	// S3 is the S3-compatible store of store "s3": the objects are
	// <prefix><object>; credentials come from AWS_ACCESS_KEY_ID and
	// AWS_SECRET_ACCESS_KEY. Defaults as cluster.store.s3 (region
	// us-east-1, tls and path_style true).
	S3 S3StoreConfig `yaml:"s3"`
}

// Remote state stores (RemoteStateConfig.Store).
const (
	RemoteStoreFilesystem = "filesystem"
	RemoteStoreS3         = "s3"
)

// CheckpointsConfig configures checkpoints (Flink's execution.checkpointing.*
// options) and where checkpoints and savepoints are kept.
type CheckpointsConfig struct {
	// Interval is the time between checkpoint triggers, a Go duration such
	// as "10s". Default 0: no periodic checkpoints (savepoints still work);
	// otherwise >= 10ms.
	Interval time.Duration `yaml:"interval"`
	// Timeout aborts a checkpoint that has not completed after this long.
	// Default "10m", or less when a file leaves it unset and an
	// exactly-once sink's transaction_timeout T is at most interval + 10m:
	// then (T - interval) / 2 (cluster mode: also minus the session and
	// takeover timeouts; only when that is at least 100ms), so checkpoints
	// time out before their pre-committed transactions do; >= 10ms
	// (Flink's minimum), and every exactly-once sink's transaction_timeout
	// must exceed interval + timeout.
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
	// retained checkpoints do not already hold. Default false in a single
	// process, true in cluster mode (cluster.enabled) when the file does
	// not set it: there every unit checkpoints, and a full checkpoint
	// uploads every SST of every unit once per interval. Setting it, to
	// false too, overrides the default.
	Incremental bool `yaml:"incremental"`
	// AllowNonRestoredState lets a restore drop the state of operators
	// (sources, sinks) the pipeline no longer has, logging each one,
	// instead of refusing the checkpoint (Flink's --allowNonRestoredState;
	// `run --allow-non-restored-state` sets it too). Default false.
	AllowNonRestoredState bool `yaml:"allow_non_restored_state"`
	// Dir holds the checkpoints, as <dir>/<job>/chk-<n>. Default "" meaning
	// "<data_dir>/checkpoints" (see Config.CheckpointDir).
	Dir string `yaml:"dir"`
	// SavepointDir receives savepoints. Default "" meaning
	// "<data_dir>/savepoints" (see Config.SavepointDir).
	SavepointDir string `yaml:"savepoint_dir"`
}

// RestartStrategy names a restart strategy (Flink's restart-strategy.type).
type RestartStrategy string

// RestartStrategy values (see job.RestartStrategyName).
const (
	RestartExponentialDelay RestartStrategy = RestartStrategy(job.RestartExponentialDelay)
	RestartFixedDelay       RestartStrategy = RestartStrategy(job.RestartFixedDelay)
	RestartFailureRate      RestartStrategy = RestartStrategy(job.RestartFailureRate)
	RestartNone             RestartStrategy = RestartStrategy(job.RestartNone)
)

// RestartConfig is what the process does when a task fails (Flink's
// restart-strategy.* options): it cancels every task, restores the latest
// completed checkpoint (state, source offsets, pending transactions) and
// runs again, as the strategy allows; when the strategy gives up, the
// process exits 1 naming the last failure. A clean stop (SIGINT, SIGTERM,
// stop-with-savepoint) never restarts. Only the fields of the chosen
// strategy may be set.
type RestartConfig struct {
	// Strategy is exponential-delay, fixed-delay, failure-rate or none.
	// Default "exponential-delay" (Flink's default with checkpointing).
	Strategy RestartStrategy `yaml:"strategy"`
	// InitialBackoff is exponential-delay's first back-off. Default "1s"; > 0.
	InitialBackoff time.Duration `yaml:"initial_backoff"`
	// MaxBackoff caps exponential-delay's back-off. Default "1m" (Flink
	// 1.19's default); >= initial_backoff.
	MaxBackoff time.Duration `yaml:"max_backoff"`
	// BackoffMultiplier grows exponential-delay's back-off after each
	// failure. Default 1.5 (Flink 1.19's); >= 1.
	BackoffMultiplier float64 `yaml:"backoff_multiplier"`
	// JitterFactor spreads each exponential-delay back-off b over
	// [b - f*b, b + f*b] so that jobs failing together do not restart
	// together. Default 0.1; in [0, 1].
	JitterFactor float64 `yaml:"jitter_factor"`
	// ResetBackoffThreshold is how long the job must run without failure
	// for exponential-delay's back-off (and attempt count) to start over.
	// Default "1h"; > 0.
	ResetBackoffThreshold time.Duration `yaml:"reset_backoff_threshold"`
	// AttemptsBeforeReset, when > 0, makes exponential-delay give up after
	// this many restarts without a reset. Default 0: no limit.
	AttemptsBeforeReset int `yaml:"attempts_before_reset"`
	// Attempts is fixed-delay's number of restarts; the next failure fails
	// the job. Default 1; >= 0.
	Attempts int `yaml:"attempts"`
	// Delay is the back-off of fixed-delay and failure-rate. Default "1s"; >= 0.
	Delay time.Duration `yaml:"delay"`
	// MaxFailuresPerInterval is failure-rate's number of restarts within
	// failure_rate_interval; one more failure in it fails the job.
	// Default 1; >= 1.
	MaxFailuresPerInterval int `yaml:"max_failures_per_interval"`
	// FailureRateInterval is failure-rate's sliding window. Default "1m"; > 0.
	FailureRateInterval time.Duration `yaml:"failure_rate_interval"`
}

// Job returns the restart config as the job package takes it.
func (r *RestartConfig) Job() job.RestartConfig {
	return job.RestartConfig{
		Strategy:       job.RestartStrategyName(r.Strategy),
		InitialBackoff: r.InitialBackoff, MaxBackoff: r.MaxBackoff, BackoffMultiplier: r.BackoffMultiplier,
		JitterFactor: r.JitterFactor, ResetBackoffThreshold: r.ResetBackoffThreshold, AttemptsBeforeReset: r.AttemptsBeforeReset,
		Attempts: r.Attempts, Delay: r.Delay,
		MaxFailuresPerInterval: r.MaxFailuresPerInterval, FailureRateInterval: r.FailureRateInterval,
	}
}

// defaultRestart returns job.DefaultRestartConfig as a RestartConfig.
func defaultRestart() RestartConfig {
	d := job.DefaultRestartConfig()
	return RestartConfig{
		Strategy:       RestartStrategy(d.Strategy),
		InitialBackoff: d.InitialBackoff, MaxBackoff: d.MaxBackoff, BackoffMultiplier: d.BackoffMultiplier,
		JitterFactor: d.JitterFactor, ResetBackoffThreshold: d.ResetBackoffThreshold, AttemptsBeforeReset: d.AttemptsBeforeReset,
		Attempts: d.Attempts, Delay: d.Delay,
		MaxFailuresPerInterval: d.MaxFailuresPerInterval, FailureRateInterval: d.FailureRateInterval,
	}
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
	// AllowUnauthenticatedControl lets the mutating endpoints (POST
	// /api/v1/savepoints, stop-with-savepoint included) answer without a
	// bearer token on a listener that is not loopback. Without it they are
	// refused with 403 there, so that no other host or container on the
	// network can stop the job; on a loopback listener, or with a token,
	// it changes nothing. Default false.
	AllowUnauthenticatedControl bool `yaml:"allow_unauthenticated_control"`
}

// BearerToken returns the API's bearer token from metrics.bearer_token_env
// or metrics.bearer_token_file, "" when none is configured. It fails when the
// variable is unset or empty, or the file cannot be read or is empty.
func (c *Config) BearerToken() (string, error) {
	m := &c.Metrics
	t, err := ReadBearerToken(m.BearerTokenEnv, m.BearerTokenFile)
	switch {
	case err != nil && m.BearerTokenEnv != "":
		return "", fmt.Errorf("metrics.bearer_token_env: %w", err)
	case err != nil:
		return "", fmt.Errorf("metrics.bearer_token_file: %w", err)
	}
	return t, nil
}

// ReadBearerToken returns the bearer token held by the environment variable
// env, else by the file at file (a trailing newline is ignored); "" when
// both are "". It fails when both are set, the variable is unset or empty,
// or the file cannot be read or is empty.
func ReadBearerToken(env, file string) (string, error) {
	switch {
	case env != "" && file != "":
		return "", fmt.Errorf("a token from environment variable %s and from file %s: give one", env, file)
	case env != "":
		t := os.Getenv(env)
		if t == "" {
			return "", fmt.Errorf("environment variable %s is unset or empty", env)
		}
		return t, nil
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", err
		}
		t := strings.TrimRight(string(b), "\r\n")
		if t == "" {
			return "", fmt.Errorf("%s is empty", file)
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

// ProcessConfig tunes the Go runtime of the process running the job
// (Config.ApplyProcess applies it). The GOGC and GOMEMLIMIT environment
// variables, when set, take precedence over its fields.
type ProcessConfig struct {
	// GCPercent is the garbage collector's pacing (GOGC,
	// runtime/debug.SetGCPercent): a collection starts when the heap has
	// grown by this percentage of the live heap left by the last one.
	// Higher spends less CPU on collections and more memory. Default 100
	// (Go's; 200 measured no CPU gain above the noise on the copy
	// benchmark for 1.3x to 1.7x the peak RSS: BENCHMARKS.md, "The copy
	// path"); in [10, 10000], or -1 to turn the pacing off, which needs
	// memory_limit_bytes.
	GCPercent int `yaml:"gc_percent"`
	// MemoryLimitBytes is the Go runtime's soft memory limit in bytes
	// (GOMEMLIMIT, runtime/debug.SetMemoryLimit): the collector runs as
	// often as it takes to keep the memory Go manages under it, whatever
	// gc_percent says. Memory outside the Go heap (the Pebble block cache
	// is Go-managed only in pure-Go builds) is not bounded by it. Set it
	// below a container's memory limit. Default 0: no limit; otherwise
	// >= 16777216 (16 MiB).
	MemoryLimitBytes int64 `yaml:"memory_limit_bytes"`
}

// SourceConfig reads one Kafka topic (type kafka, the default) or what
// another registered source type reads.
type SourceConfig struct {
	// Name identifies the source; operators and sinks refer to it by name.
	// Required; unique among sources, operators and sinks.
	Name string `yaml:"name"`
	// UID identifies the source's state in checkpoints and savepoints
	// (Flink's operator uid): a restore gives it the state recorded under
	// the same uid, so renaming it with its uid kept keeps its state.
	// Default "": the name. Unique among the uids (and names without a
	// uid) of sources, operators and sinks.
	UID string `yaml:"uid"`
	// Type is a registered source type (see the README's source
	// reference). Default "kafka".
	Type string `yaml:"type"`
	// Params are the type's own settings, decoded strictly by the type's
	// params schema (connector.SourceFactory.Params). The kafka type takes
	// none: its settings are the fields of the source. Default: none.
	Params yaml.Node `yaml:"params"`
	// Topic is the Kafka topic read. For type kafka exactly one of topic,
	// topics and topic_pattern is required; a valid topic name: at most 249
	// of [a-zA-Z0-9._-], not "." or "..".
	Topic string `yaml:"topic"`
	// Topics are several Kafka topics read by the one source (Flink's
	// KafkaSource setTopics): each a valid topic name, no duplicates, at
	// least one. Instead of topic. Default: none.
	Topics []string `yaml:"topics"`
	// TopicPattern is a regular expression (Go's RE2 syntax) of the topics
	// read (Flink's KafkaSource setTopicPattern): every topic whose whole
	// name it matches, internal topics ("__...") excepted, at start and,
	// with partition_discovery_interval, every matching topic created
	// later, read from its earliest offset. Instead of topic. Default:
	// none.
	TopicPattern string `yaml:"topic_pattern"`
	// StartFrom is where a partition without a committed position starts:
	// earliest or latest. Default "earliest".
	StartFrom StartFrom `yaml:"start_from"`
	// Format is what record values hold: "json" (each value one JSON
	// value: objects, arrays or scalars; anything else is a bad record with
	// reason malformed_json), "string" or "bytes" (passed through
	// unchecked; expressions see a string value), or another registered
	// format (see the README's format reference). Default "json".
	Format RecordFormat `yaml:"format"`
	// Changelog, when "header", reads the topic as a changelog written in
	// header mode (a sink with changelog: header): each record's change
	// kind (+I, -U, +U, -D) comes from its kstreamd-change header, and the
	// header is removed; the stream is a full changelog (Flink's kafka
	// connector with a changelog format). "upsert_header" reads it the
	// same way as an upsert changelog (a table's upserts written by a
	// header sink: +U without the -U of the row it replaces; Flink's
	// upsert-kafka), which the planner treats as a table source's; a
	// "header" source fails on a record a header sink marked as a table's
	// upsert (kstreamd-changelog: upsert). Default "": every record is an
	// insert.
	Changelog graph.ChangelogMode `yaml:"changelog"`
	// FormatParams are the format's own settings, decoded strictly by its
	// params schema (connector.FormatFactory.Params). Default: none.
	FormatParams yaml.Node `yaml:"format_params"`
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
	// Timestamp says where a record's event time comes from. Default: the
	// Kafka record timestamp.
	Timestamp TimestampConfig `yaml:"timestamp"`
	// Watermark configures the source's watermarks (bounded
	// out-of-orderness per partition, minimum over partitions).
	Watermark WatermarkConfig `yaml:"watermark"`
	// WatermarkAlignment, if set, pauses reading a partition whose
	// watermark runs more than max_drift ahead of its alignment group's
	// (Flink's WatermarkStrategy.withWatermarkAlignment). Default: off.
	WatermarkAlignment *WatermarkAlignmentConfig `yaml:"watermark_alignment"`
	// Table reads the topic as a table (Kafka Streams' KTable, Flink's
	// upsert-kafka): a compacted topic whose records upsert the row of
	// their Kafka key and whose tombstones (null values) delete it. The
	// source emits a changelog: an upsert as +U (runtime.ChangeUpdateAfter),
	// a tombstone as -D (runtime.ChangeDelete, null value); a record
	// without a key is a bad record (missing_key). The operator reading it
	// materializes the table in its state (global_table_join, table_join).
	// Default false: null values are bad records (empty_value), except on
	// a broadcast rules source.
	Table bool `yaml:"table"`
}

// TimestampConfig is sources[].timestamp: the record time from the value.
type TimestampConfig struct {
	// Expression over the record giving its event time, e.g. ts or
	// event.time. Default "": the Kafka record timestamp. A record on which
	// it fails is a bad record with reason eval_error.
	Expression operators.Expression `yaml:"expression"`
	// Unit of the expression's result: ms (default), s (a number of
	// seconds, fractions allowed) or rfc3339 (a string).
	Unit operators.TimestampUnit `yaml:"unit"`
	// MaxAhead, if set, makes a record whose event time (from expression,
	// or the Kafka timestamp) is more than max_ahead ahead of the wall
	// clock a bad record with reason event_time_out_of_range, which never
	// moves the watermark. Default 0: off; otherwise >= 1ms. Whatever it
	// is, an event time outside [0, 253402300799999] ms since the epoch
	// (runtime.MinEventTime, runtime.MaxEventTime) is such a bad record.
	MaxAhead time.Duration `yaml:"max_ahead"`
}

// WatermarkConfig is sources[].watermark.
type WatermarkConfig struct {
	// OutOfOrderness is how far behind a partition's largest timestamp a
	// record may arrive and still be on time: the partition's watermark is
	// that timestamp minus out_of_orderness minus 1ms. Default 0; >= 0.
	OutOfOrderness time.Duration `yaml:"out_of_orderness"`
	// Idleness is how long a partition may go without records before it
	// stops holding the watermark back (Flink's withIdleness). Default 0:
	// never; otherwise >= 100ms.
	Idleness time.Duration `yaml:"idleness"`
}

// WatermarkAlignmentConfig is sources[].watermark_alignment: Flink's
// watermark alignment (FLIP-182, per split as FLIP-217;
// WatermarkStrategy.withWatermarkAlignment(group, maxAllowedWatermarkDrift,
// updateInterval)). A partition whose largest event time is more than
// MaxDrift ahead of the least of its group's partitions that still have
// records to read has its fetched records held and is not fetched until
// that least catches up, so that a
// backlog is read at about the same event time on every partition and
// the event-time operators downstream (whose watermark is the least of
// all) buffer less. It changes which partition is read when, never the
// records emitted, their order within a partition, the watermark, nor
// what a checkpoint holds.
type WatermarkAlignmentConfig struct {
	// Group names the alignment group: the sources (all their subtasks) of
	// one group align with each other. Default "": the source's name (its
	// own subtasks align with each other). In cluster mode a group spans
	// the subtasks of one daemon.
	Group string `yaml:"group"`
	// MaxDrift is how far ahead of its group's least watermark a
	// partition may read (Flink's maxAllowedWatermarkDrift). Required; >=
	// 1ms.
	MaxDrift time.Duration `yaml:"max_drift"`
	// UpdateInterval is how often a subtask whose partitions are paused
	// looks at its group's least watermark again while it waits (it also
	// does after every fetch it reads). Default 0: 100ms (Flink's default
	// is 1s, a round trip to its coordinator; here the group is in
	// memory); else >= 1ms.
	UpdateInterval time.Duration `yaml:"update_interval"`
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
	s.Format = graph.DefaultFormat
	s.OnError = OnErrorSkip
	s.MaxRecordBytes = 1 << 20
	s.PartitionDiscoveryInterval = 30 * time.Second
}

// OperatorConfig is one operator: an instance of a registered operator
// type (operators.Registry).
type OperatorConfig struct {
	// Name identifies the operator; other operators and sinks refer to it
	// by name. Required; unique among sources, operators and sinks. Its
	// state in checkpoints is found by UID, which defaults to it: renaming
	// an operator without keeping its uid loses its state.
	Name string `yaml:"name"`
	// UID identifies the operator's state in checkpoints and savepoints
	// (Flink's operator uid): a restore gives it the state recorded under
	// the same uid, so renaming it with its uid kept keeps its state.
	// Default "": the name. Unique among the uids (and names without a
	// uid) of sources, operators and sinks.
	UID string `yaml:"uid"`
	// Type is a registered operator type (see the README's operator
	// reference). Required.
	Type string `yaml:"type"`
	// Input is the name of the source or operator whose records the
	// operator reads. Required (except for two-input types, which take
	// inputs); the graph must have no cycle.
	Input string `yaml:"input"`
	// Inputs are the inputs of a two-input type (interval_join), by the
	// type's roles (left, right), each with its own key_by; required for
	// those types, refused for the others, which take input and key_by.
	Inputs map[string]OperatorInputConfig `yaml:"inputs"`
	// KeyBy keys the input (Flink's keyBy): records are routed to subtasks
	// by the key group of the key, and keyed state is per key. A field path
	// ("color", "user.id": a JSON string gives its characters, a number its
	// JSON text) or an expression over the record. Required for keyed types;
	// optional for the others (it then re-keys their input). Default "":
	// records stay on their subtask (forward) or are spread round-robin
	// when the parallelism differs.
	KeyBy string `yaml:"key_by"`
	// Broadcast is the name of a source whose records reach every subtask
	// (the rules stream). Required for types that take a broadcast input,
	// refused for the others. Default "".
	Broadcast string `yaml:"broadcast"`
	// Parallelism is the number of subtasks. Default 0 meaning
	// job.parallelism for an operator with key_by, and the input's
	// parallelism otherwise (records then stay on their subtask); else in
	// [1, 32768] and at most job.max_parallelism.
	Parallelism int `yaml:"parallelism"`
	// AsyncState enables Flink's State V2 asynchronous state access for
	// this keyed operator (EnableAsyncState); default false; only types
	// with an async version support it.
	AsyncState bool `yaml:"async_state"`
	// Chain, when false, keeps this operator out of any chain: it runs in
	// a task of its own, with channels to and from its neighbours (Flink's
	// disableChaining). Default true: the operator is chained to its
	// upstream operator and its downstream one where job.chaining allows
	// (see JobConfig.Chaining).
	Chain *bool `yaml:"chain"`
	// Params are the type's own settings, decoded strictly by the type's
	// params schema (operators.Factory.Params). Default: none.
	Params yaml.Node `yaml:"params"`
}

// SinkConfig writes one stream to a Kafka topic (type kafka, the
// default) or where another registered sink type writes.
type SinkConfig struct {
	// Name identifies the sink. Required; unique among sources, operators
	// and sinks.
	Name string `yaml:"name"`
	// UID identifies the sink's state in checkpoints and savepoints
	// (Flink's operator uid): a restore gives it the state recorded under
	// the same uid, so renaming it with its uid kept keeps its state.
	// Default "": the name. Unique among the uids (and names without a
	// uid) of sources, operators and sinks.
	UID string `yaml:"uid"`
	// Type is a registered sink type (see the README's sink reference).
	// Default "kafka".
	Type string `yaml:"type"`
	// Params are the type's own settings, decoded strictly by the type's
	// params schema (connector.SinkFactory.Params). The kafka type takes
	// none: its settings are the fields of the sink. Default: none.
	Params yaml.Node `yaml:"params"`
	// Format encodes each record's value before it is written: a
	// registered format (see the README's format reference). Default "":
	// values are written as they are.
	Format RecordFormat `yaml:"format"`
	// FormatParams are the format's own settings, decoded strictly by its
	// params schema. Default: none.
	FormatParams yaml.Node `yaml:"format_params"`
	// Input is the name of the operator (or source) whose records are
	// written. Required.
	Input string `yaml:"input"`
	// Topic is the Kafka topic written. Required for type kafka; a valid
	// topic name.
	Topic string `yaml:"topic"`
	// Delivery is exactly-once, at-least-once or none, as the type
	// supports. Default "at-least-once". exactly-once needs
	// checkpoints.interval > 0.
	Delivery Delivery `yaml:"delivery"`
	// Parallelism is the number of sink subtasks. Default 0 meaning the
	// input's parallelism (see Config.SinkParallelism); else in [1, 32768].
	Parallelism int `yaml:"parallelism"`
	// TransactionalIDPrefix starts the Kafka transactional ids of an
	// exactly-once sink: <prefix>-<subtask>-<slot>. Default "" meaning
	// "kstreamd-<job>-<sink uid>" (see Config.TransactionalIDPrefix). Two
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
	// PoolSize is the number of transactional ids per sink subtask; a
	// pool of n rides out n - 3 failed checkpoints in a row. Default
	// max(5, checkpoints.tolerable_failures + 3), at most 100
	// (sink.PoolSizeFor; 0 in a Config built in code means the default);
	// in [3, 100].
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
	// Changelog is how a changelog input (an aggregate's running results,
	// say) is written: "upsert" (the default) writes +I and +U as values
	// keyed by the key, drops -U and writes -D as a tombstone (Kafka's
	// compacted-topic convention); "header" writes every record with its
	// kind in the kstreamd-change header (and, when the input is an upsert
	// changelog, a table's, kstreamd-changelog: upsert, so that it is read
	// back with changelog: upsert_header). An append-only input is written
	// unchanged in upsert mode. Default "" meaning "upsert".
	Changelog graph.ChangelogMode `yaml:"changelog"`
}

// setDefaults sets the defaults of a list item before it is decoded.
func (s *SinkConfig) setDefaults() {
	s.Delivery = graph.DefaultDelivery
	s.TransactionTimeout = sink.DefaultTransactionTimeout
}

// TransactionalIDPrefix returns the sink's transactional_id_prefix, or
// "kstreamd-<job>-<uid>" when it is empty, uid being the sink's uid (its
// name unless it sets one): a sink renamed with its uid kept keeps its
// transactional ids, so that its recovery fences the transactions the
// run before left open (under a new prefix they would stay open until
// the transaction timeout, holding back read_committed consumers of the
// topic).
func (c *Config) TransactionalIDPrefix(s *SinkConfig) string {
	if s.TransactionalIDPrefix != "" {
		return s.TransactionalIDPrefix
	}
	return "kstreamd-" + c.Job.Name + "-" + cmp.Or(s.UID, s.Name)
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
	// Kind is what the demo writes: "shapes" ("" too, the default: coloured items
	// and shape-pair rules, for the colorshape job) or "transactions"
	// (payments and fraud rules, for the rules job, configs/rules.yaml).
	Kind string `yaml:"kind"`
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
		Restart: defaultRestart(),
		Metrics: MetricsConfig{Address: "127.0.0.1:9249"},
		Log:     LogConfig{Level: LogLevelInfo, Format: LogFormatText},
		Process: ProcessConfig{GCPercent: DefaultGCPercent},
		Demo:    DemoConfig{ItemsPerSecond: 5},
		Cluster: defaultCluster(),

		SchemaRegistry: defaultSchemaRegistry(),
	}
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

// SplitInput splits an input name into the vertex it reads and the side
// output of that vertex ("" for the main output): "late_clicks.late" is
// side output late of operator late_clicks when no stage is called
// "late_clicks.late" and late_clicks is an operator. Whether the operator's
// type declares that side output is checked by validation.
func (c *Config) SplitInput(name string) (vertex, output string) {
	if _, ok := c.OperatorByName(name); ok {
		return name, ""
	}
	if _, ok := c.SourceByName(name); ok {
		return name, ""
	}
	if i := strings.LastIndexByte(name, '.'); i > 0 {
		if _, ok := c.OperatorByName(name[:i]); ok {
			return name[:i], name[i+1:]
		}
	}
	return name, ""
}

// inputVertex returns the vertex an input name reads (SplitInput).
func (c *Config) inputVertex(name string) string {
	v, _ := c.SplitInput(name)
	return v
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

// routed reports whether op's type keys its input itself
// (operators.Factory.Router): it is keyed without key_by.
func (c *Config) routed(op *OperatorConfig) bool {
	f, ok := c.registry().Lookup(op.Type)
	return ok && f.Router != nil
}

// OperatorParallelism returns the number of subtasks of op: its
// parallelism; when that is 0, job.parallelism for an operator with key_by
// or of a type that keys its input itself (rules)
// and its input's parallelism otherwise (job.parallelism when the input
// names nothing or the inputs form a cycle, which Validate refuses).
func (c *Config) OperatorParallelism(op *OperatorConfig) int {
	for range len(c.Operators) + 1 {
		if op.Parallelism > 0 {
			return op.Parallelism
		}
		if _, two := c.twoInput(op); op.KeyBy != "" || c.routed(op) || two {
			return c.Job.Parallelism
		}
		if src, ok := c.SourceByName(op.Input); ok {
			return c.SourceParallelism(src)
		}
		in, ok := c.OperatorByName(c.inputVertex(op.Input))
		if !ok {
			break
		}
		op = in
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
	if op, ok := c.OperatorByName(c.inputVertex(s.Input)); ok {
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
		ts = append(ts, s.Topics...)
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
