// Package embedded runs kstreamd's in-process development broker: franz-go's
// kfake, which speaks the real Kafka wire protocol, listening on a configured
// address with its log persisted in a data directory, so topics survive a
// restart. It is a development convenience: production points
// kafka.brokers at a real Kafka cluster.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Broker is a running embedded broker.
type Broker struct {
	cluster *kfake.Cluster
	logger  *slog.Logger
}

// Start starts a one-node broker listening on address (host:port) with its
// log under dataDir (created if missing), and creates each of topics that
// does not exist yet with partitions partitions. It fails if the address is
// taken or the data directory cannot be used.
func Start(ctx context.Context, logger *slog.Logger, address, dataDir string, partitions int, topics []string) (*Broker, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("embedded: address %q: %w", address, err)
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, fmt.Errorf("embedded: data dir: %w", err)
	}
	var portN int
	if _, err := fmt.Sscan(port, &portN); err != nil {
		return nil, fmt.Errorf("embedded: address %q: bad port", address)
	}
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.Ports(portN),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			return net.Listen(network, net.JoinHostPort(host, port))
		}),
		kfake.DataDir(dataDir),
		kfake.WithLogger(kfakeLogger{logger}),
	)
	if err != nil {
		return nil, fmt.Errorf("embedded: start broker on %s: %w", address, err)
	}
	b := &Broker{cluster: c, logger: logger}
	if err := b.createTopics(ctx, partitions, topics); err != nil {
		c.Close()
		return nil, err
	}
	logger.Info("embedded kafka broker started", "address", c.ListenAddrs()[0], "data_dir", dataDir, "topics", topics)
	return b, nil
}

// Addrs returns the host:port addresses the broker listens on.
func (b *Broker) Addrs() []string { return b.cluster.ListenAddrs() }

// Close stops the broker, persisting its state.
func (b *Broker) Close() { b.cluster.Close() }

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
// info level logs every request).
type kfakeLogger struct{ l *slog.Logger }

func (k kfakeLogger) Logf(level kfake.LogLevel, format string, args ...any) {
	switch level {
	case kfake.LogLevelError:
		k.l.Error("embedded broker: " + fmt.Sprintf(format, args...))
	case kfake.LogLevelWarn:
		k.l.Debug("embedded broker: " + fmt.Sprintf(format, args...))
	}
}
