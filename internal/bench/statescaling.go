package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/kstreamd/kstreamd/operators"
	"github.com/kstreamd/kstreamd/state"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// StateScalingScenario is the --scenario name of RunStateScaling.
const StateScalingScenario = "state-scaling"

// StateScalingConfig configures RunStateScaling.
type StateScalingConfig struct {
	// Keys is the number of keys of the state. Default 1,000,000.
	Keys int
	// Changed is the fraction of keys updated between two checkpoints.
	// Default 0.01.
	Changed float64
	// Rounds is the number of incremental checkpoints measured. Default 3.
	Rounds int
	// BlockCacheBytes bounds the Pebble block cache. Default 64 MiB, the
	// state.block_cache_bytes default.
	BlockCacheBytes int64
	// Dir is the work directory (the DB, checkpoints, the restored DB).
	// Required.
	Dir string
	// Logger receives the state backend's logs (the restore's progress).
	Logger *slog.Logger
	// CPUProfile, if not empty, profiles the checkpoints and the restore.
	CPUProfile string
	// Remote runs the disaggregated Pebble backend (state.remote): its
	// tables on a directory store beside the checkpoints, checkpoints and
	// restores by reference. RemoteCacheBytes is its local cache of remote
	// blocks (0: state.DefaultRemoteCacheBytes, 64 MiB) and ReadLatency the
	// delay added to every store read.
	Remote           bool
	RemoteCacheBytes int64
	ReadLatency      time.Duration
}

// StateScalingResult are the figures of RunStateScaling.
type StateScalingResult struct {
	Keys, Changed int
	// Load is the time to write every key once (one ValueState.Update per
	// key, as keyed_count does) and DBBytes the DB's disk usage after it.
	Load    time.Duration
	DBBytes uint64
	// Full is the first checkpoint (every SST uploaded), FullBytes its size.
	Full      time.Duration
	FullBytes int64
	// Incremental are the checkpoints after each round of changes: their
	// duration (synchronous part: flush and Pebble checkpoint; plus the
	// upload) and bytes uploaded.
	Incremental      []time.Duration
	IncrementalBytes []int64
	// FullSync and IncrementalSync are the synchronous parts of the
	// checkpoints (state.SnapshotKeyed until it returns: the flush, and
	// Pebble's checkpoint or the list of remote tables); the rest of each
	// duration is the asynchronous part (the upload; nothing for remote
	// state).
	FullSync        time.Duration
	IncrementalSync []time.Duration
	// Restore is the time to open a backend from the last checkpoint and
	// read one key.
	Restore time.Duration
	// Rescale is the time to open two backends, each restoring half of
	// the key groups from the last checkpoint, and read one key in each.
	Rescale time.Duration
	// LocalBytes is the disk use of the backend's local directory after
	// the last checkpoint (for remote state: WAL, MANIFEST, catalog and
	// the cache of remote blocks); StoreBytes that of the remote store
	// (0 for local state).
	LocalBytes, StoreBytes int64
	// PeakRSSBytes is the peak resident set of the process over the run.
	PeakRSSBytes int64
}

// RunStateScaling measures checkpoints of Pebble keyed state of cfg.Keys
// keys (the keyed_count state: one int64 per key, one subtask owning every
// key group): a full checkpoint, then cfg.Rounds incremental checkpoints
// each after updating cfg.Changed of the keys (random ones), then a
// restore from the last; it prints one table to w. Checkpoints are taken
// with state.SnapshotKeyed, what a keyed operator's subtask runs for a
// barrier, into a job-like directory with a shared directory.
func RunStateScaling(ctx context.Context, cfg StateScalingConfig, w io.Writer) error {
	res, err := StateScaling(ctx, cfg)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "state\tkeys\tchanged\tload_s\tdb_MiB\tfull_chk_ms\tfull_sync_ms\tfull_chk_MiB\tincr_p50_ms\tincr_max_ms\tincr_sync_p50_ms\tincr_sync_max_ms\tincr_p50_MiB\tincr_max_MiB\trestore_ms\trescale_ms\tlocal_MiB\tstore_MiB\tpeak_rss_MiB\t")
	mib := func(b int64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }
	kind := "local"
	if cfg.Remote {
		kind = "remote"
		if cfg.ReadLatency > 0 {
			kind += "+" + cfg.ReadLatency.String()
		}
	}
	fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f\t\n", kind, res.Keys, res.Changed, res.Load.Seconds(), mib(int64(res.DBBytes)),
		ms(res.Full), ms(res.FullSync), mib(res.FullBytes), ms(quantile(res.Incremental, 0.5)), ms(quantile(res.Incremental, 1)),
		ms(quantile(res.IncrementalSync, 0.5)), ms(quantile(res.IncrementalSync, 1)),
		mib(quantile(res.IncrementalBytes, 0.5)), mib(quantile(res.IncrementalBytes, 1)), ms(res.Restore), ms(res.Rescale),
		mib(res.LocalBytes), mib(res.StoreBytes), float64(res.PeakRSSBytes)/(1<<20))
	return tw.Flush()
}

// StateScaling is RunStateScaling without the table.
func StateScaling(ctx context.Context, cfg StateScalingConfig) (StateScalingResult, error) {
	if cfg.Keys <= 0 {
		cfg.Keys = 1_000_000
	}
	if cfg.Changed <= 0 {
		cfg.Changed = 0.01
	}
	if cfg.Rounds <= 0 {
		cfg.Rounds = 3
	}
	if cfg.BlockCacheBytes <= 0 {
		cfg.BlockCacheBytes = 64 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Dir == "" {
		return StateScalingResult{}, errors.New("bench: state-scaling: dir is required")
	}
	root := filepath.Join(cfg.Dir, "state-scaling")
	if err := os.RemoveAll(root); err != nil {
		return StateScalingResult{}, err
	}
	defer os.RemoveAll(root)
	maxP := keygroup.DefaultMaxParallelism(1)
	cache := state.NewBlockCache(cfg.BlockCacheBytes)
	defer cache.Close()
	bcfg := state.BackendConfig{
		Kind: state.KindPebble, Dir: filepath.Join(root, "db"), MaxParallelism: maxP,
		KeyGroupRange: keygroup.RangeFor(maxP, 1, 0), Cache: cache, Logger: cfg.Logger,
		TTLCleanup: state.TTLCleanupConfig{Disabled: true},
	}
	storeDir := filepath.Join(root, "checkpoints", state.RemoteDirName)
	if cfg.Remote {
		bcfg.Remote = &state.RemoteConfig{Dir: storeDir, CacheBytes: cfg.RemoteCacheBytes, ReadLatency: cfg.ReadLatency}
	}
	res := StateScalingResult{Keys: cfg.Keys, Changed: max(1, int(float64(cfg.Keys)*cfg.Changed))}
	rss := newRSSMeter()
	b, err := state.OpenBackend(bcfg)
	if err != nil {
		return res, err
	}
	defer func() { _ = b.Close() }()
	count, err := state.GetValueState(b, operators.KeyedCountState)
	if err != nil {
		return res, err
	}
	key := func(i int) []byte { return strconv.AppendInt([]byte("k"), int64(i), 10) }
	t0 := time.Now()
	for i := range cfg.Keys {
		if i%65536 == 0 {
			if err := ctx.Err(); err != nil {
				return res, err
			}
			rss.Sample()
		}
		b.SetCurrentKey(key(i))
		if err := count.Update(1); err != nil {
			return res, err
		}
	}
	res.Load = time.Since(t0)
	if du, ok := b.(state.DiskUser); ok {
		res.DBBytes, _ = du.DiskSpaceUsage()
	}
	if cfg.CPUProfile != "" {
		f, err := os.Create(cfg.CPUProfile)
		if err != nil {
			return res, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return res, err
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	shared := filepath.Join(root, "checkpoints", "shared")
	var last state.KeyedSnapshot
	var lastDir string
	var syncPart time.Duration
	checkpointOnce := func(id int) (time.Duration, int64, error) {
		dir := filepath.Join(root, "checkpoints", "chk-"+strconv.Itoa(id))
		start := time.Now()
		finish, err := state.SnapshotKeyed(b, state.SnapshotTarget{Dir: dir, TaskPath: "count/0", SharedDir: shared})
		if err != nil {
			return 0, 0, err
		}
		syncPart = time.Since(start)
		snap, err := finish(ctx)
		if err != nil {
			return 0, 0, err
		}
		last, lastDir = snap, dir
		rss.Sample()
		return time.Since(start), snap.Bytes, nil
	}
	if res.Full, res.FullBytes, err = checkpointOnce(1); err != nil {
		return res, err
	}
	res.FullSync = syncPart
	rng := rand.New(rand.NewPCG(5, 6))
	for r := range cfg.Rounds {
		for range res.Changed {
			b.SetCurrentKey(key(rng.IntN(cfg.Keys)))
			if err := count.Update(int64(r + 2)); err != nil {
				return res, err
			}
		}
		d, n, err := checkpointOnce(r + 2)
		if err != nil {
			return res, err
		}
		res.Incremental, res.IncrementalBytes = append(res.Incremental, d), append(res.IncrementalBytes, n)
		res.IncrementalSync = append(res.IncrementalSync, syncPart)
	}
	res.LocalBytes = dirBytes(bcfg.Dir)
	if cfg.Remote {
		res.StoreBytes = dirBytes(storeDir)
	}
	rcfg := bcfg
	rcfg.Dir = filepath.Join(root, "restored")
	start := time.Now()
	rb, err := state.OpenBackendRestored(rcfg, []state.RestoreHandle{{Handle: last.Handle, Dir: lastDir, SharedDir: shared}})
	if err != nil {
		return res, fmt.Errorf("bench: state-scaling: restore: %w", err)
	}
	defer func() { _ = rb.Close() }()
	rcount, err := state.GetValueState(rb, operators.KeyedCountState)
	if err != nil {
		return res, err
	}
	rb.SetCurrentKey(key(cfg.Keys - 1))
	if _, ok, err := rcount.Value(); err != nil || !ok {
		return res, fmt.Errorf("bench: state-scaling: restored state lacks key %d: %v", cfg.Keys-1, err)
	}
	res.Restore = time.Since(start)
	// Rescale 1 -> 2: each half restores its key groups.
	start = time.Now()
	for i := range 2 {
		hcfg := bcfg
		hcfg.Dir = filepath.Join(root, "rescaled-"+strconv.Itoa(i))
		hcfg.KeyGroupRange = keygroup.RangeFor(maxP, 2, i)
		hb, err := state.OpenBackendRestored(hcfg, []state.RestoreHandle{{Handle: last.Handle, Dir: lastDir, SharedDir: shared}})
		if err != nil {
			return res, fmt.Errorf("bench: state-scaling: rescale: %w", err)
		}
		hcount, err := state.GetValueState(hb, operators.KeyedCountState)
		if err == nil {
			for k := cfg.Keys - 1; k >= 0; k-- { // a key of this half
				if hcfg.KeyGroupRange.Contains(keygroup.Assign(key(k), maxP)) {
					hb.SetCurrentKey(key(k))
					var ok bool
					if _, ok, err = hcount.Value(); err == nil && !ok {
						err = fmt.Errorf("key %d missing", k)
					}
					break
				}
			}
		}
		defer func() { _ = hb.Close() }() // after the measurement: Close waits for compactions
		if err != nil {
			return res, fmt.Errorf("bench: state-scaling: rescaled state: %w", err)
		}
	}
	res.Rescale = time.Since(start)
	res.PeakRSSBytes = rss.Peak()
	return res, nil
}

// dirBytes is the disk use of the files under dir (allocated blocks where
// the system reports them, as du does: Pebble's cache of remote blocks is
// a sparse file of its full size; else file sizes), 0 when it is missing.
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				if st, ok := info.Sys().(*syscall.Stat_t); ok {
					n += int64(st.Blocks) * 512
				} else {
					n += info.Size()
				}
			}
		}
		return nil
	})
	return n
}
