package state

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/kstreamd/kstreamd/internal/atomicfile"
)

// snapshotAsync is the hashmap backend's checkpoint snapshot in two parts
// (Flink's HashMapStateBackend snapshots copy-on-write state tables the same
// way). The synchronous part, run now on the owner's goroutine, copies the
// store's tables (the maps, not the stored bytes; see snapshotCopy) and
// fixes the TTL time. The returned function, safe to run on another
// goroutine while the owner goes on changing the state, writes
// taskDir/SnapshotFileName exactly as Snapshot does (same bytes for the
// same state and time) and returns the handle.
func (h *hashmapBackend) snapshotAsync(t SnapshotTarget, taskDir string) (func(context.Context) (KeyedSnapshot, error), error) {
	if h.closed {
		return nil, ErrClosed
	}
	if h.st.format == nil {
		return nil, fmt.Errorf("state: snapshot: no format record")
	}
	visit := map[uint32]func([]byte) ([]byte, bool, error){}
	for _, r := range h.states {
		if r.core.ttl != nil {
			visit[r.meta.ID] = r.core.snapshotVisitor(r.core.now())
		}
	}
	frozen := h.st.snapshotCopy()
	handle := keyedHandle{Backend: KindHashmap, KeyGroups: h.kgs, MaxParallelism: h.maxP}
	log := h.log
	return func(ctx context.Context) (KeyedSnapshot, error) {
		if err := ctx.Err(); err != nil {
			return KeyedSnapshot{}, err
		}
		size, err := writeSnapshotFile(taskDir, frozen, visit)
		if err != nil {
			return KeyedSnapshot{}, err
		}
		log.Info("keyed state snapshot written", "dir", taskDir)
		handle.Files = []fileRef{{Name: SnapshotFileName, Path: filepath.ToSlash(filepath.Join(t.TaskPath, SnapshotFileName)), Size: size}}
		raw, err := json.Marshal(handle)
		if err != nil {
			return KeyedSnapshot{}, err
		}
		return KeyedSnapshot{Handle: raw, Bytes: size}, nil
	}, nil
}

// snapshotCopy returns a copy of the store that later changes of s do not
// reach: format, metadata and every map of the tables are copied; the stored
// byte slices are shared. Sharing is safe because the store never writes
// into the bytes of a slice it stores: set and setEntry replace the slice,
// merge appends past its length (bytes a copy does not see), cleanup
// replaces or deletes, and reads hand out copies (a TTL refresh restamps
// its own copy and stores that). Cost: one map copy per (state, key group)
// and one per map-state key, O(entries) without copying values.
func (s *hashmapStore) snapshotCopy() *hashmapStore {
	c := &hashmapStore{kgs: s.kgs, metas: slices.Clone(s.metas), tables: make(map[uint32][]hmGroup, len(s.tables))}
	if s.format != nil {
		f := *s.format
		c.format = &f
	}
	for id, t := range s.tables {
		ct := make([]hmGroup, len(t))
		for i := range t {
			if len(t[i].values) > 0 {
				ct[i].values = maps.Clone(t[i].values)
			}
			if len(t[i].maps) > 0 {
				ct[i].maps = make(map[string]map[string][]byte, len(t[i].maps))
				for k, m := range t[i].maps {
					ct[i].maps[k] = maps.Clone(m)
				}
			}
		}
		c.tables[id] = ct
	}
	return c
}

// snapshotVisitor is cleanupVisitor with the time fixed at now, so a
// snapshot written on another goroutine does not call the backend's clock
// and filters every entry against the same instant.
func (c *stateCore) snapshotVisitor(now int64) func(v []byte) ([]byte, bool, error) {
	if c.kind == kindList {
		return func(v []byte) ([]byte, bool, error) {
			kept, changed, err := c.filterList(v, now)
			if err != nil || !changed {
				return nil, true, err
			}
			return kept, len(kept) > 0, nil
		}
	}
	return func(v []byte) ([]byte, bool, error) {
		ts, _, err := splitTimestamp(v)
		if err != nil {
			return nil, true, err
		}
		return nil, !c.ttl.expired(ts, now), nil
	}
}

// writeSnapshotFile writes st's snapshot to dir/SnapshotFileName as
// Snapshot does (temp file, fsync, rename, directory fsync) and returns the
// file's size.
func writeSnapshotFile(dir string, st *hashmapStore, visit map[uint32]func([]byte) ([]byte, bool, error)) (int64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, fmt.Errorf("state: snapshot: %w", err)
	}
	var size int64
	err := atomicfile.Write(filepath.Join(dir, SnapshotFileName), atomicfile.Options{TempName: SnapshotFileName + ".tmp"}, func(w io.Writer) error {
		cw := &countingWriter{w: w}
		err := st.writeSnapshot(cw, visit)
		size = cw.n
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("state: snapshot to %s: %w", dir, err)
	}
	return size, nil
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
