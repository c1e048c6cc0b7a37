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
	// RestoreIdle is Restore again once the checkpointed and the restored
	// backends have closed (their compactions over): a restore after a
	// failover, with no other instance of the state compacting beside it.
	// Restore runs while the checkpointed instance still compacts what the
	// load wrote (at 10M keys, for minutes).
	RestoreIdle time.Duration
	// Rescale is the time to open two backends, each restoring half of
	// the key groups from the last checkpoint, and read one key in each
	// (RescaleSteps[0]).
	Rescale time.Duration
	// RescaleSteps are the rescales 1 -> 2 -> 4 -> 1 (rescaleChain): each
	// the time to open the new parallelism's subtasks from the previous
	// step's checkpoint and read one key in each, one after the other;
	// between two steps changed keys are updated and every subtask is
	// checkpointed.
	RescaleSteps []time.Duration
	// Verify is the time to read the last step's checkpoint back whole
	// (state.ReadKeyedSnapshot) and Verified the keys found there, each
	// with exactly the value the run wrote last (else StateScaling fails).
	Verify   time.Duration
	Verified int
	// LocalPeakBytes is the high-water mark of the disk use of one
	// backend instance's local directory over the whole run (sampled
	// every 100 ms and at each step), LocalPeakAllBytes that of the local
	// directories of all instances open at once (one subtask per
	// instance: up to 4 during the rescales).
	LocalPeakBytes, LocalPeakAllBytes int64
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
// restore from the last, then the rescales 1 -> 2 -> 4 -> 1 with the
// final state checked key by key (rescaleChain); it prints one table to w
// (an error when the state read back is not exact). Checkpoints are taken
// with state.SnapshotKeyed, what a keyed operator's subtask runs for a
// barrier, into a job-like directory with a shared directory.
func RunStateScaling(ctx context.Context, cfg StateScalingConfig, w io.Writer) error {
	res, err := StateScaling(ctx, cfg)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "state\tkeys\tchanged\tload_s\tdb_MiB\tfull_chk_ms\tfull_sync_ms\tfull_chk_MiB\tincr_p50_ms\tincr_max_ms\tincr_sync_p50_ms\tincr_sync_max_ms\tincr_p50_MiB\tincr_max_MiB\trestore_ms\trestore_idle_ms\trescale_ms\trescale_2to4_ms\trescale_4to1_ms\texact_keys\tlocal_MiB\tlocal_peak_MiB\tlocal_peak_all_MiB\tstore_MiB\tpeak_rss_MiB\t")
	mib := func(b int64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }
	kind := "local"
	if cfg.Remote {
		kind = "remote"
		if cfg.ReadLatency > 0 {
			kind += "+" + cfg.ReadLatency.String()
		}
	}
	fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%.0f\t\n", kind, res.Keys, res.Changed, res.Load.Seconds(), mib(int64(res.DBBytes)),
		ms(res.Full), ms(res.FullSync), mib(res.FullBytes), ms(quantile(res.Incremental, 0.5)), ms(quantile(res.Incremental, 1)),
		ms(quantile(res.IncrementalSync, 0.5)), ms(quantile(res.IncrementalSync, 1)),
		mib(quantile(res.IncrementalBytes, 0.5)), mib(quantile(res.IncrementalBytes, 1)), ms(res.Restore), ms(res.RestoreIdle), ms(res.Rescale),
		ms(res.RescaleSteps[1]), ms(res.RescaleSteps[2]), res.Verified,
		mib(res.LocalBytes), mib(res.LocalPeakBytes), mib(res.LocalPeakAllBytes), mib(res.StoreBytes), float64(res.PeakRSSBytes)/(1<<20))
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
	if cfg.Rounds > 90 {
		return StateScalingResult{}, fmt.Errorf("bench: state-scaling: at most 90 rounds, got %d", cfg.Rounds)
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
	if err := os.MkdirAll(root, 0o755); err != nil {
		return res, err
	}
	disk := newDiskMeter(root, "checkpoints", 100*time.Millisecond)
	defer disk.Stop()
	b, err := state.OpenBackend(bcfg)
	if err != nil {
		return res, err
	}
	closed := false
	defer func() {
		if !closed {
			_ = b.Close()
		}
	}()
	// model is every key's value as last written (the values are small).
	model := make([]uint8, cfg.Keys)
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
		model[i] = 1
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
		disk.Sample()
		return time.Since(start), snap.Bytes, nil
	}
	if res.Full, res.FullBytes, err = checkpointOnce(1); err != nil {
		return res, err
	}
	res.FullSync = syncPart
	rng := rand.New(rand.NewPCG(5, 6))
	for r := range cfg.Rounds {
		for range res.Changed {
			k := rng.IntN(cfg.Keys)
			b.SetCurrentKey(key(k))
			if err := count.Update(int64(r + 2)); err != nil {
				return res, err
			}
			model[k] = uint8(r + 2)
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
	rcount, err := state.GetValueState(rb, operators.KeyedCountState)
	if err == nil {
		rb.SetCurrentKey(key(cfg.Keys - 1))
		var ok bool
		if _, ok, err = rcount.Value(); err == nil && !ok {
			err = fmt.Errorf("key %d missing", cfg.Keys-1)
		}
	}
	res.Restore = time.Since(start)
	// The running backend and the restored one stop before the rescales
	// (their Close, which waits for compactions, is not measured).
	err = errors.Join(err, rb.Close(), b.Close())
	closed = true
	if err != nil {
		return res, fmt.Errorf("bench: state-scaling: restored state: %w", err)
	}
	if res.RestoreIdle, err = restoreOnce(bcfg, filepath.Join(root, "restored-idle"), last.Handle, lastDir, shared, key(cfg.Keys-1)); err != nil {
		return res, fmt.Errorf("bench: state-scaling: idle restore: %w", err)
	}
	chain := rescaleChain{cfg: bcfg, root: root, shared: shared, keys: cfg.Keys, changed: res.Changed, model: model, key: key}
	rr, err := chain.run(ctx, state.RestoreHandle{Handle: last.Handle, Dir: lastDir, SharedDir: shared})
	if err != nil {
		return res, fmt.Errorf("bench: state-scaling: %w", err)
	}
	res.Rescale, res.RescaleSteps, res.Verify, res.Verified = rr.Steps[0], rr.Steps, rr.Verify, rr.Verified
	res.LocalPeakBytes, res.LocalPeakAllBytes = disk.Stop()
	res.PeakRSSBytes = rss.Peak()
	return res, nil
}

// restoreOnce opens a backend of bcfg in dir from a checkpoint's handle,
// reads key's count (which must be there) and closes it; it returns the
// time until the read (the close, which waits for compactions, is not
// measured).
func restoreOnce(bcfg state.BackendConfig, dir string, handle []byte, chkDir, shared string, key []byte) (time.Duration, error) {
	bcfg.Dir = dir
	start := time.Now()
	b, err := state.OpenBackendRestored(bcfg, []state.RestoreHandle{{Handle: handle, Dir: chkDir, SharedDir: shared}})
	if err != nil {
		return 0, err
	}
	count, err := state.GetValueState(b, operators.KeyedCountState)
	if err == nil {
		b.SetCurrentKey(key)
		var ok bool
		if _, ok, err = count.Value(); err == nil && !ok {
			err = fmt.Errorf("key %s missing", key)
		}
	}
	d := time.Since(start)
	return d, errors.Join(err, b.Close())
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
