package embedded

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func start(t *testing.T, dir string, opts ...Option) *Broker {
	t.Helper()
	b, err := Start(context.Background(), discard(), "127.0.0.1:0", dir, 2, []string{"t"}, opts...)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(b.Close)
	return b
}

// produceCommitted writes values to topic t in one committed transaction.
func produceCommitted(t *testing.T, b *Broker, values ...string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.TransactionalID("tx"), kgo.DefaultProduceTopic("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, v := range values {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
}

// readCommitted returns the sorted values of topic t a read_committed
// reader sees, reading until want values arrived or 10 s passed.
func readCommitted(t *testing.T, b *Broker, want int) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.ConsumeTopics("t"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []string
	for len(got) < want && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	slices.Sort(got)
	return got
}

// listing returns every file under dir (but the lock file) with its size.
func listing(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if !fi.IsDir() && fi.Name() != LockFile {
			rel, _ := filepath.Rel(dir, path)
			out = append(out, rel+" "+strconv.FormatInt(fi.Size(), 10))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func marked(t *testing.T, dir string) bool {
	t.Helper()
	ok, err := exists(filepath.Join(dir, CleanShutdownFile))
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestCleanCloseMarksDataDir: while the broker runs its data dir has no
// clean-shutdown marker and the lock file names this process; Close writes
// the marker; a restart opens the dir (the committed records are all there)
// and removes the marker again.
func TestCleanCloseMarksDataDir(t *testing.T) {
	dir := t.TempDir()
	b := start(t, dir)
	if marked(t, dir) {
		t.Fatal("a running broker's data dir holds the clean-shutdown marker")
	}
	pid, err := os.ReadFile(filepath.Join(dir, LockFile))
	if err != nil || strings.TrimSpace(string(pid)) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("lock file = %q, %v; want this process's id %d", pid, err, os.Getpid())
	}
	produceCommitted(t, b, "a", "b", "c")
	b.Close()
	if !marked(t, dir) {
		t.Fatal("no clean-shutdown marker after Close")
	}

	b = start(t, dir)
	if marked(t, dir) {
		t.Fatal("the clean-shutdown marker is still there after a restart")
	}
	if got := readCommitted(t, b, 3); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("read_committed after a clean restart = %q, want [a b c]", got)
	}
}

// TestRefusesUncleanDataDir: a data dir a broker used, without the
// clean-shutdown marker (what kill -9 leaves), is refused with an
// *UncleanDataDirError naming the dir and both ways on, and left as it
// was; ForceUnclean opens it; its Close marks it clean again.
func TestRefusesUncleanDataDir(t *testing.T) {
	dir := t.TempDir()
	b := start(t, dir)
	produceCommitted(t, b, "a", "b")
	b.Close()
	if err := os.Remove(filepath.Join(dir, CleanShutdownFile)); err != nil {
		t.Fatal(err)
	}
	before := listing(t, dir)

	_, err := Start(context.Background(), discard(), "127.0.0.1:0", dir, 2, []string{"t"})
	var unclean *UncleanDataDirError
	if !errors.As(err, &unclean) {
		t.Fatalf("Start on an unclean data dir: err = %v, want *UncleanDataDirError", err)
	}
	abs, _ := filepath.Abs(dir)
	if unclean.Dir != abs {
		t.Errorf("UncleanDataDirError.Dir = %q, want %q", unclean.Dir, abs)
	}
	for _, want := range []string{"data dir " + abs + " was not closed cleanly", "kill -9", "cannot recover transactions exactly",
		"remove " + abs + " to start with an empty broker", "kstreamd broker --config FILE --force-unclean"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if after := listing(t, dir); !slices.Equal(after, before) {
		t.Errorf("the refused start changed the data dir:\nbefore %q\nafter  %q", before, after)
	}

	b = start(t, dir, ForceUnclean())
	if got := readCommitted(t, b, 2); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("read_committed after --force-unclean = %q, want [a b]", got)
	}
	b.Close()
	if !marked(t, dir) {
		t.Fatal("no clean-shutdown marker after the forced broker's Close")
	}
	start(t, dir).Close()
}

// TestSecondBrokerOnDataDirRefused: while one broker holds a data dir, a
// second Start on it fails with *DataDirInUseError naming the holder's
// process id, and the first keeps working; once it closed, the second
// starts.
func TestSecondBrokerOnDataDirRefused(t *testing.T) {
	dir := t.TempDir()
	first := start(t, dir)
	_, err := Start(context.Background(), discard(), "127.0.0.1:0", dir, 2, []string{"t"})
	var inUse *DataDirInUseError
	if !errors.As(err, &inUse) {
		t.Fatalf("second Start on a data dir in use: err = %v, want *DataDirInUseError", err)
	}
	if inUse.PID != os.Getpid() {
		t.Errorf("DataDirInUseError.PID = %d, want %d", inUse.PID, os.Getpid())
	}
	if !strings.Contains(err.Error(), "is in use by another broker (pid "+strconv.Itoa(os.Getpid())+")") {
		t.Errorf("refusal %q does not name the holder", err)
	}
	produceCommitted(t, first, "x")
	if got := readCommitted(t, first, 1); !slices.Equal(got, []string{"x"}) {
		t.Fatalf("the first broker after the refused second: read %q, want [x]", got)
	}
	first.Close()
	start(t, dir).Close()
}

// TestListenFailureKeepsDataDirClean: a start that fails because the
// address is taken (before kfake reads the dir) leaves a clean dir clean.
func TestListenFailureKeepsDataDirClean(t *testing.T) {
	dir := t.TempDir()
	start(t, dir).Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := Start(context.Background(), discard(), ln.Addr().String(), dir, 2, []string{"t"}); err == nil {
		t.Fatal("Start on a taken address succeeded")
	}
	if !marked(t, dir) {
		t.Fatal("a start that could not listen left the clean data dir unmarked")
	}
	start(t, dir).Close()
}

// TestPersistErrorLeavesDataDirUnclean: when kfake logged that it could
// not persist its state, Close does not mark the dir clean, so the next
// start refuses it.
func TestPersistErrorLeavesDataDirUnclean(t *testing.T) {
	dir := t.TempDir()
	b := start(t, dir)
	kfakeLogger{discard(), b.persist}.Logf(kfake.LogLevelWarn, "persist batch: %s", "a warning") // below error: not kept
	if msg := b.persist.first(); msg != "" {
		t.Fatalf("a non-error log was kept as a persist error: %q", msg)
	}
	kfakeLogger{discard(), b.persist}.Logf(kfake.LogLevelError, "persist to disk: %v", errors.New("disk full"))
	b.Close()
	if marked(t, dir) {
		t.Fatal("the data dir was marked clean after kfake failed to persist")
	}
	var unclean *UncleanDataDirError
	if _, err := Start(context.Background(), discard(), "127.0.0.1:0", dir, 2, nil); !errors.As(err, &unclean) {
		t.Fatalf("Start after a failed save: err = %v, want *UncleanDataDirError", err)
	}
}

// TestLegacyDataDirOpens: a data dir written by a kstreamd from before the
// clean-shutdown marker has kfake's files but neither the marker nor the
// lock file. An upgrade must not refuse it (how it stopped cannot be told):
// it opens with one warning naming the dir, its records are there, and from
// then on it is guarded like any other (marked clean at Close, refused
// after an unclean stop).
func TestLegacyDataDirOpens(t *testing.T) {
	dir := t.TempDir()
	b := start(t, dir)
	produceCommitted(t, b, "a", "b")
	b.Close()
	for _, f := range []string{CleanShutdownFile, LockFile} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}

	var logs strings.Builder
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	b, err := Start(context.Background(), logger, "127.0.0.1:0", dir, 2, []string{"t"})
	if err != nil {
		t.Fatalf("Start on a data dir from before the marker: %v", err)
	}
	if got := readCommitted(t, b, 2); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("read_committed = %q, want [a b]", got)
	}
	b.Close()
	abs, _ := filepath.Abs(dir)
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), "before the clean-shutdown marker") || !strings.Contains(logs.String(), abs) {
		t.Errorf("want one warning naming %s and the marker, got %d lines:\n%s", abs, n, logs.String())
	}
	if !marked(t, dir) {
		t.Fatal("no clean-shutdown marker after Close")
	}
	if ok, err := exists(filepath.Join(dir, LockFile)); err != nil || !ok {
		t.Fatalf("lock file after Close: %v, %v", ok, err)
	}
	// Guarded from here on: without the marker it is refused.
	if err := os.Remove(filepath.Join(dir, CleanShutdownFile)); err != nil {
		t.Fatal(err)
	}
	var unclean *UncleanDataDirError
	if _, err := Start(context.Background(), discard(), "127.0.0.1:0", dir, 2, []string{"t"}); !errors.As(err, &unclean) {
		t.Fatalf("Start after an unclean stop: err = %v, want *UncleanDataDirError", err)
	}
}
