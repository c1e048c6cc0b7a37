package sdk

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/kstreamd/kstreamd/job"
	"github.com/kstreamd/kstreamd/pipeline"
)

// clusterUsage is the usage of `kstreamd cluster`.
const clusterUsage = `usage: kstreamd cluster <command> [flags]

commands:
  gc --config FILE [--delete]
                          list the repartition topics and store namespaces of
                          the cluster job of FILE that no graph in use (FILE's,
                          every group member's, the one the store's HEADs
                          record) references; refused while a stop with
                          savepoint is pending or FILE's unit count differs
                          from the store's; --delete removes them
                          (docs/scale-out.md, "Upgrades")
`

// runCluster runs `kstreamd cluster gc`: it lists, one a line, each stale
// repartition topic and unit namespace of the job (job.ClusterGC) with
// why, then a summary; with --delete it removes them. Exit 0 done, 1 the
// brokers or the store failed, a graph in use is unknown, a stop with
// savepoint is pending or the unit count changed, 2 usage or
// config errors.
func runCluster(ctx context.Context, args []string, stdout, stderr io.Writer, reg *Registry) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, clusterUsage)
		return 2
	}
	if isHelp(args[0]) {
		fmt.Fprint(stdout, clusterUsage)
		return 0
	}
	if args[0] != "gc" {
		fmt.Fprintf(stderr, "kstreamd cluster: unknown command %q\n%s", args[0], clusterUsage)
		return 2
	}
	fs := flag.NewFlagSet("kstreamd cluster gc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {}
	path := fs.String("config", "", "pipeline `FILE` (YAML) of the cluster job")
	del := fs.Bool("delete", false, "remove what is listed (default: list only)")
	const synopsis = "kstreamd cluster gc --config FILE [--delete]"
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(fs, stdout, synopsis)
			return 0
		}
		printUsage(fs, stderr, synopsis)
		return 2
	}
	if *path == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "kstreamd cluster gc: --config FILE is required and takes no arguments")
		return 2
	}
	cfg, err := pipeline.LoadWith(*path, reg.pipelineRegistries())
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if !cfg.Cluster.Enabled {
		fmt.Fprintf(stderr, "kstreamd cluster gc: %s does not set cluster.enabled: true\n", *path)
		return 2
	}
	st, err := cfg.PlanStages()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	store, err := clusterStore(cfg, os.Getenv)
	if err != nil {
		fmt.Fprintln(stderr, "kstreamd cluster gc:", err)
		return 2
	}
	items, err := job.ClusterGC(ctx, job.GCConfig{Stages: st, Store: store, ClientOpts: cfg.ClientOptions(), GroupID: cfg.ClusterGroupID(), Delete: *del})
	verb := "stale"
	if *del {
		verb = "removed"
	}
	for _, it := range items {
		fmt.Fprintf(stdout, "%s %s %s: %s\n", verb, it.Kind, it.Name, it.Why)
	}
	if err != nil {
		fmt.Fprintln(stderr, "kstreamd cluster gc:", err)
		return 1
	}
	switch {
	case len(items) == 0:
		fmt.Fprintf(stdout, "nothing stale in job %s (%s, group %s)\n", st.Job, store, cfg.ClusterGroupID())
	case !*del:
		fmt.Fprintf(stdout, "%d stale; run with --delete to remove them\n", len(items))
	}
	return 0
}
