package bench

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Shapes are the values of the generated records' "shape" field; the
// matcher's rules pair them.
var Shapes = []string{"CIRCLE", "SQUARE", "TRIANGLE", "RECTANGLE", "HEXAGON"}

// valueBytes is the size the generated JSON values are padded to.
const valueBytes = 100

// Item is one generated input record: its value is the JSON object
//
//	{"id":17,"key":"k000042","shape":"CIRCLE","amount":512,"note":"xxxx"}
//
// padded by note to about 100 bytes, and its Kafka key is Key, so every
// record of one key lands in one partition and keeps its order.
type Item struct {
	ID     int64
	Key    string
	Shape  string
	Amount int
	// Time is the record's timestamp (ms since the epoch: the produce
	// time, or an event time, see eventTimed) and Partition its partition
	// (partitionOf the key), set when it is produced.
	Time      int64
	Partition int32
	// Nexmark, when set, makes the item a Nexmark event (the other fields
	// but ID, Time and Partition unused): its value is the event's JSON,
	// without a key.
	Nexmark *NexmarkEvent
	// avro, when set, makes the item's value Avro in the Confluent wire
	// format (avroRun.record); set by avroItems.
	avro *avroRun
}

// stamp sets the item's Time to now and its Partition among partitions.
func (it Item) stamp(partitions int) Item {
	it.Time, it.Partition = time.Now().UnixMilli(), partitionOf(it.Key, partitions)
	return it
}

// record returns the item's record for topic.
func (it Item) record(topic string) *kgo.Record {
	if a := it.avro; a != nil {
		it.avro = nil
		return a.record(it, topic)
	}
	if it.Nexmark != nil {
		return &kgo.Record{Topic: topic, Partition: it.Partition, Value: it.Nexmark.AppendJSON(make([]byte, 0, 256)), Timestamp: time.UnixMilli(it.Time)}
	}
	return &kgo.Record{Topic: topic, Partition: it.Partition, Key: []byte(it.Key), Value: it.Value(make([]byte, 0, valueBytes+8)), Timestamp: time.UnixMilli(it.Time)}
}

// partitionOf is the partition of key among n: FNV-1a of the key, as
// Kafka's default partitioner does with murmur2.
func partitionOf(key string, n int) int32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int32(int(h.Sum32()&0x7fffffff) % n)
}

// Value returns the item's JSON value, appended to buf.
func (it Item) Value(buf []byte) []byte {
	buf = append(buf, `{"id":`...)
	buf = strconv.AppendInt(buf, it.ID, 10)
	buf = append(buf, `,"key":"`...)
	buf = append(buf, it.Key...)
	buf = append(buf, `","shape":"`...)
	buf = append(buf, it.Shape...)
	buf = append(buf, `","amount":`...)
	buf = strconv.AppendInt(buf, int64(it.Amount), 10)
	buf = append(buf, `,"note":"`...)
	for n := valueBytes - len(buf) - 2; n > 0; n-- {
		buf = append(buf, 'x')
	}
	return append(buf, `"}`...)
}

// Generator produces a deterministic stream of items: keys uniform over
// Keys keys, or Zipf-distributed (key 0 the hottest) when zipf > 1; shapes
// uniform over Shapes; amounts uniform in [0, 1000). Two generators made
// with the same arguments produce the same stream. Not safe for concurrent
// use.
type Generator struct {
	rng   *rand.Rand
	zipf  *rand.Zipf
	keys  int
	next  int64
	names []string
}

// NewGenerator returns a generator over keys keys (>= 1); zipf is the Zipf
// exponent s (> 1), or 0 for uniform keys. It panics on any other zipf
// (math/rand's Zipf needs s > 1; a value in (0, 1] used to fall back to
// uniform keys silently): callers check it first, as Run does.
func NewGenerator(keys int, zipf float64) *Generator {
	if zipf != 0 && !(zipf > 1) {
		panic(fmt.Sprintf("bench: Zipf exponent %v: want > 1, or 0 for uniform keys", zipf))
	}
	rng := rand.New(rand.NewPCG(12, 34))
	g := &Generator{rng: rng, keys: keys, names: make([]string, keys)}
	for i := range g.names {
		g.names[i] = fmt.Sprintf("k%06d", i)
	}
	if zipf > 1 && keys > 1 {
		g.zipf = rand.NewZipf(rng, zipf, 1, uint64(keys-1))
	}
	return g
}

// Next returns the next item.
func (g *Generator) Next() Item {
	var k int
	if g.zipf != nil {
		k = int(g.zipf.Uint64())
	} else {
		k = g.rng.IntN(g.keys)
	}
	g.next++
	return Item{ID: g.next, Key: g.names[k], Shape: Shapes[g.rng.IntN(len(Shapes))], Amount: g.rng.IntN(1000)}
}

// eventTimed is a Generator's items with event times (a scenario's
// EventRatePerKey): until live, the item of id i (ids count from 1) has
// time base + (i-1)*1000/rate ms, rate items per second, so the times
// depend on the id alone; after live, its produce time. Times never
// decrease.
type eventTimed struct {
	g      *Generator
	base   int64 // ms, the first item's time
	rate   int64 // items per second of event time
	isLive bool
	last   int64
}

// newEventTimed returns the items of g at rate items per second of event
// time, timed so that the last of the first records is at now: the
// throughput phase reads a backlog from the past, and the latency
// phase's produce times come after every event time.
func newEventTimed(g *Generator, records int, rate int64, now time.Time) *eventTimed {
	return &eventTimed{g: g, rate: rate, base: now.UnixMilli() - int64(max(records-1, 0))*1000/rate}
}

func (e *eventTimed) nextItem(partitions int) Item {
	it := e.g.nextItem(partitions)
	if !e.isLive {
		it.Time = e.base + (it.ID-1)*1000/e.rate
	}
	it.Time = max(it.Time, e.last)
	e.last = it.Time
	return it
}

// live switches to the produce time: the latency phase measures each
// output from its records' produce time.
func (e *eventTimed) live(float64) { e.isLive = true }

// itemSource is what a run produces: the items of a Generator, stamped
// with the produce time, or a nexmarkSource's events.
type itemSource interface {
	// nextItem returns the next item with its Time and its Partition among
	// partitions set.
	nextItem(partitions int) Item
}

func (g *Generator) nextItem(partitions int) Item { return g.Next().stamp(partitions) }

// load produces n items of g to topic, the model m counting the outputs
// they should cause, and returns that count. Records carry the item's
// time as timestamp (the produce time, or an eventTimed's or Nexmark
// event's time) and go to the item's partition.
func load(ctx context.Context, cl *kgo.Client, topic string, partitions int, g itemSource, m Model, n int) (int64, error) {
	var expected int64
	errs := make(chan error, 1)
	for range n {
		it := g.nextItem(partitions)
		expected += int64(m.Outputs(it))
		cl.Produce(ctx, it.record(topic), func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return 0, fmt.Errorf("bench: load %s: %w", topic, err)
	}
	select {
	case err := <-errs:
		return 0, fmt.Errorf("bench: load %s: %w", topic, err)
	default:
	}
	return expected, nil
}
