package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// TestRunFromBadSavepointRefused: `kstreamd run --from-savepoint DIR` with a
// DIR that is not a savepoint or checkpoint directory is a bad command line
// (exit 2), and one whose metadata is corrupt a savepoint the job cannot
// start from (exit 1); both are reported before anything starts: no
// embedded broker, no topics, no data dir (it used to start the broker and
// create the topics first).
func TestRunFromBadSavepointRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	cfgPath := filepath.Join(dir, "job.yaml")
	cfg := jobHead("sp", 1, dataDir, embeddedKafka(testkit.FreeAddr(t)), testkit.FreeAddr(t), "info") + `sources:
  - name: in
    topic: in
sinks:
  - {name: out, input: in, topic: out}
`
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "file")
	empty := filepath.Join(dir, "empty")
	corrupt := filepath.Join(dir, "corrupt")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{empty, corrupt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(corrupt, "_metadata"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		from string
		code int
		want string
	}{
		{filepath.Join(dir, "nonexistent"), 2, "no such directory"},
		{file, 2, "not a directory; want a savepoint or checkpoint (chk-<n>) directory"},
		{empty, 2, "not a savepoint or checkpoint directory: it has no _metadata file"},
		// a savepoint the job cannot start from, as README's exit statuses say
		{corrupt, 1, "checkpoint: corrupt metadata: " + corrupt + ": unexpected end of JSON input"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), []string{"run", "--config", cfgPath, "--from-savepoint", tc.from}, &stdout, &stderr)
		want := "kstreamd run: --from-savepoint " + tc.from + ": " + tc.want + "\n"
		if code != tc.code || stdout.Len() != 0 || stderr.String() != want {
			t.Errorf("--from-savepoint %s: exit %d, stdout %q, stderr %q; want exit %d, no stdout, stderr %q", tc.from, code, stdout.String(), stderr.String(), tc.code, want)
		}
		if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
			t.Fatalf("--from-savepoint %s: data dir %s exists (stat err %v): the run started before the savepoint was checked", tc.from, dataDir, err)
		}
	}
}
