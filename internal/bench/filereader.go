package bench

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/gjson"
)

// fileReader counts the lines of the part files a file sink published in
// dir (names not starting with '.'; a part appears whole when its
// checkpoint completes), polling every 10 ms: n1 the lines whose "ts"
// field (the record timestamp, ms) is before phase2, n2 the others, whose
// latency (the time the poll found the part minus ts) it keeps.
type fileReader struct {
	dir    string
	phase2 time.Time
	seen   map[string]bool // parts already counted; owned by run
	n1, n2 atomic.Int64
	mu     sync.Mutex
	lat    []time.Duration
}

func (fr *fileReader) run(ctx context.Context) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := fr.scan(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// scan counts the parts published since the last scan.
func (fr *fileReader) scan() error {
	now := time.Now()
	var n1, n2 int64
	var lat []time.Duration
	err := filepath.WalkDir(fr.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if d.IsDir() || strings.HasPrefix(d.Name(), ".") || fr.seen[p] {
			return nil
		}
		fr.seen[p] = true
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			ts := time.UnixMilli(gjson.GetBytes(sc.Bytes(), "ts").Int())
			if ts.Before(fr.phase2) {
				n1++
				continue
			}
			n2++
			lat = append(lat, now.Sub(ts))
		}
		return sc.Err()
	})
	if err != nil {
		return fmt.Errorf("bench: read file sink output %s: %w", fr.dir, err)
	}
	fr.mu.Lock()
	fr.lat = append(fr.lat, lat...)
	fr.mu.Unlock()
	fr.n1.Add(n1)
	fr.n2.Add(n2)
	return nil
}

func (fr *fileReader) count() int64 { return fr.n1.Load() + fr.n2.Load() }

func (fr *fileReader) latencies() []time.Duration {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	return append([]time.Duration(nil), fr.lat...)
}
