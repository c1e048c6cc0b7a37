// Package demo is kstreamd's built-in demo producer: it writes the
// reference job's shape-pair rules and a steady stream of random coloured
// items (kind "shapes"), or the rules job's fraud rules and a stream of
// random payments (kind "transactions", configs/rules.yaml), to Kafka, and watches the job's output topics, logging a sample of
// what arrives, so a newcomer sees matches within seconds on a fresh machine
// with no other tool.
package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Rules are the rules the demo writes at start (Kafka key = rule name).
var Rules = []Rule{
	{Name: "R1", First: "RECTANGLE", Second: "TRIANGLE"},
	{Name: "R2", First: "CIRCLE", Second: "CIRCLE"},
}

// Rule is the JSON value of a rules-topic record.
type Rule struct {
	Name   string `json:"name"`
	First  string `json:"first"`
	Second string `json:"second"`
}

// Item is the JSON value of an items-topic record (Kafka key = Color).
type Item struct {
	ID    int64  `json:"id"`
	Color string `json:"color"`
	Shape string `json:"shape"`
}

// FraudRules are the rules the demo writes with kind "transactions"
// (Kafka key = id): the rules job's examples, tuned so that alerts show
// within seconds at 20 payments per second.
var FraudRules = []string{
	`{"id":"big-spender","filter":"method == 'card'","group_by":["payee_id","currency"],"aggregate":{"fn":"sum","of":"amount"},"window":"1m","alert_when":"> 1500","emit":{"severity":"high"}}`,
	`{"id":"busy-payee","group_by":["payee_id"],"aggregate":{"fn":"count"},"window":"30s","alert_when":">= 8"}`,
	`{"id":"many-cards","group_by":["payee_id"],"aggregate":{"fn":"count_distinct","of":"card"},"window":"2m","alert_when":"> 6"}`,
	`{"id":"large-wire","filter":"method == 'wire'","group_by":["payee_id"],"aggregate":{"fn":"max","of":"amount"},"window":"1m","alert_when":"> 950"}`,
}

// Transaction is the JSON value of a transactions-topic record (Kafka key
// = PayeeID).
type Transaction struct {
	ID       int64  `json:"id"`
	PayeeID  string `json:"payee_id"`
	Currency string `json:"currency"`
	Method   string `json:"method"`
	Card     string `json:"card"`
	Amount   int64  `json:"amount"`
}

// NewTransaction returns a random payment: 20 payees, two currencies,
// cards and wires, amounts 1 to 1000.
func NewTransaction(rng *rand.Rand, id int64) Transaction {
	return Transaction{
		ID: id, PayeeID: fmt.Sprintf("payee-%02d", rng.IntN(20)), Currency: []string{"EUR", "USD"}[rng.IntN(2)],
		Method: []string{"card", "card", "card", "wire"}[rng.IntN(4)], Card: fmt.Sprintf("card-%03d", rng.IntN(100)),
		Amount: 1 + rng.Int64N(1000),
	}
}

var (
	colors = []string{"red", "blue", "green", "yellow"}
	shapes = []string{"RECTANGLE", "TRIANGLE", "CIRCLE"}
)

// Config configures Run.
type Config struct {
	// ClientOpts are the job's franz-go options (seed brokers, client id).
	ClientOpts []kgo.Opt
	// ItemsTopic and RulesTopic receive the items and the rules.
	ItemsTopic, RulesTopic string
	// ItemsPerSecond is the item rate; > 0.
	ItemsPerSecond float64
	// Kind is "shapes" ("" too) or "transactions".
	Kind string
	// WatchTopics are read (from their end at start) and sampled in the log.
	WatchTopics []string
	// Logger is scoped by the caller.
	Logger *slog.Logger
}

// Run writes the rules, then items at the configured rate, and logs at most
// one output record per 2 s with the running count, until ctx ends. It
// returns nil when ctx ends and an error only if a client cannot be created.
// Produce failures are logged and retried by the next item (this is a demo).
func Run(ctx context.Context, cfg Config) error {
	prod, err := kgo.NewClient(cfg.ClientOpts...)
	if err != nil {
		return fmt.Errorf("demo: producer: %w", err)
	}
	defer prod.Close()
	type keyed struct{ key, value []byte }
	var rules []keyed
	if cfg.Kind == "transactions" {
		for _, r := range FraudRules {
			var id struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal([]byte(r), &id)
			rules = append(rules, keyed{[]byte(id.ID), []byte(r)})
		}
	} else {
		for _, r := range Rules {
			v, _ := json.Marshal(r)
			rules = append(rules, keyed{[]byte(r.Name), v})
		}
	}
	for _, r := range rules {
		if err := prod.ProduceSync(ctx, &kgo.Record{Topic: cfg.RulesTopic, Key: r.key, Value: r.value}).FirstErr(); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			cfg.Logger.Warn("demo: writing rule failed", "topic", cfg.RulesTopic, "err", err)
		}
	}
	cfg.Logger.Info("demo: rules written", "topic", cfg.RulesTopic, "rules", len(rules))
	done := make(chan struct{})
	if len(cfg.WatchTopics) > 0 {
		go func() { defer close(done); watch(ctx, cfg) }()
	} else {
		close(done)
	}
	defer func() { <-done }()

	// Go on from the highest id already on the topic: a restarted demo
	// writing items 1, 2, ... again would make the job's output look
	// duplicated by eye.
	first := int64(1)
	if last, err := LastItemID(ctx, cfg.ClientOpts, cfg.ItemsTopic); err != nil {
		cfg.Logger.Warn("demo: could not read the last item id; ids start at 1", "topic", cfg.ItemsTopic, "err", err)
	} else {
		first = last + 1
	}
	cfg.Logger.Info("demo: writing items", "topic", cfg.ItemsTopic, "first_id", first, "per_second", cfg.ItemsPerSecond)

	tick := time.NewTicker(time.Duration(float64(time.Second) / cfg.ItemsPerSecond))
	defer tick.Stop()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for id := first; ; id++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		var key, v []byte
		if cfg.Kind == "transactions" {
			tx := NewTransaction(rng, id)
			key = []byte(tx.PayeeID)
			v, _ = json.Marshal(tx)
		} else {
			it := Item{ID: id, Color: colors[rng.IntN(len(colors))], Shape: shapes[rng.IntN(len(shapes))]}
			key = []byte(it.Color)
			v, _ = json.Marshal(it)
		}
		prod.Produce(ctx, &kgo.Record{Topic: cfg.ItemsTopic, Key: key, Value: v}, func(_ *kgo.Record, err error) {
			if err != nil && ctx.Err() == nil {
				cfg.Logger.Warn("demo: writing item failed", "topic", cfg.ItemsTopic, "err", err)
			}
		})
	}
}

// lastRecords is how many records from each partition's end LastItemID
// reads: enough to step over a few bad records or transaction markers.
const lastRecords = 16

// LastItemID returns the highest "id" among the last records of every
// partition of topic (0 when the topic is empty or holds no item with an
// id), read with the client options opts within 10 s. Records that are not
// JSON items are ignored.
func LastItemID(ctx context.Context, opts []kgo.Opt, topic string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	admin, err := kgo.NewClient(opts...)
	if err != nil {
		return 0, err
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return 0, err
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, err
	}
	from := map[int32]kgo.Offset{}
	want := map[int32]int64{} // partition -> the last offset to read
	ends.Each(func(o kadm.ListedOffset) {
		start, _ := starts.Lookup(o.Topic, o.Partition)
		if o.Offset > start.Offset {
			from[o.Partition] = kgo.NewOffset().At(max(start.Offset, o.Offset-lastRecords))
			want[o.Partition] = o.Offset - 1
		}
	})
	if len(from) == 0 {
		return 0, nil
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, opts...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}))...)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	var last int64
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			// The last offsets may be transaction markers, which are never
			// delivered: what was read is the answer.
			break
		}
		fs.EachRecord(func(r *kgo.Record) {
			var it Item
			if json.Unmarshal(r.Value, &it) == nil && it.ID > last {
				last = it.ID
			}
			if r.Offset >= want[r.Partition] {
				delete(want, r.Partition)
			}
		})
	}
	return last, nil
}

func watch(ctx context.Context, cfg Config) {
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, cfg.ClientOpts...),
		kgo.ConsumeTopics(cfg.WatchTopics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		cfg.Logger.Warn("demo: watcher not started", "err", err)
		return
	}
	defer cl.Close()
	var seen int64
	var last time.Time
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			seen++
			if time.Since(last) >= 2*time.Second {
				last = time.Now()
				cfg.Logger.Info("demo: output", "topic", r.Topic, "records_seen", seen, "sample", string(r.Value))
			}
		})
	}
}
