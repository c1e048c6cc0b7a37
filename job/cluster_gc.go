package job

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/graph"
)

// GC item kinds (GCItem.Kind).
const (
	// GCTopic is a repartition topic of the job in Kafka.
	GCTopic = "topic"
	// GCNamespace is a unit namespace of the job in the store
	// (checkpoint.UnitPrefix): its HEADs, checkpoints and shared files.
	GCNamespace = "namespace"
)

// GCItem is one stale repartition topic or unit namespace of a
// cluster-mode job (ClusterGC): Name is the topic, or the namespace's
// prefix "<job>/units/<stage>/<unit>/"; Why says why nothing uses it.
type GCItem struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	Why  string `json:"why"`
}

// GCConfig is what ClusterGC looks at: the job's graph as this daemon's
// pipeline file plans it (Stages), its store and brokers, and the
// cluster's group (whose members' graphs are referenced too). Delete
// removes what it lists.
type GCConfig struct {
	Stages     *graph.Stages
	Store      checkpoint.Store
	ClientOpts []kgo.Opt
	GroupID    string
	Delete     bool
}

// repartitionName matches a repartition topic name after "<job>-": the
// stage, and an input role for a two-input operator's topic
// (graph.RepartitionTopic, graph.RoleRepartitionTopic).
var repartitionName = regexp.MustCompile(`^([0-9]+)(?:-([A-Za-z_][A-Za-z0-9_]*))?-repartition$`)

// ClusterGC lists the repartition topics and store namespaces of a
// cluster-mode job that no graph in use references, and removes them when
// c.Delete is set (`kstreamd cluster gc`, docs/scale-out.md "Upgrades").
// It never runs on its own. In use are the graph of c.Stages and the
// graph of every member of the group (its join metadata's fingerprint,
// whose layout the store's graph records give), and the graph the store's
// HEADs record (unit 0 of the lowest stage with a HEAD, the election's
// first rule: the job's graph even while no daemon runs); a member's or
// the store's graph without a record makes it refuse (it cannot tell what
// that graph uses). A
// topic is stale when it is named as a repartition topic of the job
// ("<job>-<stage>-repartition", "<job>-<stage>-<role>-repartition") and no
// graph in use has it; a namespace when no graph in use has its stage and
// unit (a stage a change of the graph removed, units a unit count no
// longer used) and its newest HEAD was not written by a graph in use. The
// units topic and the graph records are never listed. Items are sorted:
// topics by name, then namespaces by stage and unit. A removal deletes
// the topics, then each namespace's HEADs before its other files, so a
// half-removed namespace is never restored. It refuses while the job has
// a stop-with-savepoint whose savepoint is not gathered yet (its drain
// needs every unit's HEAD, whatever graph the file plans).
func ClusterGC(ctx context.Context, c GCConfig) ([]GCItem, error) {
	st := c.Stages
	// A stop-with-savepoint not yet gathered drains and copies every
	// unit's HEAD of the stopped graph, which no member of the (empty)
	// group reports: gc would list them (cluster_savepoint.go).
	if req, err := clusterStopped(ctx, c.Store, st.Job); err != nil {
		return nil, fmt.Errorf("job: %w", err)
	} else if req != nil && req.Savepoint == "" {
		return nil, fmt.Errorf("job: job %s has a stop-with-savepoint pending (%s in %s, requested at %s by %s, its savepoint under %s not gathered yet): its drain restores every unit's HEAD; gc waits for the savepoint (kstreamd savepoint --stop, or start a daemon of the job, finishes it); nothing is listed",
			st.Job, storeKey(st.Job, StopRequestKey), c.Store, req.Requested.Format(time.RFC3339), req.By, req.Dir)
	}
	// A file whose unit count the store's HEAD chains refuse (RunMember's
	// check) plans a job that cannot run on this store: the units beyond
	// its count are the running job's, not stale.
	stored, err := checkStoreUnits(ctx, c.Store, st)
	if err != nil {
		return nil, fmt.Errorf("%w: the pipeline file's graph cannot run on this store, so gc cannot tell what the job uses; nothing is listed", err)
	}
	cl, err := kgo.NewClient(c.ClientOpts...)
	if err != nil {
		return nil, fmt.Errorf("job: kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	used := map[string]graph.StateLayout{st.Fingerprint: graph.LayoutOf(st)}
	groups, err := adm.DescribeGroups(ctx, c.GroupID)
	if err == nil && !errors.Is(groups.Error(), kerr.GroupIDNotFound) {
		err = groups.Error() // a group that never formed has no members
	}
	if err != nil {
		return nil, fmt.Errorf("job: describe group %s: %w", c.GroupID, err)
	}
	for _, gm := range groups[c.GroupID].Members {
		j, ok := gm.Join.AsConsumer()
		if !ok {
			continue
		}
		join, _ := parseUnitsJoin(j.UserData)
		fp := join.Fingerprint
		if _, ok := used[fp]; ok || fp == "" {
			continue
		}
		rec, found, err := ReadGraphRecord(ctx, c.Store, st.Job, fp)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, fmt.Errorf("job: member %s of group %s runs graph %.12s, which has no record in %s (%s): gc cannot tell what it uses; nothing is listed",
				memberName(gm), c.GroupID, fp, c.Store, GraphRecordKey(st.Job, fp))
		}
		used[fp] = rec.Layout
	}
	// The graph the store's HEADs record is the job's until another
	// graph's HEADs replace it (the election's first rule), whether or not
	// a daemon runs now: a file changed incompatibly (a stage removed) must
	// not make gc remove the state its savepoint is to be taken from.
	if fp := stored.hd.Fingerprint; fp != "" {
		if _, ok := used[fp]; !ok {
			rec, found, err := ReadGraphRecord(ctx, c.Store, st.Job, fp)
			if err != nil {
				return nil, err
			}
			if !found {
				return nil, fmt.Errorf("job: the store's HEADs record graph %.12s (HEAD-%d of %s in %s), which has no record (%s): gc cannot tell what it uses; nothing is listed",
					fp, stored.hd.Seq, stored.prefix, c.Store, GraphRecordKey(st.Job, fp))
			}
			used[fp] = rec.Layout
		}
	}
	fps := slices.Sorted(func(yield func(string) bool) {
		for fp := range used {
			if !yield(fp) {
				return
			}
		}
	})
	inUse := func() string {
		short := make([]string, len(fps))
		for i, fp := range fps {
			short[i] = fp[:min(12, len(fp))]
		}
		return "graphs in use: " + strings.Join(short, ", ")
	}
	topics, nss := map[string]bool{UnitsTopic(st.Job): true}, map[[2]int]bool{}
	for _, l := range used {
		for _, r := range l.Repartitions {
			topics[r.Topic] = true
		}
		for s := range l.Stages {
			for u := range l.Units {
				nss[[2]int{s, u}] = true
			}
		}
	}

	var items []GCItem
	listed, err := adm.ListTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("job: list topics: %w", err)
	}
	for _, name := range listed.Names() {
		rest, ok := strings.CutPrefix(name, st.Job+"-")
		m := repartitionName.FindStringSubmatch(rest)
		if !ok || m == nil || topics[name] {
			continue
		}
		why := "stage " + m[1] + " reads no such repartition topic"
		if m[2] != "" {
			why = "stage " + m[1] + " has no input role " + m[2]
		}
		items = append(items, GCItem{Kind: GCTopic, Name: name, Why: why + " (" + inUse() + ")"})
	}
	slices.SortFunc(items, func(a, b GCItem) int { return cmp.Compare(a.Name, b.Name) })

	root := st.Job + "/units/"
	keys, err := c.Store.List(ctx, root)
	if err != nil {
		return nil, fmt.Errorf("job: list %s in %s: %w", root, c.Store, err)
	}
	byNS := map[[2]int][]string{}
	for _, k := range keys {
		parts := strings.SplitN(strings.TrimPrefix(k, root), "/", 3)
		if len(parts) < 3 {
			continue
		}
		s, err1 := strconv.Atoi(parts[0])
		u, err2 := strconv.Atoi(parts[1])
		if err1 != nil || err2 != nil || s < 0 || u < 0 {
			continue
		}
		byNS[[2]int{s, u}] = append(byNS[[2]int{s, u}], k)
	}
	stale := [][2]int{}
	for ns := range byNS {
		if nss[ns] {
			continue
		}
		prefix := checkpoint.UnitPrefix(st.Job, ns[0], ns[1])
		hd, err := checkpoint.Heads{Store: c.Store, Prefix: prefix}.Latest(ctx)
		if err != nil {
			return nil, fmt.Errorf("job: %w", err)
		}
		if _, live := used[hd.Fingerprint]; live && hd.Seq > 0 {
			continue // a HEAD written by a graph in use: never removed
		}
		stale = append(stale, ns)
	}
	slices.SortFunc(stale, func(a, b [2]int) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	maxStages, maxUnits := 0, 0
	for _, l := range used {
		maxStages, maxUnits = max(maxStages, l.Stages), max(maxUnits, l.Units)
	}
	for _, ns := range stale {
		why := fmt.Sprintf("no graph in use has stage %d", ns[0])
		if ns[0] < maxStages {
			why = fmt.Sprintf("no graph in use has unit %d of stage %d", ns[1], ns[0])
		}
		items = append(items, GCItem{Kind: GCNamespace, Name: checkpoint.UnitPrefix(st.Job, ns[0], ns[1]), Why: why + " (" + inUse() + ")"})
	}
	if !c.Delete {
		return items, nil
	}

	var drop []string
	for _, it := range items {
		if it.Kind == GCTopic {
			drop = append(drop, it.Name)
		}
	}
	if len(drop) > 0 {
		resp, err := adm.DeleteTopics(ctx, drop...)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			return items, fmt.Errorf("job: delete topics %s: %w", strings.Join(drop, ", "), err)
		}
	}
	for _, ns := range stale {
		ks := byNS[ns]
		heads := slices.DeleteFunc(slices.Clone(ks), func(k string) bool {
			return !strings.HasPrefix(k, checkpoint.UnitPrefix(st.Job, ns[0], ns[1])+checkpoint.HeadPrefix)
		})
		if err := c.Store.Delete(ctx, heads...); err != nil {
			return items, fmt.Errorf("job: delete the HEADs of %s in %s: %w", checkpoint.UnitPrefix(st.Job, ns[0], ns[1]), c.Store, err)
		}
		if err := c.Store.Delete(ctx, ks...); err != nil {
			return items, fmt.Errorf("job: delete %s in %s: %w", checkpoint.UnitPrefix(st.Job, ns[0], ns[1]), c.Store, err)
		}
	}
	return items, nil
}

// memberName names a group member: its instance id (cluster.member_id),
// else its Kafka member id.
func memberName(gm kadm.DescribedGroupMember) string {
	if gm.InstanceID != nil {
		return *gm.InstanceID
	}
	return gm.MemberID
}
