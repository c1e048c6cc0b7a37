package atomicfile

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// bothPaths runs f once with unnamed temporary files (O_TMPFILE, which
// t.TempDir's filesystem must have: ext4, XFS, Btrfs and tmpfs do) and
// once with the named fallback.
func bothPaths(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	for _, off := range []bool{false, true} {
		name := "unnamed"
		if off {
			name = "named"
		}
		t.Run(name, func(t *testing.T) {
			unnamedOff = off
			t.Cleanup(func() { unnamedOff = false })
			f(t)
		})
	}
}

// TestNoReplaceUsesNoTemporaryName: a create-only write without TempName
// creates no name but dst in the directory, at any point (the writer and
// BeforeRename see the directory as it was), and a crash before the link
// (BeforeRename's error) leaves the directory as it was. With the named
// fallback the temporary name is visible during the write.
func TestNoReplaceUsesNoTemporaryName(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "other"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "obj")
	var during, before []string
	err := Write(dst, Options{NoReplace: true, TempPattern: ".tmp-*", Perm: 0o644, BeforeRename: func() error {
		before = names(t, dir)
		return nil
	}}, func(w io.Writer) error {
		during = names(t, dir)
		_, err := io.WriteString(w, "payload")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(during, []string{"other"}) || !slices.Equal(before, []string{"other"}) {
		t.Fatalf("dir held %q while writing and %q before the link, want only [other]: a temporary name was created", during, before)
	}
	if got := content(t, dst); got != "payload" {
		t.Fatalf("content %q, want payload", got)
	}
	if got := mode(t, dst); got != 0o644 {
		t.Fatalf("mode %o, want 644", got)
	}
	crash := errors.New("crash")
	err = Write(filepath.Join(dir, "lost"), Options{NoReplace: true, BeforeRename: func() error { return crash }}, func(w io.Writer) error {
		_, err := io.WriteString(w, "never published")
		return err
	})
	if !errors.Is(err, crash) {
		t.Fatalf("err %v, want the injected crash", err)
	}
	if got := names(t, dir); !slices.Equal(got, []string{"obj", "other"}) {
		t.Fatalf("dir holds %q after a crash before the link, want [obj other]", got)
	}
}

// TestNoReplaceBothPaths: create-only semantics are the same on both
// paths: the first write wins, a second fails with fs.ErrExist and leaves
// the first's content, a failed write leaves nothing, and of concurrent
// create-only writers of one name exactly one succeeds with its whole
// content.
func TestNoReplaceBothPaths(t *testing.T) {
	bothPaths(t, func(t *testing.T) {
		dir := t.TempDir()
		dst := filepath.Join(dir, "obj")
		if err := WriteFile(dst, []byte("first"), Options{NoReplace: true, TempPattern: ".tmp-*"}); err != nil {
			t.Fatal(err)
		}
		err := WriteFile(dst, []byte("second"), Options{NoReplace: true, TempPattern: ".tmp-*"})
		if !errors.Is(err, fs.ErrExist) {
			t.Fatalf("second create-only write: err %v, want fs.ErrExist", err)
		}
		boom := errors.New("boom")
		err = Write(filepath.Join(dir, "failed"), Options{NoReplace: true}, func(w io.Writer) error {
			_, _ = io.WriteString(w, "partial")
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("err %v, want the writer's error", err)
		}
		if got := content(t, dst); got != "first" {
			t.Fatalf("content %q, want first", got)
		}
		if got := names(t, dir); !slices.Equal(got, []string{"obj"}) {
			t.Fatalf("dir holds %q, want only [obj]", got)
		}

		race := filepath.Join(dir, "race")
		payload := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, 32<<10) }
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Go(func() { errs[i] = WriteFile(race, payload(i), Options{NoReplace: true, NoDirSync: true}) })
		}
		wg.Wait()
		won := -1
		for i, err := range errs {
			switch {
			case err == nil && won >= 0:
				t.Fatalf("writers %d and %d both created %s", won, i, race)
			case err == nil:
				won = i
			case !errors.Is(err, fs.ErrExist):
				t.Fatalf("writer %d: %v, want success or fs.ErrExist", i, err)
			}
		}
		if won < 0 {
			t.Fatal("no writer created the object")
		}
		if got := content(t, race); got != string(payload(won)) {
			t.Fatalf("%s holds %d bytes starting %q, want writer %d's", race, len(got), got[:min(len(got), 8)], won)
		}
		if got := names(t, dir); !slices.Equal(got, []string{"obj", "race"}) {
			t.Fatalf("dir holds %q, want [obj race]", got)
		}
	})
}

// TestNoReplaceUnnamedSyncsDirectoryOnce: the unnamed path fsyncs dst's
// directory once after the link (SyncDir), and not at all with NoDirSync.
func TestNoReplaceUnnamedSyncsDirectoryOnce(t *testing.T) {
	dir := t.TempDir()
	var synced []string
	count := func(d string) error { synced = append(synced, d); return nil }
	if err := WriteFile(filepath.Join(dir, "a"), []byte("a"), Options{NoReplace: true, SyncDir: count}); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(filepath.Join(dir, "b"), []byte("b"), Options{NoReplace: true, NoDirSync: true, SyncDir: count}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(synced, []string{dir}) {
		t.Fatalf("directory fsyncs %q, want one of %s", synced, dir)
	}
}

// crashEnv names the directory the helper process of
// TestNoReplaceKilledBeforeLinkLeavesNothing writes into.
const crashEnv = "ATOMICFILE_CRASH_DIR"

// TestNoReplaceKilledBeforeLinkLeavesNothing: a process killed (SIGKILL)
// in the middle of a create-only write, after some bytes went into the
// temporary file, leaves nothing in the directory: no dst and no
// temporary name (with a named temporary file the name stays behind).
func TestNoReplaceKilledBeforeLinkLeavesNothing(t *testing.T) {
	if dir := os.Getenv(crashEnv); dir != "" {
		crashingWriter(dir) // never returns
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestNoReplaceKilledBeforeLinkLeavesNothing$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe() // the helper blocks reading it
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "writing" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("helper said %q (%v), want writing", line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if got := names(t, dir); len(got) != 0 {
		t.Fatalf("dir holds %q after the writer was killed before the link, want nothing", got)
	}
}

// crashingWriter starts a create-only write of dir/obj, writes 1 MiB into
// the temporary file, tells the parent, and blocks until it is killed.
func crashingWriter(dir string) {
	err := Write(filepath.Join(dir, "obj"), Options{NoReplace: true, TempPattern: ".tmp-*"}, func(w io.Writer) error {
		if _, err := w.Write(bytes.Repeat([]byte("x"), 1<<20)); err != nil {
			return err
		}
		fmt.Println("writing")
		_, _ = io.Copy(io.Discard, os.Stdin) // until SIGKILL
		return errors.New("stdin closed")
	})
	fmt.Fprintln(os.Stderr, "crashingWriter: not killed:", err)
	os.Exit(3)
}
