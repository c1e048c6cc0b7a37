package state

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/state/keygroup"
)

// TestRemoteDeltaOlderBinaryRefuses: a delta checkpoint's handle lists
// its delta objects at the end of "files" (marked "delta", level 0,
// bounds over every key) and has no "deltas" field, and decodes back
// into the same Files and Deltas. Decoded as 33e6b10's binary decodes it
// (its keyedHandle has neither Deltas nor fileRef.Delta, and it restores
// every entry of "files" as a table by reference), the restore fails,
// into remote and into local state, instead of silently restoring the
// base without the deltas' changes. With the deltas in a field of their
// own (s40-delta's layout), that decode sees only the base and restores
// it without error, and this test fails.
func TestRemoteDeltaOlderBinaryRefuses(t *testing.T) {
	const n = 600
	cfg := testConfig(t, kindPebbleRemote)
	b, rh, snap := threeRoundChain(t, cfg, n)
	h := handleOf(t, snap)
	if len(h.Deltas) != 2 || len(h.Files) == 0 {
		t.Fatalf("checkpoint 3 names %d tables and %d deltas, want some tables and 2 deltas", len(h.Files), len(h.Deltas))
	}
	want := rawState(t, b, cfg.KeyGroupRange)
	must(t, b.Close())

	// The JSON: no "deltas", the deltas last in "files", in order.
	var raw map[string]json.RawMessage
	must(t, json.Unmarshal(rh.Handle, &raw))
	if _, ok := raw["deltas"]; ok {
		t.Fatalf("handle has a \"deltas\" field: %s", rh.Handle)
	}
	var files []struct {
		Name         string `json:"name"`
		Path         string `json:"path"`
		Delta        bool   `json:"delta"`
		Level        int    `json:"level"`
		Start        []byte `json:"start"`
		End          []byte `json:"end"`
		EndInclusive bool   `json:"end_inclusive"`
	}
	must(t, json.Unmarshal(raw["files"], &files))
	if len(files) != len(h.Files)+2 {
		t.Fatalf("\"files\" has %d entries, want %d tables + 2 deltas", len(files), len(h.Files))
	}
	for i, f := range files {
		isDelta := i >= len(h.Files)
		if f.Delta != isDelta {
			t.Fatalf("files[%d] %s: delta %v, want %v", i, f.Name, f.Delta, isDelta)
		}
		if !isDelta {
			continue
		}
		if d := h.Deltas[i-len(h.Files)]; f.Name != d.Name || f.Path != d.Path || !strings.HasPrefix(f.Name, "delta-") {
			t.Fatalf("files[%d] = %s (%s), want delta %s (%s)", i, f.Name, f.Path, d.Name, d.Path)
		}
		if f.Level != 0 || len(f.Start) != 0 || !bytes.Equal(f.End, deltaEnd) || !f.EndInclusive {
			t.Fatalf("files[%d] %s: level %d bounds [%x, %x] inclusive %v, want level 0 and every key", i, f.Name, f.Level, f.Start, f.End, f.EndInclusive)
		}
	}
	// Round trip: the new binary reads what it wrote.
	again, err := json.Marshal(h)
	must(t, err)
	if !bytes.Equal(again, rh.Handle) {
		t.Fatalf("handle does not round-trip:\n%s\n%s", rh.Handle, again)
	}

	// The older binary's decode and restore, in a child process: the
	// older binary's Pebble may find the delta object corrupt in a
	// background goroutine first and end the process (pebbleLogger.Fatalf).
	for _, mode := range []string{"remote", "local"} {
		job := olderRestore{Handle: rh, RemoteDir: cfg.Remote.Dir, Dir: t.TempDir(), Mode: mode}
		spec, err := json.Marshal(job)
		must(t, err)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), olderRestoreEnv+"="+string(spec))
		out, err := cmd.CombinedOutput()
		if err == nil || strings.Contains(string(out), "RESTORED") || !strings.Contains(string(out), "invalid table") {
			t.Fatalf("older binary's %s restore of a delta checkpoint: exit %v, want a failure naming an invalid table; output:\n%s", mode, err, out)
		}
		t.Logf("older binary, %s restore: %v: %s", mode, err, firstLine(string(out)))
	}

	// The new binary restores it exactly.
	nc := cfg
	nc.Dir = t.TempDir()
	nb, err := OpenBackendRestored(nc, []RestoreHandle{rh})
	must(t, err)
	checkRaw(t, "new binary restore", rawState(t, nb, cfg.KeyGroupRange), want)
	must(t, nb.Close())
}

// olderRestoreEnv names the environment variable that makes the test
// binary (TestMain) run olderRestore instead of the tests.
const olderRestoreEnv = "KSTREAMD_TEST_OLDER_RESTORE"

// olderRestore is a restore as 33e6b10's binary does it: the handle
// decoded into its keyedHandle (no Deltas, no fileRef.Delta), every entry
// of "files" restored as a table by reference, into remote state or (Mode
// "local") into local Pebble state of key groups 64-127.
type olderRestore struct {
	Handle    RestoreHandle
	RemoteDir string
	Dir       string
	Mode      string
}

// runOlderRestore runs the olderRestore in the environment and exits: 0
// after printing RESTORED when the restore succeeds, 3 when it returns an
// error (printed).
func runOlderRestore(spec string) {
	var job olderRestore
	if err := json.Unmarshal([]byte(spec), &job); err != nil {
		fmt.Println("bad spec:", err)
		os.Exit(2)
	}
	var old keyedHandleJSON // the fields 33e6b10's keyedHandle has
	if err := json.Unmarshal(job.Handle.Handle, &old); err != nil {
		fmt.Println("decode:", err)
		os.Exit(2)
	}
	for i := range old.Files {
		old.Files[i].Delta = false // 33e6b10's fileRef has no such field
	}
	cfg := BackendConfig{Kind: KindPebble, MaxParallelism: testMaxP, KeyGroupRange: keygroup.Range{Start: 0, End: testMaxP - 1},
		Dir: filepath.Join(job.Dir, "db"), Remote: &RemoteConfig{Dir: job.RemoteDir, CacheBytes: 1 << 20}}
	open := openRemoteRestored
	if job.Mode == "local" {
		cfg.Remote, cfg.KeyGroupRange = nil, keygroup.RangeFor(testMaxP, 2, 1)
		open = openLocalFromRemote
	}
	b, err := open(cfg, []RestoreHandle{job.Handle}, []keyedHandle{keyedHandle(old)})
	if err != nil {
		fmt.Println("restore:", err)
		os.Exit(3)
	}
	fmt.Println("RESTORED")
	_ = b.Close()
	os.Exit(0)
}

// firstLine returns s up to its first newline.
func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
