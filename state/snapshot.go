package state

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/kstreamd/kstreamd/internal/atomicfile"
)

// SnapshotFileName is the file Snapshotter.Snapshot writes in its directory.
const SnapshotFileName = "keyed-state.snap"

// snapshotMagic opens every snapshot file (format version 1).
var snapshotMagic = []byte("KSSNAP01")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Snapshot writes a full snapshot of the backend's keyed state to
// dir/SnapshotFileName (see Snapshotter and FORMAT.md): the format record,
// every state's metadata and every stored entry, as key/value records in the
// Pebble key layout, sorted, then a CRC-32C. Entries expired under the TTL of
// states obtained from this backend are left out (Flink's full-snapshot
// cleanup). Runs on the owner's goroutine; it copies nothing first, so the
// state must not change meanwhile.
func (h *hashmapBackend) Snapshot(dir string) error {
	if h.closed {
		return ErrClosed
	}
	visit := map[uint32]func([]byte) ([]byte, bool, error){}
	for _, r := range h.states {
		if r.core.ttl != nil {
			visit[r.meta.ID] = r.core.cleanupVisitor()
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("state: snapshot: %w", err)
	}
	final := filepath.Join(dir, SnapshotFileName)
	err := atomicfile.Write(final, atomicfile.Options{TempName: SnapshotFileName + ".tmp"}, func(w io.Writer) error {
		return h.st.writeSnapshot(w, visit)
	})
	if err != nil {
		return fmt.Errorf("state: snapshot to %s: %w", dir, err)
	}
	h.log.Info("keyed state snapshot written", "dir", dir)
	return nil
}

// writeSnapshot writes the snapshot records to w; visit holds the TTL
// filters by state id.
func (s *hashmapStore) writeSnapshot(w io.Writer, visit map[uint32]func([]byte) ([]byte, bool, error)) error {
	crc := crc32.New(castagnoli)
	bw := bufio.NewWriter(io.MultiWriter(w, crc))
	var scratch []byte
	record := func(k, v []byte) {
		scratch = binary.AppendUvarint(scratch[:0], uint64(len(k)))
		scratch = append(scratch, k...)
		scratch = binary.AppendUvarint(scratch, uint64(len(v)))
		scratch = append(scratch, v...)
		_, _ = bw.Write(scratch) // bufio keeps the first error; Flush returns it
	}
	_, _ = bw.Write(snapshotMagic)
	if s.format == nil {
		return fmt.Errorf("state: snapshot: no format record")
	}
	fj, _ := json.Marshal(s.format)
	record(formatKey, fj)
	metas := slices.SortedFunc(slices.Values(s.metas), func(a, b stateMeta) int { return int(a.ID) - int(b.ID) })
	for _, m := range metas {
		mj, _ := json.Marshal(m)
		record(metaKey(m.Name), mj)
	}
	var key []byte
	for _, id := range slices.Sorted(maps.Keys(s.tables)) {
		v := visit[id]
		for gi := range s.tables[id] {
			g := &s.tables[id][gi]
			kg := s.kgs.Start + gi
			for _, k := range slices.Sorted(maps.Keys(g.values)) {
				blob := g.values[k]
				if v != nil {
					repl, keep, err := v(blob)
					if err != nil {
						return err
					}
					if !keep {
						continue
					}
					if repl != nil {
						blob = repl
					}
				}
				key = appendStateKey(key[:0], stateKey{id: id, kg: kg, key: []byte(k)})
				record(key, blob)
			}
			for _, k := range slices.Sorted(maps.Keys(g.maps)) {
				m := g.maps[k]
				for _, uk := range slices.Sorted(maps.Keys(m)) {
					if v != nil {
						if _, keep, err := v(m[uk]); err != nil {
							return err
						} else if !keep {
							continue
						}
					}
					key = append(appendStateKey(key[:0], stateKey{id: id, kg: kg, key: []byte(k)}), uk...)
					record(key, m[uk])
				}
			}
		}
	}
	_, _ = bw.Write([]byte{0}) // end marker: a record with an empty key
	if err := bw.Flush(); err != nil {
		return err
	}
	_, err := w.Write(binary.BigEndian.AppendUint32(nil, crc.Sum32()))
	return err
}

// restore loads dir/SnapshotFileName, skipping entries of key groups outside
// the store's range.
func (s *hashmapStore) restore(dir string) error {
	path := filepath.Join(dir, SnapshotFileName)
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("state: restore: %w", err)
	}
	if err := s.load(data); err != nil {
		return fmt.Errorf("state: restore %s: %w", path, err)
	}
	return nil
}

// load parses a snapshot file's bytes into the store.
func (s *hashmapStore) load(data []byte) error {
	if len(data) < len(snapshotMagic)+1+4 || !bytes.Equal(data[:len(snapshotMagic)], snapshotMagic) {
		return fmt.Errorf("not a keyed state snapshot: %w", ErrCorrupt)
	}
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return fmt.Errorf("checksum %08x, want %08x: %w", got, sum, ErrCorrupt)
	}
	rest := body[len(snapshotMagic):]
	next := func() ([]byte, error) {
		n, w := binary.Uvarint(rest)
		if w <= 0 || uint64(len(rest)-w) < n {
			return nil, fmt.Errorf("truncated record: %w", ErrCorrupt)
		}
		b := rest[w : w+int(n)]
		rest = rest[w+int(n):]
		return b, nil
	}
	kinds := map[uint32]stateKind{}
	for {
		k, err := next()
		if err != nil {
			return err
		}
		if len(k) == 0 {
			break
		}
		v, err := next()
		if err != nil {
			return err
		}
		if err := s.loadRecord(k, v, kinds); err != nil {
			return err
		}
	}
	if len(rest) != 0 || s.format == nil {
		return fmt.Errorf("trailing bytes or no format record: %w", ErrCorrupt)
	}
	return nil
}

// loadRecord stores one snapshot record; kinds collects the state kinds of
// the metadata records, which precede the state records.
func (s *hashmapStore) loadRecord(k, v []byte, kinds map[uint32]stateKind) error {
	switch {
	case bytes.Equal(k, formatKey):
		var f formatInfo
		if err := json.Unmarshal(v, &f); err != nil {
			return fmt.Errorf("format record: %v: %w", err, ErrCorrupt)
		}
		s.format = &f
	case bytes.HasPrefix(k, metaStatePfx):
		var m stateMeta
		if err := json.Unmarshal(v, &m); err != nil {
			return fmt.Errorf("state meta record: %v: %w", err, ErrCorrupt)
		}
		s.metas = append(s.metas, m)
		kinds[m.ID] = m.Kind
	default:
		sk, uk, err := parseStateKey(k)
		if err != nil {
			return err
		}
		kind, ok := kinds[sk.id]
		if !ok {
			return fmt.Errorf("entry of unknown state id %d: %w", sk.id, ErrCorrupt)
		}
		if !s.kgs.Contains(sk.kg) {
			return nil
		}
		v = append([]byte{}, v...)
		if kind == kindMap {
			return s.setEntry(sk, uk, v)
		}
		if len(uk) != 0 {
			return fmt.Errorf("%s state entry with trailing key bytes: %w", kind, ErrCorrupt)
		}
		return s.set(sk, v)
	}
	return nil
}
