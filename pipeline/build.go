package pipeline

import (
	"context"
	"os"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/job"
)

// Deps are what Build needs from the process (job.Deps).
type Deps = job.Deps

// ErrMaxParallelismChanged is wrapped by Build's error when the restored
// checkpoint has another max parallelism than the config asks for.
var ErrMaxParallelismChanged = job.ErrMaxParallelismChanged

// ClientOptions returns the franz-go options of the config's Kafka clients:
// seed brokers, client id, and the TLS dialer and SASL mechanism of
// kafka.tls and kafka.sasl, which Validate (run by Load) must have loaded
// (else dials or authentication fail with ErrSecurityNotLoaded).
func (c *Config) ClientOptions() []kgo.Opt {
	opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers()...), kgo.ClientID(c.Kafka.ClientID)}
	return append(opts, c.Kafka.securityOptions()...)
}

// Connectors returns the connector registry the config was parsed with
// (job.NewBuiltinConnectors when none was given), for job.Deps.Connectors.
func (c *Config) Connectors() *connector.Registry { return c.connectors() }

// Settings returns the job settings of the config: directories, state
// backend, checkpointing and the restart strategy.
func (c *Config) Settings() job.Settings {
	cp := c.Checkpoints
	return job.Settings{
		CheckpointDir: c.CheckpointDir(), SavepointDir: c.SavepointDir(), StateDir: c.StateDir(),
		StateBackend: string(c.State.Backend), BlockCacheBytes: c.State.BlockCacheBytes, RemoteState: c.State.Remote.settings(),
		UnitRemoteStore: c.unitRemoteStores(os.Getenv), StateWriteCacheBytes: c.State.WriteCacheBytes,
		StateL0CompactionThreshold: c.State.L0CompactionThreshold,
		Interval:                   cp.Interval, Timeout: cp.Timeout, MinPause: cp.MinPause,
		TolerableFailures: cp.TolerableFailures, Retained: cp.Retained, Incremental: cp.Incremental,
		AllowNonRestoredState: cp.AllowNonRestoredState,
		Restart:               c.Restart.Job(), MarkerInterval: c.Cluster.MarkerInterval, PurgeRepartitions: c.Cluster.PurgeRepartitions,
	}
}

// Build plans the config (Plan) and builds the graph into a runnable job
// (job.Build): restore, partition discovery, sink recovery, wiring.
func Build(ctx context.Context, cfg *Config, deps Deps) (*job.Job, error) {
	g, err := cfg.Plan()
	if err != nil {
		return nil, err
	}
	if deps.Connectors == nil {
		deps.Connectors = cfg.connectors()
	}
	return job.Build(ctx, g, cfg.Settings(), deps)
}

// NewRunner plans the config (Plan) and returns the job.Runner that builds,
// runs and, by restart, restarts it.
func NewRunner(cfg *Config, deps Deps, opts ...job.RunnerOption) (*job.Runner, error) {
	g, err := cfg.Plan()
	if err != nil {
		return nil, err
	}
	if deps.Connectors == nil {
		deps.Connectors = cfg.connectors()
	}
	return job.NewRunner(g, cfg.Settings(), deps, opts...)
}
