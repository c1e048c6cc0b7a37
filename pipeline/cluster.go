package pipeline

import (
	"fmt"
	"regexp"
	"time"

	"github.com/kstreamd/kstreamd/graph"
)

// Cluster store kinds (cluster.store.kind).
const (
	// StoreFilesystem is a directory every daemon mounts (NFS, a shared
	// volume); the HEAD commit is an O_CREAT|O_EXCL create.
	StoreFilesystem = "filesystem"
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

// ClusterStoreConfig is where the units' checkpoints and HEAD chains live.
type ClusterStoreConfig struct {
	// Kind is "filesystem". Default "filesystem" (an S3-compatible store is
	// not built yet).
	Kind string `yaml:"kind"`
	// Dir is the shared directory of a filesystem store: <dir>/<job>/units/
	// <stage>/<unit>/. Required for a filesystem store.
	Dir string `yaml:"dir"`
}

// defaultCluster is the cluster section's defaults.
func defaultCluster() ClusterConfig {
	return ClusterConfig{
		Store:          ClusterStoreConfig{Kind: StoreFilesystem},
		SessionTimeout: 45 * time.Second, RebalanceTimeout: 60 * time.Second,
		RevokeTimeout: 30 * time.Second, TakeoverTimeout: 30 * time.Second,
		MarkerInterval:    200 * time.Millisecond,
		PurgeRepartitions: true,
	}
}

// ClusterGroupID returns cluster.group_id, or "kstreamd-<job>-cluster".
func (c *Config) ClusterGroupID() string {
	if c.Cluster.GroupID != "" {
		return c.Cluster.GroupID
	}
	return "kstreamd-" + c.Job.Name + "-cluster"
}

var groupIDRE = regexp.MustCompile(`^[a-zA-Z0-9._-]+$`)

// validateCluster checks the cluster section; only when it is enabled.
func (c *Config) validateCluster(v *validator) {
	cl := &c.Cluster
	if !cl.Enabled {
		return
	}
	if cl.GroupID != "" && !groupIDRE.MatchString(cl.GroupID) {
		v.errorf("cluster.group_id", "invalid group id %q: only letters, digits, '.', '_' and '-'", cl.GroupID)
	}
	switch mp := c.MaxParallelism(); {
	case cl.Units == 0:
		v.errorf("cluster.units", "required when cluster.enabled is true")
	case cl.Units < 1 || cl.Units > mp:
		v.errorf("cluster.units", "must be in [1, %d] (the max parallelism: every unit owns at least one key group), got %d", mp, cl.Units)
	}
	v.oneOf("cluster.store.kind", cl.Store.Kind, StoreFilesystem)
	if cl.Store.Kind == StoreFilesystem && cl.Store.Dir == "" {
		v.errorf("cluster.store.dir", "required for a filesystem store")
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
				"%s must exceed checkpoints.interval %s + checkpoints.timeout %s (the slowest upstream checkpoint) + cluster.session_timeout %s + cluster.takeover_timeout %s = %s",
				s.TransactionTimeout, c.Checkpoints.Interval, c.Checkpoints.Timeout, cl.SessionTimeout, cl.TakeoverTimeout, need)
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
