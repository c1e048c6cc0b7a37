package pipeline

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/kstreamd/kstreamd/graph"
	"github.com/kstreamd/kstreamd/sink"
)

// Cluster store kinds (cluster.store.kind).
const (
	// StoreFilesystem is a directory every daemon mounts (NFS, a shared
	// volume); the HEAD commit is a create-only hard link.
	StoreFilesystem = "filesystem"
	// StoreS3 is an S3-compatible object store; the HEAD commit is a PUT
	// with If-None-Match: *.
	StoreS3 = "s3"
)

// S3 defaults (cluster.store.s3).
const DefaultS3Region = "us-east-1"

// Environment variables holding the S3 store's credentials.
const (
	EnvS3AccessKey = "AWS_ACCESS_KEY_ID"
	EnvS3SecretKey = "AWS_SECRET_ACCESS_KEY"
)

// ClusterConfig runs the job on several daemons (docs/scale-out.md): each
// key-group edge becomes a repartition topic whose partitions are work units,
// assigned to the daemons of one consumer group. Default off: one process
// runs the whole job, exactly as without this section.
type ClusterConfig struct {
	// Enabled turns cluster mode on. Default false.
	Enabled bool `yaml:"enabled"`
	// GroupID is the consumer group the daemons of the job join. Default ""
	// meaning "kstreamd-<job>-cluster" (see Config.ClusterGroupID); when set,
	// only letters, digits, '.', '_' and '-'.
	GroupID string `yaml:"group_id"`
	// MemberID is the static group member id (group.instance.id, KIP-345)
	// of this daemon: a daemon restarting under the same id within the
	// session timeout keeps its units. Default "" meaning the host name.
	MemberID string `yaml:"member_id"`
	// Units is the number of work units of every stage: the partition count
	// of every repartition topic, each unit a contiguous key-group range.
	// Fixed once the topics exist. Required when enabled; in [1,
	// max parallelism].
	Units int `yaml:"units"`
	// Store is the shared storage of the units' checkpoints.
	Store ClusterStoreConfig `yaml:"store"`
	// SessionTimeout is the group session timeout: a daemon not heard from
	// for this long loses its units. Default "45s" (Kafka's); >= 1s.
	SessionTimeout time.Duration `yaml:"session_timeout"`
	// RebalanceTimeout bounds a rebalance: how long members have to give up
	// revoked units. Default "60s"; > revoke_timeout.
	RebalanceTimeout time.Duration `yaml:"rebalance_timeout"`
	// RevokeTimeout bounds the final checkpoint of a revoked unit; when it
	// passes, the unit stops without committing. Default "30s"; > 0 and
	// below rebalance_timeout.
	RevokeTimeout time.Duration `yaml:"revoke_timeout"`
	// PurgeRepartitions deletes the records of a repartition partition once
	// the checkpoint of the unit reading it that covers them is committed
	// (DeleteRecords up to the offset in its HEAD-named checkpoint,
	// docs/scale-out.md invariant 5); false keeps them (the topics have
	// infinite retention), e.g. to inspect the exchange. Default true.
	PurgeRepartitions bool `yaml:"purge_repartitions"`
	// TakeoverTimeout bounds the time a new owner takes to restore a unit
	// (HEAD claim, commits, fencing, state download): a takeover that
	// takes longer fails, and the unit is rebuilt after its restart
	// strategy's back-off. A term of the transaction-timeout check.
	// Default "30s"; > 0.
	TakeoverTimeout time.Duration `yaml:"takeover_timeout"`
	// RepartitionTransactionTimeout is the Kafka transaction timeout of
	// the repartition sinks (each unit's writer of a repartition topic);
	// like an exactly-once sink's transaction_timeout it must exceed the
	// transaction-timeout bound (Config.ClusterTxnBound), and the brokers'
	// transaction.max.timeout.ms must allow it (checked at start).
	// Default "15m" (Kafka's transaction.max.timeout.ms default).
	RepartitionTransactionTimeout time.Duration `yaml:"repartition_transaction_timeout"`
	// MarkerInterval bounds how often a unit's repartition sink writes a
	// watermark marker while its watermark advances (docs/scale-out.md,
	// "Markers"): at most one per interval, and the latest at every
	// checkpoint barrier (so an interval above checkpoints.interval has
	// no effect). Default "200ms"; > 0.
	MarkerInterval time.Duration `yaml:"marker_interval"`
}

// ClusterStoreConfig is where the units' checkpoints and HEAD chains live:
// the namespace <job>/units/<stage>/<unit>/ (chk-<n>/, shared/, HEAD-<k>)
// of a shared directory or an S3 bucket. A unit writes each checkpoint to
// a local staging directory first and uploads it before its HEAD.
type ClusterStoreConfig struct {
	// Kind is "filesystem" or "s3". Default "filesystem".
	Kind string `yaml:"kind"`
	// Dir is, for a filesystem store, the shared directory (required):
	// <dir>/<job>/units/<stage>/<unit>/; for an s3 store, the local
	// staging directory of the units' checkpoints, default
	// "<data_dir>/cluster-staging" (see Config.ClusterStagingDir).
	Dir string `yaml:"dir"`
	// S3 is the object store of kind "s3".
	S3 S3StoreConfig `yaml:"s3"`
}

// S3StoreConfig is an S3-compatible object store (AWS S3, MinIO, Ceph,
// ...). Credentials come from the environment: AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY. The store must honour If-None-Match: * on PUT
// (the start-up self-test refuses one that does not).
type S3StoreConfig struct {
	// Endpoint is "host:port" (no scheme). Required for kind s3.
	Endpoint string `yaml:"endpoint"`
	// Bucket holds the objects; it must exist. Required for kind s3.
	Bucket string `yaml:"bucket"`
	// Prefix starts every key: objects are <prefix><job>/units/... .
	// Default "".
	Prefix string `yaml:"prefix"`
	// Region is the bucket's region. Default "us-east-1".
	Region string `yaml:"region"`
	// TLS talks HTTPS to the endpoint. Default true.
	TLS bool `yaml:"tls"`
	// PathStyle addresses the bucket in the path (http://host/bucket/key)
	// instead of the host name. Default true (what MinIO and most clones
	// expect).
	PathStyle bool `yaml:"path_style"`
}

// defaultCluster is the cluster section's defaults.
func defaultCluster() ClusterConfig {
	return ClusterConfig{
		Store:          ClusterStoreConfig{Kind: StoreFilesystem, S3: S3StoreConfig{Region: DefaultS3Region, TLS: true, PathStyle: true}},
		SessionTimeout: 45 * time.Second, RebalanceTimeout: 60 * time.Second,
		RevokeTimeout: 30 * time.Second, TakeoverTimeout: 30 * time.Second,
		RepartitionTransactionTimeout: sink.DefaultTransactionTimeout,
		MarkerInterval:                200 * time.Millisecond,
		PurgeRepartitions:             true,
	}
}

// ClusterStagingDir returns the local directory where the units stage
// their checkpoints before uploading them to the store: cluster.store.dir
// for an s3 store when set, else "<data_dir>/cluster-staging".
func (c *Config) ClusterStagingDir() string {
	if c.Cluster.Store.Kind == StoreS3 && c.Cluster.Store.Dir != "" {
		return c.Cluster.Store.Dir
	}
	return filepath.Join(c.DataDir, "cluster-staging")
}

// ClusterGroupID returns cluster.group_id, or "kstreamd-<job>-cluster".
func (c *Config) ClusterGroupID() string {
	if c.Cluster.GroupID != "" {
		return c.Cluster.GroupID
	}
	return "kstreamd-" + c.Job.Name + "-cluster"
}

var groupIDRE = regexp.MustCompile(`^[a-zA-Z0-9._-]+$`)

// ClusterSavepointsRefused says why a savepoint of a running cluster-mode
// job is refused (the daemon's savepoint API without stop answers 409
// with it) and what to do instead: a cluster job's savepoint is a
// stop-with-savepoint, whose units are drained and gathered into one
// savepoint once every member stopped (job.StopClusterWithSavepoint,
// docs/scale-out.md "Savepoints across the cluster").
const ClusterSavepointsRefused = "in cluster mode a savepoint stops the job: every unit's final checkpoint is gathered once the repartition topics are drained (docs/scale-out.md); " +
	"ask for it with stop (kstreamd savepoint --stop), then start a new job from it with run --from-savepoint"

// validateCluster checks the cluster section; only when it is enabled.
func (c *Config) validateCluster(v *validator) {
	cl := &c.Cluster
	if !cl.Enabled {
		return
	}
	c.validateClusterNames(v)
	if cl.GroupID != "" && !groupIDRE.MatchString(cl.GroupID) {
		v.errorf("cluster.group_id", "invalid group id %q: only letters, digits, '.', '_' and '-'", cl.GroupID)
	}
	switch mp := c.MaxParallelism(); {
	case cl.Units == 0:
		v.errorf("cluster.units", "required when cluster.enabled is true")
	case cl.Units < 1 || cl.Units > mp:
		v.errorf("cluster.units", "must be in [1, %d] (the max parallelism: every unit owns at least one key group), got %d", mp, cl.Units)
	}
	v.oneOf("cluster.store.kind", cl.Store.Kind, StoreFilesystem, StoreS3)
	switch cl.Store.Kind {
	case StoreFilesystem:
		if cl.Store.Dir == "" {
			v.errorf("cluster.store.dir", "required for a filesystem store")
		}
	case StoreS3:
		validateS3Store(v, "cluster.store.s3", StoreS3, cl.Store.S3)
	}
	if cl.SessionTimeout < time.Second {
		v.errorf("cluster.session_timeout", "must be >= 1s, got %s", cl.SessionTimeout)
	}
	if cl.RevokeTimeout <= 0 {
		v.errorf("cluster.revoke_timeout", "must be > 0, got %s", cl.RevokeTimeout)
	} else if cl.RevokeTimeout >= cl.RebalanceTimeout {
		v.errorf("cluster.revoke_timeout", "%s must be below cluster.rebalance_timeout %s: a slow final checkpoint must not get the daemon kicked out of the group", cl.RevokeTimeout, cl.RebalanceTimeout)
	}
	if cl.TakeoverTimeout <= 0 {
		v.errorf("cluster.takeover_timeout", "must be > 0, got %s", cl.TakeoverTimeout)
	}
	if cl.MarkerInterval <= 0 {
		v.errorf("cluster.marker_interval", "must be > 0, got %s", cl.MarkerInterval)
	}
	if c.Checkpoints.Interval == 0 {
		v.errorf("checkpoints.interval", "cluster mode needs periodic checkpoints: a unit's output is committed by its checkpoints")
	}
	check := func(field string, timeout time.Duration) {
		if need := c.ClusterTxnBound(); timeout <= need {
			cp := &c.Checkpoints
			v.errorf(field,
				"%s must exceed (checkpoints.tolerable_failures %d + 1) x (checkpoints.interval %s + checkpoints.timeout %s%s) + cluster.session_timeout %s + cluster.rebalance_timeout %s + cluster.takeover_timeout %s = %s: a pre-committed transaction waits for its checkpoint (and the tolerated failed ones after it), for the group to move a dead or revoked owner's unit, and for the new owner's takeover; raise it or lower those",
				timeout, cp.TolerableFailures, cp.Interval, cp.Timeout, c.timeoutNote(), cl.SessionTimeout, cl.RebalanceTimeout, cl.TakeoverTimeout, need)
		}
	}
	if cl.RepartitionTransactionTimeout <= 0 {
		v.errorf("cluster.repartition_transaction_timeout", "must be > 0, got %s", cl.RepartitionTransactionTimeout)
	} else {
		check("cluster.repartition_transaction_timeout", cl.RepartitionTransactionTimeout)
	}
	for i := range c.Sinks {
		if s := &c.Sinks[i]; s.Delivery == DeliveryExactlyOnce {
			check(fmt.Sprintf("sinks[%d].transaction_timeout", i), s.TransactionTimeout)
		}
	}
}

// ClusterTxnBound is the least transaction timeout of cluster mode
// (invariant 7 of docs/scale-out.md), for the exactly-once sinks and the
// repartition sinks: a transaction pre-committed by a unit must outlive
// its checkpoint (interval and timeout) and each failed checkpoint
// checkpoints.tolerable_failures lets pass before the unit fails (its
// committables wait for the next one that completes), the session timeout
// that detects a dead owner, the rebalance timeout that bounds a revoked
// owner's hand-over, and the new owner's takeover (cluster.takeover_timeout,
// enforced). The terms add up: any shorter and the broker may abort a
// transaction whose checkpoint the HEAD records, losing its output.
func (c *Config) ClusterTxnBound() time.Duration {
	cp, cl := &c.Checkpoints, &c.Cluster
	return time.Duration(cp.TolerableFailures+1)*(cp.Interval+cp.Timeout) + cl.SessionTimeout + cl.RebalanceTimeout + cl.TakeoverTimeout
}

// PlanStages plans the graph (Plan) and splits it into the stages of
// cluster mode (graph.Split) with cluster.units units per stage. It is
// pure, like Plan. It returns an error when cluster mode is not enabled.
func (c *Config) PlanStages() (*graph.Stages, error) {
	if !c.Cluster.Enabled {
		return nil, fmt.Errorf("pipeline: cluster mode is not enabled (cluster.enabled)")
	}
	g, err := c.Plan()
	if err != nil {
		return nil, err
	}
	st, err := graph.Split(g, c.Cluster.Units)
	if err != nil {
		return nil, err
	}
	for _, stage := range st.Stages {
		for _, sk := range stage.Graph.Sinks {
			if sk.Units > 0 { // a repartition sink
				sk.TransactionTimeout = c.Cluster.RepartitionTransactionTimeout
			}
		}
	}
	return st, nil
}

// validateClusterNames refuses, in cluster mode, a source, operator or
// sink name that starts as the vertices of the repartition topics do
// (graph.RepartitionVertex, "repartition.<stage>[.<role>]"): the stage
// graphs would hold two vertices of one name, whose state, committables
// and wires the job keys by name.
func (c *Config) validateClusterNames(v *validator) {
	reserved := strings.TrimSuffix(graph.RepartitionVertex(0), "0")
	check := func(list string, i int, name string) {
		if strings.HasPrefix(name, reserved) {
			v.errorf(fmt.Sprintf("%s[%d].name", list, i), "%q: in cluster mode names starting with %q are reserved for the vertices of the repartition topics; rename it", name, reserved)
		}
	}
	for i, s := range c.Sources {
		check("sources", i, s.Name)
	}
	for i, op := range c.Operators {
		check("operators", i, op.Name)
	}
	for i, s := range c.Sinks {
		check("sinks", i, s.Name)
	}
}
