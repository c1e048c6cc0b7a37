// Package embedded runs kstreamd's in-process development broker: franz-go's
// kfake, which speaks the real Kafka wire protocol, listening on a configured
// address with its log persisted in a data directory, so topics survive a
// restart. It is a development convenience: production points
// kafka.brokers at a real Kafka cluster.
//
// # Unclean stops are refused, not recovered
//
// kfake writes every batch to its segment files at once (kill -9 loses no
// byte written), but keeps the transaction coordinator's state (which
// partitions an open transaction wrote, its staged offsets) in memory and
// saves it only at a clean Close. Reopened after an unclean stop (kill -9, a
// crash, a power loss) it replays the segments and aborts, in memory only
// (no ABORT marker is written), every transaction without an end marker,
// and bumps those producers' epochs. A kstreamd sink pre-commits a
// transaction at each checkpoint and commits it once the checkpoint
// completed (Flink's TwoPhaseCommitSinkFunction), so an unclean stop
// between the two loses committed output: the job's commit is refused, and
// not always noticed (a later COMMIT marker of the same producer id can pass
// for the lost one's). A kill between two partitions' markers of one EndTxn
// also leaves a transaction committed in some partitions and aborted in
// others. None of it can be repaired from outside kfake, with or without
// kfake.SyncWrites: what is lost is the coordinator's state, not bytes.
//
// So Start refuses a data directory that a broker used and that was not
// closed cleanly (*UncleanDataDirError), as Kafka tells a clean from an
// unclean shutdown by its .kafka_cleanshutdown file: Close fsyncs every file
// of the directory, then writes CleanShutdownFile (fsynced); Start removes it
// (the removal fsynced) before kfake opens the directory. ForceUnclean opens
// such a directory anyway. LockFile, flocked while a broker runs, keeps a
// second broker off the same directory (*DataDirInUseError).
package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Broker is a running embedded broker.
type Broker struct {
	cluster *kfake.Cluster
	dir     *dataDir
	logger  *slog.Logger
	persist *persistErrors
	closed  bool
}

// Option is an optional setting of Start.
type Option func(*options)

type options struct{ forceUnclean bool }

// ForceUnclean opens a data directory that was not closed cleanly instead
// of refusing it (*UncleanDataDirError), with a warning: kfake aborts the
// transactions that were open at the unclean stop, so committed output of
// an exactly-once job can be missing, not always with an error (see the
// package comment). At the next clean Close the directory is marked clean.
func ForceUnclean() Option { return func(o *options) { o.forceUnclean = true } }

// Start starts a one-node broker listening on address (host:port) with its
// log under dataDir (created if missing), and creates each of topics that
// does not exist yet with partitions partitions. It fails if the address is
// taken or the data directory cannot be used: another broker holds it
// (*DataDirInUseError), or it was not closed cleanly (*UncleanDataDirError,
// unless ForceUnclean). Close stops the broker and marks the directory
// clean.
func Start(ctx context.Context, logger *slog.Logger, address, dataDir string, partitions int, topics []string, opts ...Option) (*Broker, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("embedded: address %q: %w", address, err)
	}
	var portN int
	if _, err := fmt.Sscan(port, &portN); err != nil {
		return nil, fmt.Errorf("embedded: address %q: bad port", address)
	}
	dir, unclean, legacy, err := openDataDir(dataDir, o.forceUnclean)
	if err != nil {
		return nil, err
	}
	if legacy {
		logger.Warn("opening a data dir last used by a kstreamd from before the clean-shutdown marker: whether it was stopped cleanly cannot be told; "+
			"if its last stop was a kill -9 or a crash, committed output of an exactly-once job may be missing", "data_dir", dir.path)
	}
	if unclean {
		logger.Warn("opening a data dir that was not closed cleanly (--force-unclean): the transactions open at the unclean stop are aborted, "+
			"so committed output of an exactly-once job may be missing, not always with an error", "data_dir", dir.path)
	}
	persist := &persistErrors{}
	listened := false
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.Ports(portN),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			ln, err := net.Listen(network, net.JoinHostPort(host, port))
			listened = err == nil
			return ln, err
		}),
		kfake.DataDir(dir.path),
		kfake.WithLogger(kfakeLogger{logger, persist}),
	)
	if err != nil {
		// kfake listens before it reads the directory: when listening
		// failed the directory is as it was, clean if it was.
		if !listened && !unclean {
			if merr := dir.markClean(); merr != nil {
				logger.Error("embedded broker: could not mark the untouched data dir clean again", "err", merr)
			}
		}
		dir.release()
		return nil, fmt.Errorf("embedded: start broker on %s: %w", address, err)
	}
	b := &Broker{cluster: c, dir: dir, logger: logger, persist: persist}
	if err := b.createTopics(ctx, partitions, topics); err != nil {
		b.Close()
		return nil, err
	}
	logger.Info("embedded kafka broker started", "address", c.ListenAddrs()[0], "data_dir", dir.path, "topics", topics)
	return b, nil
}

// Addrs returns the host:port addresses the broker listens on.
func (b *Broker) Addrs() []string { return b.cluster.ListenAddrs() }

// Close stops the broker, persisting its state, fsyncs the data directory,
// marks it clean and releases its lock. If kfake reported a failed save
// (at Close or earlier, a control batch it could not write), the directory
// is left unclean, so the next Start refuses it, and the reason is logged.
// Close is idempotent.
func (b *Broker) Close() {
	if b.closed {
		return
	}
	b.closed = true
	b.cluster.Close()
	defer b.dir.release()
	if msg := b.persist.first(); msg != "" {
		b.logger.Error("embedded broker: the data dir is not marked clean: kfake could not persist its state", "data_dir", b.dir.path, "kfake_error", msg)
		return
	}
	if err := b.dir.markClean(); err != nil {
		b.logger.Error("embedded broker: the data dir is not marked clean", "err", err)
	}
}

func (b *Broker) createTopics(ctx context.Context, partitions int, topics []string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.cluster.ListenAddrs()...))
	if err != nil {
		return fmt.Errorf("embedded: admin client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	resp, err := adm.CreateTopics(ctx, int32(partitions), 1, nil, topics...)
	if err != nil {
		return fmt.Errorf("embedded: create topics: %w", err)
	}
	for _, t := range resp.Sorted() {
		if t.Err != nil && !errors.Is(t.Err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("embedded: create topic %q: %w", t.Topic, t.Err)
		}
	}
	return nil
}

// kfakeLogger sends kfake's logs to slog: errors as errors, warnings at
// debug (kfake warns about ordinary slow requests), nothing below (kfake's
// info level logs every request). Errors about persisting (kfake's "persist
// to disk", "save session state", "failed to persist control batch") are
// also kept in persist: the directory must not be marked clean after them.
type kfakeLogger struct {
	l       *slog.Logger
	persist *persistErrors
}

func (k kfakeLogger) Logf(level kfake.LogLevel, format string, args ...any) {
	switch level {
	case kfake.LogLevelError:
		msg := fmt.Sprintf(format, args...)
		if strings.Contains(msg, "persist") || strings.Contains(msg, "save") {
			k.persist.add(msg)
		}
		k.l.Error("embedded broker: " + msg)
	case kfake.LogLevelWarn:
		k.l.Debug("embedded broker: " + fmt.Sprintf(format, args...))
	}
}

// persistErrors keeps the first persisting error kfake logged.
type persistErrors struct {
	mu  sync.Mutex
	msg string
}

func (p *persistErrors) add(msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.msg == "" {
		p.msg = msg
	}
}

func (p *persistErrors) first() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.msg
}
