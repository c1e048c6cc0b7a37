package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/kstreamd/kstreamd/operators"
	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// TTLCleanupScenario is the --scenario name of RunTTLCleanup.
const TTLCleanupScenario = "ttl-cleanup"

// TTLCleanupConfig configures RunTTLCleanup.
type TTLCleanupConfig struct {
	// Records is the number of unique ids deduplicated. Default 1,000,000.
	Records int
	// TTL is the dedup's ttl (processing time). Default 5s.
	TTL time.Duration
	// Backends are the state backends measured, state.KindPebble and/or
	// state.KindHashmap. Default both.
	Backends []string
	// Timeout bounds the wait for the state to fall under 1% of its peak
	// after the input stops. Default 60s.
	Timeout time.Duration
	// Dir is the work directory (the Pebble DBs, checkpoints). Required.
	Dir string
}

// TTLCleanupResult is one run of RunTTLCleanup: one backend, background
// cleanup on or off.
type TTLCleanupResult struct {
	Backend string
	Cleanup bool
	Records int
	// InputCPU and InputWall are the process CPU time (user + system) and
	// the wall time of the input phase: every record through the dedup
	// operator, with the task's mailbox run between records.
	InputCPU, InputWall time.Duration
	// PeakSize is the peak state size, sampled every 65,536 records and
	// when the input stopped: the bytes of Pebble's SST files
	// (kstreamd_state_size_bytes without the recycled WAL's floor and the
	// manifest) or the hashmap's stored entries. PeakCheckpoint is the
	// bytes of a checkpoint taken when the input stopped.
	PeakSize, PeakCheckpoint int64
	// ToOnePercent is the time from the input's end until the state size
	// is under 1% of its peak (0 and Reached false when it was not within
	// the timeout, as without cleanup). CleanupCPU is the process CPU time
	// over that wait.
	ToOnePercent time.Duration
	Reached      bool
	CleanupCPU   time.Duration
	// FinalSize and FinalCheckpoint are the state size and the bytes of a
	// checkpoint taken at the end of the wait.
	FinalSize, FinalCheckpoint int64
}

// RunTTLCleanup measures background TTL cleanup (issue 22): a dedup
// operator (sync) with ttl cfg.TTL takes cfg.Records unique ids as fast as
// it can, as its task would (the KeyedOperator with the task's mailbox, so
// its own cleanup schedule runs), then no input: the run reports the peak
// state size, the time until the state is under 1% of that peak, and the
// CPU per record of the input phase with and without background cleanup
// (TTLCleanupConfig.Disabled). It prints one table to w.
func RunTTLCleanup(ctx context.Context, cfg TTLCleanupConfig, w io.Writer) error {
	res, err := TTLCleanup(ctx, cfg)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "backend\tcleanup\trecords\tinput_s\tinput_cpu_ns/rec\tpeak_size\tpeak_chk_MiB\tto_1%_s\tcleanup_cpu_ns/rec\tfinal_size\tfinal_chk_MiB\t")
	for _, r := range res {
		size := func(n int64) string {
			if r.Backend == state.KindHashmap {
				return strconv.FormatInt(n, 10) + " entries"
			}
			return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
		}
		on, to := "off", "-"
		if r.Cleanup {
			on = "on"
		}
		if r.Reached {
			to = fmt.Sprintf("%.1f", r.ToOnePercent.Seconds())
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.2f\t%.0f\t%s\t%.2f\t%s\t%.0f\t%s\t%.3f\t\n", r.Backend, on, r.Records, r.InputWall.Seconds(),
			float64(r.InputCPU.Nanoseconds())/float64(r.Records), size(r.PeakSize), float64(r.PeakCheckpoint)/(1<<20), to,
			float64(r.CleanupCPU.Nanoseconds())/float64(r.Records), size(r.FinalSize), float64(r.FinalCheckpoint)/(1<<20))
	}
	return tw.Flush()
}

// TTLCleanup is RunTTLCleanup without the table: for each backend, a run
// without background cleanup and one with it.
func TTLCleanup(ctx context.Context, cfg TTLCleanupConfig) ([]TTLCleanupResult, error) {
	if cfg.Records <= 0 {
		cfg.Records = 1_000_000
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 5 * time.Second
	}
	if len(cfg.Backends) == 0 {
		cfg.Backends = []string{state.KindPebble, state.KindHashmap}
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Minute
	}
	if cfg.Dir == "" {
		return nil, errors.New("bench: ttl-cleanup: dir is required")
	}
	root := filepath.Join(cfg.Dir, "ttl-cleanup")
	defer os.RemoveAll(root)
	var out []TTLCleanupResult
	for _, kind := range cfg.Backends {
		for _, on := range []bool{false, true} {
			if err := os.RemoveAll(root); err != nil {
				return out, err
			}
			r, err := ttlCleanupRun(ctx, cfg, kind, on, root)
			if err != nil {
				return out, fmt.Errorf("bench: ttl-cleanup: %s: %w", kind, err)
			}
			out = append(out, r)
		}
	}
	return out, nil
}

func ttlCleanupRun(ctx context.Context, cfg TTLCleanupConfig, kind string, cleanup bool, root string) (res TTLCleanupResult, err error) {
	res = TTLCleanupResult{Backend: kind, Cleanup: cleanup, Records: cfg.Records}
	maxP := keygroup.DefaultMaxParallelism(1)
	var backend state.KeyedStateBackend
	open := func(restore []state.RestoreHandle) (state.KeyedStateBackend, error) {
		b, err := state.OpenBackendRestored(state.BackendConfig{
			Kind: kind, Dir: filepath.Join(root, "db"), MaxParallelism: maxP, KeyGroupRange: keygroup.RangeFor(maxP, 1, 0),
			TTLCleanup: state.TTLCleanupConfig{Disabled: !cleanup},
		}, restore)
		backend = b
		return b, err
	}
	mb := runtime.NewMailbox()
	op := operators.NewKeyedProcessOperator(operators.OpenContext{Operator: "dedup", Parallelism: 1}, open, nil,
		operators.NewDedup(operators.DedupParams{TTL: cfg.TTL}), nil)
	op.SetMailbox(mb)
	if err := op.Open(ctx); err != nil {
		return res, err
	}
	defer func() {
		if cerr := op.Close(); err == nil {
			err = cerr
		}
	}()
	// size is the state size: the bytes of Pebble's SST files (live,
	// obsolete and zombie: kstreamd_state_size_bytes without the WAL and
	// the manifest), or the hashmap's entries (counted on this goroutine,
	// the owner's).
	size := func() (int64, error) {
		if mp, ok := backend.(state.MetricsProvider); ok {
			t := mp.Metrics().Table.Local
			return int64(t.LiveSize + t.ObsoleteSize + t.ZombieSize), nil
		}
		n, err := state.EntryCount(backend)
		return int64(n), err
	}
	peak := func() error {
		n, err := size()
		res.PeakSize = max(res.PeakSize, n)
		return err
	}
	chk := 0
	checkpoint := func() (int64, error) {
		chk++
		finish, err := op.SnapshotState(ctx, &runtime.Barrier{CheckpointID: int64(chk), Dir: filepath.Join(root, "chk-"+strconv.Itoa(chk))})
		if err != nil {
			return 0, err
		}
		snap, err := finish(ctx)
		return snap.Bytes, err
	}

	cpu0, t0 := cpuTime(), time.Now()
	id := make([]byte, 0, 16)
	for i := range cfg.Records {
		if i%65536 == 0 {
			if err := ctx.Err(); err != nil {
				return res, err
			}
			if err := peak(); err != nil {
				return res, err
			}
		}
		id = strconv.AppendInt(append(id[:0], "id-"...), int64(i), 10)
		if err := op.ProcessRecord(ctx, 0, runtime.Record{Key: id, Timestamp: t0}); err != nil {
			return res, err
		}
		mb.TryYieldAll() // as the task loop does between records
	}
	res.InputWall, res.InputCPU = time.Since(t0), cpuTime()-cpu0
	stopped := time.Now()
	if res.PeakCheckpoint, err = checkpoint(); err != nil {
		return res, err
	}
	if err := peak(); err != nil { // the checkpoint flushed the memtable
		return res, err
	}
	// Idle, as a task without input: the mailbox runs the cleanup ticks.
	cpu1 := cpuTime()
	deadline := stopped.Add(max(cfg.Timeout, cfg.TTL))
	if !cleanup {
		deadline = stopped.Add(cfg.TTL + 2*time.Second) // nothing will change: show it, briefly
	}
	for time.Now().Before(deadline) {
		wait, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_ = mb.Yield(wait)
		cancel()
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if err := mb.Err(); err != nil {
			return res, err
		}
		n, err := size()
		if err != nil {
			return res, err
		}
		if n*100 < res.PeakSize {
			res.ToOnePercent, res.Reached = time.Since(stopped), true
			break
		}
	}
	res.CleanupCPU = cpuTime() - cpu1
	if res.FinalSize, err = size(); err != nil {
		return res, err
	}
	if res.FinalCheckpoint, err = checkpoint(); err != nil {
		return res, err
	}
	return res, nil
}
