package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/kstreamd/kstreamd/operators"
	"github.com/kstreamd/kstreamd/state"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// diskMeter samples the disk use of the local state directories of a
// state-scaling run (every directory under root except the checkpoints:
// one per backend instance) every interval, keeping the high-water marks
// of one directory and of all of them together.
type diskMeter struct {
	root, skip string
	stop       chan struct{}
	done       sync.WaitGroup

	mu               sync.Mutex
	peakOne, peakAll int64
}

// newDiskMeter starts sampling the directories under root except skip.
func newDiskMeter(root, skip string, interval time.Duration) *diskMeter {
	m := &diskMeter{root: root, skip: skip, stop: make(chan struct{})}
	m.Sample()
	m.done.Add(1)
	go func() {
		defer m.done.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-t.C:
				m.Sample()
			}
		}
	}()
	return m
}

// Sample measures the directories now.
func (m *diskMeter) Sample() {
	ents, _ := os.ReadDir(m.root)
	var all, one int64
	for _, e := range ents {
		if !e.IsDir() || e.Name() == m.skip {
			continue
		}
		n := dirBytes(filepath.Join(m.root, e.Name()))
		all += n
		one = max(one, n)
	}
	m.mu.Lock()
	m.peakOne, m.peakAll = max(m.peakOne, one), max(m.peakAll, all)
	m.mu.Unlock()
}

// Stop ends the sampling (after a last sample) and returns the high-water
// marks: of the largest single directory and of all together.
func (m *diskMeter) Stop() (one, all int64) {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	m.done.Wait()
	m.Sample()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peakOne, m.peakAll
}

// scaledSubtask is one subtask of a rescale step: its backend, its
// keyed_count state and its key groups.
type scaledSubtask struct {
	b     state.KeyedStateBackend
	count state.ValueState[int64]
	kgs   keygroup.Range
}

// rescaleChain runs the rescales 1 -> 2 -> 4 -> 1 of the keyed_count state
// from the checkpoint first (one subtask owning every key group), as a
// job rescaled on restarts does: each step opens the new parallelism's
// subtasks from the previous step's checkpoint (each subtask gets the
// snapshots overlapping its key groups) and reads one key in each, all
// subtasks at once as a job's tasks open their state (the step's
// duration: until the last subtask read its key), closes the previous
// subtasks, updates changed
// random keys (value 100 + step, recorded in model) and checkpoints every
// subtask. The last step's state is then read back whole from its
// checkpoint (state.ReadKeyedSnapshot, the state tool's path) and must
// equal model exactly: every key once, with its value.
type rescaleChain struct {
	cfg     state.BackendConfig
	root    string
	shared  string
	keys    int
	changed int
	model   []uint8
	key     func(int) []byte
	// open opens one subtask's backend; nil is state.OpenBackendRestored
	// (tests observe the opens through it).
	open func(state.BackendConfig, []state.RestoreHandle) (state.KeyedStateBackend, error)
}

// rescaleResult is what rescaleChain measured.
type rescaleResult struct {
	// Steps are the durations of the rescales 1->2, 2->4 and 4->1.
	Steps []time.Duration
	// Verify is the time to read the final checkpoint back whole;
	// Verified the keys it checked.
	Verify   time.Duration
	Verified int
}

// rescaleParallelisms are the parallelisms rescaleChain goes through
// after the first (1).
var rescaleParallelisms = []int{2, 4, 1}

func (c *rescaleChain) run(ctx context.Context, first state.RestoreHandle) (rescaleResult, error) {
	var res rescaleResult
	maxP := c.cfg.MaxParallelism
	handles := []state.RestoreHandle{first}
	ranges := []keygroup.Range{keygroup.RangeFor(maxP, 1, 0)}
	var prev []scaledSubtask
	closeAll := func(subs []scaledSubtask) {
		for _, s := range subs {
			_ = s.b.Close()
		}
	}
	defer func() { closeAll(prev) }()
	rng := rand.New(rand.NewPCG(7, 8))
	for step, p := range rescaleParallelisms {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		// The old subtasks stop before the new ones restore, as at a
		// restart with another parallelism.
		closeAll(prev)
		prev = nil
		start := time.Now()
		subs, err := c.openStep(p, step, ranges, handles)
		if err != nil {
			return res, err
		}
		res.Steps = append(res.Steps, time.Since(start))
		prev = subs
		for range c.changed {
			k := rng.IntN(c.keys)
			kg := keygroup.Assign(c.key(k), maxP)
			s := subs[keygroup.OperatorIndex(kg, maxP, p)]
			s.b.SetCurrentKey(c.key(k))
			v := uint8(100 + step)
			if err := s.count.Update(int64(v)); err != nil {
				return res, err
			}
			c.model[k] = v
		}
		dir := filepath.Join(c.root, "checkpoints", "rescale-"+strconv.Itoa(step))
		handles, ranges = handles[:0:0], ranges[:0:0]
		for i, s := range subs {
			finish, err := state.SnapshotKeyed(s.b, state.SnapshotTarget{Dir: dir, TaskPath: "count/" + strconv.Itoa(i), SharedDir: c.shared})
			if err != nil {
				return res, err
			}
			snap, err := finish(ctx)
			if err != nil {
				return res, err
			}
			handles = append(handles, state.RestoreHandle{Handle: snap.Handle, Dir: dir, SharedDir: c.shared})
			ranges = append(ranges, s.kgs)
		}
	}
	start := time.Now()
	n, err := c.verify(handles[0])
	res.Verify, res.Verified = time.Since(start), n
	return res, err
}

// openStep opens the p subtasks of rescale step step from the previous
// step's snapshots (handles, owning ranges), each in a goroutine of its
// own, as a job's keyed tasks restore their state concurrently: each
// subtask has its own local directory and creator id, and they share only
// the block cache and the store, where each writes its own markers. Each
// subtask reads one key; on any failure every opened backend is closed.
func (c *rescaleChain) openStep(p, step int, ranges []keygroup.Range, handles []state.RestoreHandle) ([]scaledSubtask, error) {
	maxP := c.cfg.MaxParallelism
	open := c.open
	if open == nil {
		open = state.OpenBackendRestored
	}
	subs := make([]scaledSubtask, p)
	errs := make([]error, p)
	var wg sync.WaitGroup
	for i := range p {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kgs := keygroup.RangeFor(maxP, p, i)
			var mine []state.RestoreHandle
			for j, r := range ranges {
				if r.Intersect(kgs).Len() > 0 {
					mine = append(mine, handles[j])
				}
			}
			hcfg := c.cfg
			hcfg.Dir = filepath.Join(c.root, "p"+strconv.Itoa(p)+"-"+strconv.Itoa(step)+"-"+strconv.Itoa(i))
			hcfg.KeyGroupRange = kgs
			b, err := open(hcfg, mine)
			if err != nil {
				errs[i] = fmt.Errorf("rescale to %d: subtask %d: %w", p, i, err)
				return
			}
			s := scaledSubtask{b: b, kgs: kgs}
			subs[i] = s
			if s.count, err = state.GetValueState(b, operators.KeyedCountState); err != nil {
				errs[i] = err
				return
			}
			subs[i].count = s.count
			if err := c.readOne(s); err != nil {
				errs[i] = fmt.Errorf("rescale to %d: subtask %d: %w", p, i, err)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, s := range subs {
			if s.b != nil {
				_ = s.b.Close()
			}
		}
		return nil, err
	}
	return subs, nil
}

// readOne reads the last key of s's key groups (the restore's first read).
func (c *rescaleChain) readOne(s scaledSubtask) error {
	for k := c.keys - 1; k >= 0; k-- {
		if s.kgs.Contains(keygroup.Assign(c.key(k), c.cfg.MaxParallelism)) {
			s.b.SetCurrentKey(c.key(k))
			v, ok, err := s.count.Value()
			if err != nil {
				return err
			}
			if !ok || v != int64(c.model[k]) {
				return fmt.Errorf("key %d: value %d (present %v), want %d", k, v, ok, c.model[k])
			}
			return nil
		}
	}
	return nil
}

// verify reads the snapshot h (the one subtask of the last step) whole and
// checks it holds exactly the model's keys with their values.
func (c *rescaleChain) verify(h state.RestoreHandle) (int, error) {
	seen := make([]bool, c.keys)
	n := 0
	_, err := state.ReadKeyedSnapshot(h, c.root, func(e state.KeyedEntry) error {
		if e.State.Name != operators.KeyedCountState.Name {
			return nil
		}
		if len(e.Key) < 2 || e.Key[0] != 'k' {
			return fmt.Errorf("unexpected key %q", e.Key)
		}
		k, err := strconv.Atoi(string(e.Key[1:]))
		if err != nil || k < 0 || k >= c.keys {
			return fmt.Errorf("unexpected key %q", e.Key)
		}
		if seen[k] {
			return fmt.Errorf("key %q twice", e.Key)
		}
		seen[k] = true
		v, err := state.Int64Serializer{}.Decode(e.Value)
		if err != nil {
			return fmt.Errorf("key %q: %w", e.Key, err)
		}
		if v != int64(c.model[k]) {
			return fmt.Errorf("key %q: value %d, want %d", e.Key, v, c.model[k])
		}
		n++
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("verify the rescaled state: %w", err)
	}
	if n != c.keys {
		return n, fmt.Errorf("verify the rescaled state: %d keys, want %d", n, c.keys)
	}
	return n, nil
}
