package pipeline

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/kstreamd/kstreamd/graph"
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
	// TakeoverTimeout is the time a new owner takes to restore a unit
	// (HEAD claim, commits, fencing, state download), a term of the
	// transaction-timeout check. Default "30s"; > 0.
	TakeoverTimeout time.Duration `yaml:"takeover_timeout"`
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
		MarkerInterval:    200 * time.Millisecond,
		PurgeRepartitions: true,
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

// ClusterSavepointsRefused says why savepoints are refused in cluster mode
// and what to do instead; validate and run (checkpoints.savepoint_dir),
// `run --from-savepoint` and the daemon's savepoint API refuse with it.
// A savepoint is one directory of one job's state, while each unit of a
// cluster-mode job is a job of its own whose HEAD chain alone says what it
// restores (docs/scale-out.md, invariants 1 and 2).
const ClusterSavepointsRefused = "savepoints do not know units in cluster mode: each unit restores from its own HEAD chain in cluster.store (docs/scale-out.md); " +
	"to stop and resume the job, stop the daemons with SIGTERM (each unit takes a final checkpoint) and start them again"

// validateCluster checks the cluster section; only when it is enabled.
func (c *Config) validateCluster(v *validator) {
	cl := &c.Cluster
	if !cl.Enabled {
		return
	}
	if c.Checkpoints.SavepointDir != "" {
		v.errorf("checkpoints.savepoint_dir", "%s", ClusterSavepointsRefused)
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
		s3 := cl.Store.S3
		if s3.Endpoint == "" {
			v.errorf("cluster.store.s3.endpoint", "required for an s3 store (host:port)")
		} else if strings.Contains(s3.Endpoint, "://") || strings.Contains(s3.Endpoint, "/") {
			v.errorf("cluster.store.s3.endpoint", "must be host:port without scheme or path (use cluster.store.s3.tls), got %q", s3.Endpoint)
		}
		if s3.Bucket == "" {
			v.errorf("cluster.store.s3.bucket", "required for an s3 store")
		}
		if s3.Region == "" {
			v.errorf("cluster.store.s3.region", "must not be empty (default %s)", DefaultS3Region)
		}
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
	for i := range c.Sinks {
		s := &c.Sinks[i]
		if s.Delivery != DeliveryExactlyOnce {
			continue
		}
		if need := c.clusterTxnBound(); s.TransactionTimeout <= need {
			v.errorf(fmt.Sprintf("sinks[%d].transaction_timeout", i),
				"%s must exceed checkpoints.interval %s + checkpoints.timeout %s%s (the slowest upstream checkpoint) + cluster.session_timeout %s + cluster.takeover_timeout %s = %s",
				s.TransactionTimeout, c.Checkpoints.Interval, c.Checkpoints.Timeout, c.timeoutNote(), cl.SessionTimeout, cl.TakeoverTimeout, need)
		}
	}
}

// clusterTxnBound is the least transaction timeout of cluster mode
// (invariant 7 of docs/scale-out.md): a transaction pre-committed by a unit
// must outlive its checkpoint interval, the slowest upstream checkpoint, the
// session timeout that detects a dead owner and the takeover.
func (c *Config) clusterTxnBound() time.Duration {
	return c.Checkpoints.Interval + c.Checkpoints.Timeout + c.Cluster.SessionTimeout + c.Cluster.TakeoverTimeout
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
	return graph.Split(g, c.Cluster.Units)
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
