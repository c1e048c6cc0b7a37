package pipeline

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/operators"

	"gopkg.in/yaml.v3"
)

var update = flag.Bool("update", false, "rewrite testdata/*.bad.yaml.err from the current messages")

// TestBadConfigs loads each testdata/*.bad.yaml and compares the error with
// the exact message in its .err golden file.
func TestBadConfigs(t *testing.T) {
	files, err := filepath.Glob("testdata/*.bad.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no testdata/*.bad.yaml")
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".bad.yaml"), func(t *testing.T) {
			cfg, err := Load(file, nil)
			if err == nil {
				t.Fatalf("Load(%s) accepted the config: %+v", file, cfg)
			}
			if cfg != nil {
				t.Errorf("Load(%s) returned a config with its error", file)
			}
			var problems ConfigErrors
			if !errors.As(err, &problems) || len(problems) == 0 {
				t.Fatalf("Load(%s) error %T is not a non-empty ConfigErrors: %v", file, err, err)
			}
			for _, p := range problems {
				if p.File != file || p.Line < 1 {
					t.Errorf("problem without file and line: %#v", p)
				}
			}
			var one *ConfigError
			if !errors.As(err, &one) || one != problems[0] {
				t.Errorf("errors.As(*ConfigError) did not find the first problem")
			}
			got := err.Error() + "\n"
			golden := file + ".err"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("missing golden (run go test -update): %v", err)
			}
			if got != string(want) {
				t.Errorf("Load(%s) error:\n%s\nwant:\n%s", file, got, want)
			}
		})
	}
}

// TestGoldensHaveConfigs catches golden files left behind by a renamed or
// deleted bad config.
func TestGoldensHaveConfigs(t *testing.T) {
	goldens, err := filepath.Glob("testdata/*.bad.yaml.err")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range goldens {
		if _, err := os.Stat(strings.TrimSuffix(g, ".err")); err != nil {
			t.Errorf("golden %s has no config: %v", g, err)
		}
	}
}

// TestGoodConfigs loads each testdata/*.good.yaml and the reference job.
func TestGoodConfigs(t *testing.T) {
	files, err := filepath.Glob("testdata/*.good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../configs/colorshape.yaml")
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			cfg, err := Load(file, nil)
			if err != nil {
				t.Fatalf("Load(%s):\n%v", file, err)
			}
			if err := cfg.Validate(); err != nil {
				t.Errorf("Validate after Load(%s):\n%v", file, err)
			}
		})
	}
}

// withoutOrigin returns a copy of c without its positions, for comparison
// with a Config built in code.
func withoutOrigin(c *Config) Config {
	cp := *c
	cp.src = nil
	cp.params = nil // decoded params are checked on their own
	cp.conns, cp.connParams = nil, nil
	return cp
}

// minimalGraph is the graph of testdata/minimal.good.yaml, with the list
// items' defaults.
func minimalGraph() ([]SourceConfig, []OperatorConfig, []SinkConfig) {
	return []SourceConfig{
			{Name: "items", Topic: "items", StartFrom: StartFromEarliest, Format: RecordFormatJSON, OnError: OnErrorSkip, MaxRecordBytes: 1 << 20, PartitionDiscoveryInterval: 30 * time.Second},
			{Name: "rules", Topic: "rules", StartFrom: StartFromEarliest, Format: RecordFormatJSON, OnError: OnErrorSkip, MaxRecordBytes: 1 << 20, PartitionDiscoveryInterval: 30 * time.Second},
		}, []OperatorConfig{
			{Name: "matcher", Type: OperatorShapePairMatcher, Input: "items", KeyBy: "color", Broadcast: "rules"},
		}, []SinkConfig{
			{Name: "matches", Input: "matcher", Topic: "matches", Delivery: DeliveryAtLeastOnce, TransactionTimeout: 15 * time.Minute, PoolSize: 6},
		}
}

func TestDefaultsApplied(t *testing.T) {
	cfg, err := Load("testdata/minimal.good.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	sources, operators, sinks := minimalGraph()
	want := Config{
		Job:     JobConfig{Name: "minimal", Parallelism: 2, MaxParallelism: 0},
		DataDir: "./data",
		Kafka: KafkaConfig{
			Brokers:  []string{"localhost:9092"},
			ClientID: "kstreamd",
			Embedded: EmbeddedKafkaConfig{Enabled: false, Address: "127.0.0.1:9092", DataDir: "", Partitions: 4},
		},
		State:       StateConfig{Backend: StateBackendPebble, Dir: "", BlockCacheBytes: 67108864},
		Checkpoints: CheckpointsConfig{Timeout: 10 * time.Minute, TolerableFailures: 3, Retained: 3},
		Restart: RestartConfig{Strategy: RestartExponentialDelay, InitialBackoff: time.Second, MaxBackoff: time.Minute,
			BackoffMultiplier: 1.5, JitterFactor: 0.1, ResetBackoffThreshold: time.Hour, Attempts: 1, Delay: time.Second,
			MaxFailuresPerInterval: 1, FailureRateInterval: time.Minute},
		Metrics:   MetricsConfig{Address: "127.0.0.1:9249"},
		Log:       LogConfig{Level: LogLevelInfo, Format: LogFormatText},
		Process:   ProcessConfig{GCPercent: 100, MemoryLimitBytes: 0},
		Sources:   sources,
		Operators: operators,
		Sinks:     sinks,
		Demo:      DemoConfig{Enabled: false, ItemsTopic: "", RulesTopic: "", ItemsPerSecond: 5},
		Cluster: ClusterConfig{Enabled: false, Store: ClusterStoreConfig{Kind: StoreFilesystem, S3: S3StoreConfig{Region: "us-east-1", TLS: true, PathStyle: true}},
			SessionTimeout: 45 * time.Second, RebalanceTimeout: time.Minute, RevokeTimeout: 30 * time.Second, PurgeRepartitions: true, TakeoverTimeout: 30 * time.Second,
			RepartitionTransactionTimeout: 15 * time.Minute, MarkerInterval: 200 * time.Millisecond},
		SchemaRegistry: defaultSchemaRegistry(),
	}
	if got := withoutOrigin(cfg); !reflect.DeepEqual(got, want) {
		t.Errorf("Load(minimal) =\n%+v\nwant\n%+v", got, want)
	}
	// The resolved values of the defaults.
	checks := []struct {
		name      string
		got, want any
	}{
		{"Brokers", cfg.Brokers(), []string{"localhost:9092"}},
		{"StateDir", cfg.StateDir(), filepath.Join("data", "state")},
		{"EmbeddedDataDir", cfg.EmbeddedDataDir(), filepath.Join("data", "kafka")},
		{"MaxParallelism", cfg.MaxParallelism(), 128},
		{"SourceParallelism", cfg.SourceParallelism(&cfg.Sources[0]), 2},
		{"OperatorParallelism", cfg.OperatorParallelism(&cfg.Operators[0]), 2},
		{"SinkParallelism", cfg.SinkParallelism(&cfg.Sinks[0]), 2},
		{"Topics", cfg.Topics(), []string{"items", "matches", "rules"}},
		{"SlogLevel", cfg.Log.Level.SlogLevel().String(), "INFO"},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestFullConfig(t *testing.T) {
	cfg, err := Load("testdata/full.good.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Job:     JobConfig{Name: "full-job_1", Parallelism: 3, MaxParallelism: 256},
		DataDir: "/var/lib/kstreamd",
		Kafka: KafkaConfig{
			Brokers:  []string{"kafka-1:9092", "[::1]:9093"},
			ClientID: "full",
			Embedded: EmbeddedKafkaConfig{Enabled: true, Address: ":19092", DataDir: "/tmp/kfake", Partitions: 8},
		},
		State: StateConfig{Backend: StateBackendHashMap, Dir: "/tmp/state", BlockCacheBytes: 0},
		Checkpoints: CheckpointsConfig{Interval: 5 * time.Second, Timeout: time.Minute, MinPause: 500 * time.Millisecond,
			TolerableFailures: 1, Retained: 2, Incremental: true, Dir: "/tmp/chk", SavepointDir: "/tmp/sp"},
		Restart: RestartConfig{Strategy: RestartFixedDelay, InitialBackoff: time.Second, MaxBackoff: time.Minute,
			BackoffMultiplier: 1.5, JitterFactor: 0.1, ResetBackoffThreshold: time.Hour, Attempts: 5, Delay: 250 * time.Millisecond,
			MaxFailuresPerInterval: 1, FailureRateInterval: time.Minute},
		Metrics: MetricsConfig{Address: ""},
		Log:     LogConfig{Level: LogLevelDebug, Format: LogFormatJSON},
		Process: ProcessConfig{GCPercent: 400, MemoryLimitBytes: 256 << 20},
		Sources: []SourceConfig{
			{Name: "items", Topic: "items.v1", StartFrom: StartFromLatest, Format: RecordFormatJSON, Parallelism: 6, OnError: OnErrorSkip, MaxRecordBytes: 1 << 20, PartitionDiscoveryInterval: 30 * time.Second},
			{Name: "rules", Topic: "rules", StartFrom: StartFromEarliest, Format: RecordFormatJSON, Parallelism: 1, OnError: OnErrorSkip, MaxRecordBytes: 1 << 20, PartitionDiscoveryInterval: 30 * time.Second},
		},
		Operators: []OperatorConfig{
			{Name: "matcher", Type: OperatorShapePairMatcher, Input: "items", KeyBy: "color", Broadcast: "rules", Parallelism: 4},
			{Name: "counts", Type: OperatorKeyedCount, Input: "matcher", KeyBy: "rule"},
			{Name: "averages", Type: OperatorCountWindowAverage, Input: "items", KeyBy: "shape", Parallelism: 5},
		},
		Sinks: []SinkConfig{
			{Name: "matches", Input: "matcher", Topic: "matches", Delivery: DeliveryNone, TransactionTimeout: 15 * time.Minute, PoolSize: 5},
			{Name: "counted", Input: "counts", Topic: "counts", Delivery: DeliveryAtLeastOnce, Parallelism: 7, TransactionTimeout: 15 * time.Minute, PoolSize: 5},
			{Name: "raw", Input: "rules", Topic: "rules-copy", Delivery: DeliveryAtLeastOnce, TransactionTimeout: 15 * time.Minute, PoolSize: 5},
		},
		Demo:           DemoConfig{Enabled: true, ItemsTopic: "items.v1", RulesTopic: "rules", ItemsPerSecond: 0.5},
		Cluster:        defaultCluster(),
		SchemaRegistry: defaultSchemaRegistry(),
	}
	if got := withoutOrigin(cfg); !reflect.DeepEqual(got, want) {
		t.Errorf("Load(full) =\n%+v\nwant\n%+v", got, want)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"Brokers", cfg.Brokers(), []string{"kafka-1:9092", "[::1]:9093"}},
		{"StateDir", cfg.StateDir(), "/tmp/state"},
		{"EmbeddedDataDir", cfg.EmbeddedDataDir(), "/tmp/kfake"},
		{"MaxParallelism", cfg.MaxParallelism(), 256},
		{"SourceParallelism items", cfg.SourceParallelism(&cfg.Sources[0]), 6},
		{"OperatorParallelism counts", cfg.OperatorParallelism(&cfg.Operators[1]), 3},
		{"SinkParallelism matches", cfg.SinkParallelism(&cfg.Sinks[0]), 4},
		{"SinkParallelism counted", cfg.SinkParallelism(&cfg.Sinks[1]), 7},
		{"SinkParallelism raw", cfg.SinkParallelism(&cfg.Sinks[2]), 1},
		{"Topics", cfg.Topics(), []string{"counts", "items.v1", "matches", "rules", "rules-copy"}},
		{"SlogLevel", cfg.Log.Level.SlogLevel().String(), "DEBUG"},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestColorshapeReferenceJob(t *testing.T) {
	cfg, err := Load("../configs/colorshape.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"job", cfg.Job, JobConfig{Name: "colorshape", Parallelism: 2}},
		{"data_dir", cfg.DataDir, "./data"},
		{"embedded", cfg.Kafka.Embedded, EmbeddedKafkaConfig{Enabled: true, Address: "127.0.0.1:9092", Partitions: 4}},
		{"Brokers", cfg.Brokers(), []string{"127.0.0.1:9092"}},
		{"EmbeddedDataDir", cfg.EmbeddedDataDir(), filepath.Join("data", "kafka")},
		{"StateDir", cfg.StateDir(), filepath.Join("data", "state")},
		{"sources", cfg.Sources, []SourceConfig{
			{Name: "items", Topic: "items", StartFrom: StartFromEarliest, Format: RecordFormatJSON, OnError: OnErrorDeadLetter, DeadLetterTopic: "items-dlq", MaxRecordBytes: 1 << 20, PartitionDiscoveryInterval: 30 * time.Second,
				Watermark: WatermarkConfig{OutOfOrderness: time.Second, Idleness: 5 * time.Second}},
			{Name: "rules", Topic: "rules", StartFrom: StartFromEarliest, Format: RecordFormatJSON, Parallelism: 1, OnError: OnErrorDeadLetter, DeadLetterTopic: "rules-dlq", MaxRecordBytes: 1 << 20, PartitionDiscoveryInterval: 30 * time.Second},
		}},
		{"operators", withoutParams(cfg.Operators), []OperatorConfig{
			{Name: "matcher", Type: OperatorShapePairMatcher, Input: "items", KeyBy: "color", Broadcast: "rules"},
		}},
		{"matcher params", cfg.params["matcher"], any(&operators.ShapePairParams{PendingTimeout: 10 * time.Minute})},
		{"sinks", cfg.Sinks, []SinkConfig{
			{Name: "matches", Input: "matcher", Topic: "matches", Delivery: DeliveryExactlyOnce, TransactionTimeout: time.Minute, PoolSize: 6},
		}},
		{"demo", cfg.Demo, DemoConfig{Enabled: true, ItemsTopic: "items", RulesTopic: "rules", ItemsPerSecond: 5}},
		{"checkpoints", cfg.Checkpoints, CheckpointsConfig{Interval: 2 * time.Second, Timeout: 30 * time.Second, TolerableFailures: 3, Retained: 3, Incremental: true}},
		{"Topics", cfg.Topics(), []string{"items", "items-dlq", "matches", "rules", "rules-dlq"}},
		{"MaxParallelism", cfg.MaxParallelism(), 128},
		{"rules parallelism", cfg.SourceParallelism(&cfg.Sources[1]), 1},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %+v, want %+v", c.name, c.got, c.want)
		}
	}
}

func TestAnchorsResolved(t *testing.T) {
	cfg, err := Load("testdata/anchors.good.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range cfg.Sources {
		if s.StartFrom != StartFromLatest {
			t.Errorf("source %s start_from = %q, want latest (through the alias)", s.Name, s.StartFrom)
		}
	}
	if got, want := cfg.Brokers(), []string{"127.0.0.1:9092"}; !slices.Equal(got, want) {
		t.Errorf("Brokers() = %v, want the embedded address %v", got, want)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load("testdata/does-not-exist.yaml", nil)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load(missing) = %v, want fs.ErrNotExist", err)
	}
	var problems ConfigErrors
	if errors.As(err, &problems) {
		t.Errorf("a read failure is not a ConfigErrors: %v", err)
	}
}

// validConfig returns the minimal config built in code.
func validConfig() *Config {
	c := Default()
	c.Job.Name = "coded"
	c.Kafka.Brokers = []string{"localhost:9092"}
	c.Sources, c.Operators, c.Sinks = minimalGraph()
	return c
}

func TestValidateInCode(t *testing.T) {
	tests := []struct {
		name   string
		modify func(c *Config)
		want   string // "" for valid
	}{
		{"valid", func(*Config) {}, ""},
		{"default is incomplete", func(c *Config) { *c = *Default() }, strings.Join([]string{
			"job.name: required",
			"kafka.brokers: required unless kafka.embedded.enabled is true",
			"sources: at least one source is required",
			"sinks: at least one sink is required",
		}, "\n")},
		{"embedded replaces brokers", func(c *Config) { c.Kafka.Brokers = nil; c.Kafka.Embedded.Enabled = true }, ""},
		{"operator parallelism 0 inherits", func(c *Config) { c.Operators[0].Parallelism = 0 }, ""},
		{"job parallelism 0", func(c *Config) { c.Job.Parallelism = 0 }, "job.parallelism: must be >= 1, got 0"},
		{"parallelism above 32768", func(c *Config) { c.Sinks[0].Parallelism = 40000 },
			"sinks[0].parallelism: must be <= 32768, got 40000"},
		{"empty enum", func(c *Config) { c.Sources[1].StartFrom = "" },
			"sources[1].start_from: must be one of earliest, latest"},
		{"exactly-once", func(c *Config) { c.Sinks[0].Delivery = DeliveryExactlyOnce },
			"sinks[0].delivery: exactly-once needs checkpoints: set checkpoints.interval (transactions commit when a checkpoint completes)"},
		{"self input", func(c *Config) { c.Operators[0].Input = "matcher" },
			"operators[0].input: an operator cannot read its own output"},
		{"broadcast is input", func(c *Config) { c.Operators[0].Broadcast = "items" },
			`operators[0].broadcast: "items" is also the input; the broadcast input must be another source`},
		{"unknown broadcast", func(c *Config) { c.Operators[0].Broadcast = "rulez" },
			`operators[0].broadcast: no source is called "rulez" (did you mean "rules"?)`},
		{"max parallelism below operator", func(c *Config) { c.Job.MaxParallelism = 1 },
			`job.max_parallelism: 1 is less than the parallelism 2 of operators[0] ("matcher")`},
		{"negative block cache", func(c *Config) { c.State.BlockCacheBytes = -1 },
			"state.block_cache_bytes: must be >= 0, got -1"},
		{"gc percent too low", func(c *Config) { c.Process.GCPercent = 5 },
			"process.gc_percent: must be in [10, 10000], or -1 with memory_limit_bytes; got 5"},
		{"gc off without a limit", func(c *Config) { c.Process.GCPercent = -1 },
			"process.gc_percent: -1 (pacing off) needs process.memory_limit_bytes: without a limit the heap grows without bound"},
		{"memory limit too low", func(c *Config) { c.Process.MemoryLimitBytes = 1 << 20 },
			"process.memory_limit_bytes: must be 0 (no limit) or >= 16777216 (16 MiB), got 1048576"},
		{"no client id", func(c *Config) { c.Kafka.ClientID = "" }, "kafka.client_id: required"},
		{"embedded partitions", func(c *Config) { c.Kafka.Embedded.Partitions = 0 },
			"kafka.embedded.partitions: must be >= 1, got 0"},
		{"bad metrics address", func(c *Config) { c.Metrics.Address = "9249" },
			`metrics.address: invalid address "9249": want host:port`},
		{"metrics disabled", func(c *Config) { c.Metrics.Address = "" }, ""},
		{"long topic", func(c *Config) { c.Sinks[0].Topic = strings.Repeat("t", 250) },
			"sinks[0].topic: invalid topic name: 250 characters, at most 249 allowed"},
		{"topic of 249", func(c *Config) { c.Sinks[0].Topic = strings.Repeat("t", 249) }, ""},
		{"infinite demo rate", func(c *Config) { c.Demo.ItemsPerSecond = math.Inf(1) },
			"demo.items_per_second: must be a finite number > 0, got +Inf"},
		{"demo same topics", func(c *Config) {
			c.Demo = DemoConfig{Enabled: true, ItemsTopic: "items", RulesTopic: "items", ItemsPerSecond: 1}
		}, `demo.rules_topic: "items" is also demo.items_topic; items and rules need their own topics`},
		{"demo missing topics", func(c *Config) { c.Demo.Enabled = true },
			"demo.items_topic: required when demo.enabled is true\ndemo.rules_topic: required when demo.enabled is true"},
		{"empty data dir", func(c *Config) { c.DataDir = "" }, "data_dir: required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.modify(c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tc.want != "" && err == nil:
				t.Fatalf("Validate() = nil, want %q", tc.want)
			case tc.want != "" && err.Error() != tc.want:
				t.Errorf("Validate() =\n%v\nwant\n%v", err, tc.want)
			}
		})
	}
}

func TestMaxParallelismDerived(t *testing.T) {
	tests := []struct {
		name     string
		job, max int
		ops      []int
		want     int
	}{
		{"lower bound", 2, 0, []int{0}, 128},
		{"largest operator", 2, 0, []int{1, 200}, 512},
		{"job parallelism inherited", 100, 0, []int{0}, 256},
		{"no operators", 2, 0, nil, 128},
		{"explicit", 2, 4096, []int{200}, 4096},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.Job.Parallelism, c.Job.MaxParallelism = tc.job, tc.max
			for _, p := range tc.ops {
				c.Operators = append(c.Operators, OperatorConfig{Parallelism: p})
			}
			if got := c.MaxParallelism(); got != tc.want {
				t.Errorf("MaxParallelism() = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestLookups(t *testing.T) {
	c := validConfig()
	if s, ok := c.SourceByName("rules"); !ok || s != &c.Sources[1] {
		t.Errorf("SourceByName(rules) = %p, %v; want %p", s, ok, &c.Sources[1])
	}
	if op, ok := c.OperatorByName("matcher"); !ok || op != &c.Operators[0] {
		t.Errorf("OperatorByName(matcher) = %p, %v", op, ok)
	}
	if s, ok := c.SinkByName("matches"); !ok || s != &c.Sinks[0] {
		t.Errorf("SinkByName(matches) = %p, %v", s, ok)
	}
	if _, ok := c.SourceByName("matcher"); ok {
		t.Error("SourceByName found an operator")
	}
	if _, ok := c.OperatorByName("nope"); ok {
		t.Error("OperatorByName found nothing's name")
	}
	if _, ok := c.SinkByName("items"); ok {
		t.Error("SinkByName found a source")
	}
	c.Kafka.Brokers = nil
	if got := c.Brokers(); got != nil {
		t.Errorf("Brokers() with neither brokers nor embedded = %v, want nil", got)
	}
}

func TestConfigErrorFormat(t *testing.T) {
	tests := []struct {
		err  ConfigError
		want string
	}{
		{ConfigError{File: "x.yaml", Line: 12, Column: 5, Path: "operators[0].parallelism", Msg: "must be >= 1, got 0"},
			"x.yaml:12:5: operators[0].parallelism: must be >= 1, got 0"},
		{ConfigError{File: "x.yaml", Line: 3, Msg: "yaml syntax: did not find expected key"},
			"x.yaml:3: yaml syntax: did not find expected key"},
		{ConfigError{File: "x.yaml", Msg: "m"}, "x.yaml: m"},
		{ConfigError{Path: "job.name", Msg: "required"}, "job.name: required"},
		{ConfigError{Line: 1, Column: 2, Msg: "m"}, "1:2: m"},
	}
	for _, tc := range tests {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
}

func TestBuiltinOperatorTraits(t *testing.T) {
	reg := operators.NewBuiltinRegistry()
	want := map[string]operators.Traits{
		OperatorShapePairMatcher:   {Keyed: true, Broadcast: true},
		OperatorCountWindowAverage: {Keyed: true, AsyncState: true},
		OperatorKeyedCount:         {Keyed: true, AsyncState: true},
	}
	for typ, tr := range want {
		f, ok := reg.Lookup(typ)
		if !ok {
			t.Fatalf("%s is not registered", typ)
		}
		if f.Traits != tr {
			t.Errorf("%s traits = %+v, want %+v", typ, f.Traits, tr)
		}
	}
}

func TestSlogLevel(t *testing.T) {
	for level, want := range map[LogLevel]string{
		LogLevelDebug: "DEBUG", LogLevelInfo: "INFO", LogLevelWarn: "WARN", LogLevelError: "ERROR", "": "INFO",
	} {
		if got := level.SlogLevel().String(); got != want {
			t.Errorf("LogLevel(%q).SlogLevel() = %s, want %s", level, got, want)
		}
	}
}

// durations is a schema with a duration field, to test the decoder on a
// kind the pipeline schema does not hold yet.
type durations struct {
	Interval time.Duration `yaml:"interval"`
	Timeout  time.Duration `yaml:"timeout"`
}

func TestDecodeDuration(t *testing.T) {
	tests := []struct {
		in   string
		want durations
		err  string
	}{
		{in: "interval: 30s\ntimeout: 1m30s\n", want: durations{30 * time.Second, 90 * time.Second}},
		{in: "interval: 0\n", want: durations{Timeout: time.Minute}},
		{in: "interval:\n", want: durations{Interval: time.Second, Timeout: time.Minute}},
		{in: "interval: 30\n", err: "d.yaml:1:1: interval: must be a duration such as 30s or 1m30s, got 30"},
		{in: "timeout: soon\n", err: `d.yaml:1:1: timeout: must be a duration such as 30s or 1m30s, got "soon"`},
		{in: "timeout: [1s]\n", err: "d.yaml:1:1: timeout: must be a duration such as 30s or 1m30s, got a list"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			var root yaml.Node
			if err := yaml.Unmarshal([]byte(tc.in), &root); err != nil {
				t.Fatal(err)
			}
			o := &origin{file: "d.yaml", keys: map[string]position{}, vals: map[string]position{}, bad: map[string]bool{}}
			d := &decoder{o: o}
			got := durations{Interval: time.Second, Timeout: time.Minute}
			d.decode(root.Content[0], reflect.ValueOf(&got).Elem(), "")
			if tc.err != "" {
				if d.errs == nil || d.errs.Error() != tc.err {
					t.Fatalf("errors = %v, want %s", d.errs, tc.err)
				}
				return
			}
			if d.errs != nil {
				t.Fatal(d.errs)
			}
			if got != tc.want {
				t.Errorf("decoded %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestSuggest(t *testing.T) {
	tests := []struct {
		in   string
		cand []string
		want string
	}{
		{"parallelsim", []string{"name", "parallelism"}, "parallelism"},
		{"keyby", []string{"key_by", "input"}, "key_by"},
		{"nme", []string{"name", "type"}, "name"},
		{"Topic", []string{"topic"}, "topic"},
		{"zzz", []string{"name", "topic"}, ""},
		{"bootstrap", []string{"brokers", "client_id"}, ""},
	}
	for _, tc := range tests {
		if got := suggest(tc.in, tc.cand); got != tc.want {
			t.Errorf("suggest(%q, %v) = %q, want %q", tc.in, tc.cand, got, tc.want)
		}
	}
}

// TestExcessiveAliasing checks that aliases cannot blow a small file up
// into a huge amount of work or of problems.
func TestExcessiveAliasing(t *testing.T) {
	var b strings.Builder
	b.WriteString("x: &m {")
	for i := range 500 {
		fmt.Fprintf(&b, "k%d: 1, ", i)
	}
	b.WriteString("name: s}\nsources: [")
	for range 500 {
		b.WriteString("*m, ")
	}
	b.WriteString("]\n")
	_, err := Parse("alias.yaml", []byte(b.String()), nil)
	want := fmt.Sprintf("config too large: more than %d fields and values after expanding aliases", maxDecodeNodes)
	var problems ConfigErrors
	if !errors.As(err, &problems) || len(problems) != 1 || problems[0].Msg != want {
		t.Fatalf("Parse = %v, want only %q", err, want)
	}
}

// withoutParams returns ops with their params nodes cleared (they carry
// line numbers; the decoded params are compared on their own).
func withoutParams(ops []OperatorConfig) []OperatorConfig {
	out := slices.Clone(ops)
	for i := range out {
		out[i].Params = yaml.Node{}
	}
	return out
}

// TestCheckpointTimeoutDerived: a file that leaves checkpoints.timeout unset
// with an exactly-once sink whose transaction_timeout is under interval +
// 10m gets (T - interval) / 2, so the checkpoint times out first; a file
// that sets it keeps it, and a sink with the default 15m keeps the 10m.
func TestCheckpointTimeoutDerived(t *testing.T) {
	cfg := func(checkpoints, txn string) string {
		return `job:
  name: derived
kafka:
  brokers: [localhost:9092]
checkpoints:
` + checkpoints + `
sources:
  - name: items
    topic: items
operators:
  - name: counter
    type: keyed_count
    input: items
    key_by: color
sinks:
  - name: counts
    input: counter
    topic: counts
    delivery: exactly-once
` + txn
	}
	for _, tc := range []struct {
		name, checkpoints, txn string
		want                   time.Duration
	}{
		{"derived", "  interval: 1s", "    transaction_timeout: 1m", 29500 * time.Millisecond},
		{"written kept", "  interval: 1s\n  timeout: 20s", "    transaction_timeout: 1m", 20 * time.Second},
		{"default transaction timeout", "  interval: 1s", "", 10 * time.Minute},
		{"long transaction timeout", "  interval: 1s", "    transaction_timeout: 15m", 10 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("derived.yaml", []byte(cfg(tc.checkpoints, tc.txn)), nil)
			if err != nil {
				t.Fatal(err)
			}
			if c.Checkpoints.Timeout != tc.want {
				t.Errorf("checkpoints.timeout = %v, want %v", c.Checkpoints.Timeout, tc.want)
			}
		})
	}
}

// TestCheckpointTimeoutDerivedRefusals: a transaction timeout leaving less
// than 100ms for the derived checkpoint timeout keeps the 10m default and is
// refused naming it as the default; an explicit timeout under Flink's 10ms
// minimum is refused; in cluster mode the derivation leaves room for the
// session and takeover timeouts, so the derived value passes the cluster
// bound.
func TestCheckpointTimeoutDerivedRefusals(t *testing.T) {
	base := strings.Replace(clusterYAML, "cluster:\n  enabled: true", "cluster:\n  enabled: false", 1)
	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"too little room", "  interval: 1s\n  timeout: 1m", "  interval: 1s",
			"sinks[0].transaction_timeout: 1.1s must exceed checkpoints.interval 1s + checkpoints.timeout 10m0s (the default: not set in the file) = 10m1s"},
		{"under 10ms", "  timeout: 1m", "  timeout: 5ms", "checkpoints.timeout: must be >= 10ms, got 5ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			yaml := strings.Replace(base, tc.from, tc.to, 1)
			yaml = strings.Replace(yaml, "transaction_timeout: 10m", "transaction_timeout: 1100ms", 1)
			if tc.name == "under 10ms" {
				yaml = strings.Replace(yaml, "transaction_timeout: 1100ms", "transaction_timeout: 10m", 1)
			}
			_, err := Parse("t.yaml", []byte(yaml), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	// Cluster mode: interval 1s, tolerable_failures 1, session 45s,
	// rebalance 60s and takeover 30s by default, the repartition sinks'
	// transaction timeout 15m (first) and the sink's 10m: the repartition
	// sinks leave ((900 - 45 - 60 - 30) / 2 - 1) / 2 = 190.75s, and with
	// it the cluster bound is 2 x (1 + 190.75) + 135 = 518.5s, below both.
	yaml := strings.Replace(clusterYAML, "  interval: 1s\n  timeout: 1m", "  interval: 1s\n  tolerable_failures: 1", 1)
	c, err := Parse("cluster.yaml", []byte(yaml), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Checkpoints.Timeout, 190750*time.Millisecond; got != want {
		t.Errorf("cluster mode: checkpoints.timeout = %v, want %v", got, want)
	}
	if got, want := c.ClusterTxnBound(), 518500*time.Millisecond; got != want {
		t.Errorf("cluster mode: ClusterTxnBound() = %v, want %v", got, want)
	}
}
