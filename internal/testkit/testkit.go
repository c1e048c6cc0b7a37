// Package testkit holds helpers shared by kstreamd's tests: free loopback
// ports, scraping a /metrics endpoint, polling for a condition, reading a
// Kafka topic to its end, and a log buffer safe for concurrent writers. Only
// tests import it.
package testkit

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// FreeAddr returns a 127.0.0.1:port address that was free a moment ago,
// for a listener the test starts later (a daemon's broker or metrics). The
// port is drawn at random below the kernel's ephemeral range (32768-60999
// on Linux), where the ports of bind to port 0 (kfake's listeners) and of
// outgoing connections come from, so the kernel gives it to no other
// socket before the test listens on it; and a test process hands out each
// port once, so tests running in parallel get different addresses. Where
// the ephemeral range starts too low for that, the kernel picks the port.
func FreeAddr(t testing.TB) string {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	if lo, hi := freePortRange(); hi > lo {
		for range 1000 {
			port := lo + rand.IntN(hi-lo)
			if handedOut[port] {
				continue
			}
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			if err != nil {
				continue
			}
			ln.Close()
			handedOut[port] = true
			return ln.Addr().String()
		}
	}
	for range 1000 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
		if port := ln.Addr().(*net.TCPAddr).Port; !handedOut[port] {
			handedOut[port] = true
			return ln.Addr().String()
		}
	}
	t.Fatal("FreeAddr: no free port")
	return ""
}

var (
	portsMu   sync.Mutex
	handedOut = map[int]bool{} // ports FreeAddr returned in this process
)

// freePortRange is the range [lo, hi) FreeAddr draws from: 20000 (above
// the usual fixed ports of services) up to the start of the kernel's
// ephemeral port range.
func freePortRange() (lo, hi int) {
	lo, hi = 20000, 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return lo, hi
	}
	if start, err := strconv.Atoi(f[0]); err == nil {
		hi = min(hi, start)
	}
	return lo, hi
}

// Scrape returns the sum of every sample of metric on the /metrics page at
// url whose labels include every pair of match; 0 when there is none. It
// returns an error when the page cannot be read or parsed.
func Scrape(url, metric string, match map[string]string) (float64, error) {
	sum, _, err := ScrapeSeries(url, metric, match)
	return sum, err
}

// ScrapeSeries is Scrape that also returns how many series matched, so a
// caller can tell a gauge at 0 from one not registered yet.
func ScrapeSeries(url, metric string, match map[string]string) (sum float64, series int, err error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, 0, err
	}
	fam, ok := fams[metric]
	if !ok {
		return 0, 0, nil
	}
	for _, m := range fam.GetMetric() {
		labels := map[string]string{}
		for _, lp := range m.GetLabel() {
			labels[lp.GetName()] = lp.GetValue()
		}
		ok := true
		for k, v := range match {
			if labels[k] != v {
				ok = false
			}
		}
		if !ok {
			continue
		}
		series++
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Untyped != nil:
			sum += m.Untyped.GetValue()
		}
	}
	return sum, series, nil
}

// WaitMetric polls url until the sum Scrape returns equals want, failing the
// test after timeout with the last value seen.
func WaitMetric(t testing.TB, timeout time.Duration, url, metric string, match map[string]string, want float64) {
	t.Helper()
	var last float64
	var lastErr error
	ok := Poll(timeout, func() bool {
		last, lastErr = Scrape(url, metric, match)
		return lastErr == nil && last == want
	})
	if !ok {
		t.Fatalf("metric %s%v = %v (err %v), want %v after %v", metric, match, last, lastErr, want, timeout)
	}
}

// Poll calls cond every 20 ms until it returns true (Poll returns true) or
// timeout passes (Poll returns false).
func Poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ReadTopic reads every committed record of topic, from the start to the end
// offsets it has now (read_committed), and returns them in partition then
// offset order. It fails the test after timeout.
func ReadTopic(t testing.TB, brokers []string, topic string, timeout time.Duration) []*kgo.Record {
	t.Helper()
	return ReadTopicWith(t, []kgo.Opt{kgo.SeedBrokers(brokers...)}, kgo.ReadCommitted(), topic, timeout)
}

// WithoutMarkers returns the data records of recs, records of a
// cluster-mode repartition topic, in order: markers (header
// "kstreamd-marker", runtime.MarkerHeader) are left out, and an exchange
// batch (that header's value "batch", runtime.ExchangeBatchMarker) is
// replaced by its records as a repartition source reads them (the batch's
// topic, partition and offset, each record's own key, value, headers and
// timestamp, else the batch's). A malformed batch panics: the tests read
// what kstreamd wrote.
func WithoutMarkers(recs []*kgo.Record) []*kgo.Record {
	var out []*kgo.Record
	for _, r := range recs {
		i := slices.IndexFunc(r.Headers, func(h kgo.RecordHeader) bool { return h.Key == "kstreamd-marker" })
		switch {
		case i < 0:
			out = append(out, r)
		case string(r.Headers[i].Value) == "batch":
			out = append(out, exchangeRecords(r)...)
		}
	}
	return out
}

// exchangeRecords returns the records of exchange batch r, decoded from
// the layout docs/scale-out.md specifies ("The exchange batch format"),
// independently of runtime.ExchangeBatchReader (testkit imports no
// kstreamd package), so the tests that read repartition topics also check
// the written bytes against the documented format.
func exchangeRecords(r *kgo.Record) []*kgo.Record {
	b := r.Value
	if len(b) == 0 || b[0] != 1 && b[0] != 2 {
		panic(fmt.Sprintf("exchange batch at %s/%d@%d: version byte %v", r.Topic, r.Partition, r.Offset, b[:min(len(b), 1)]))
	}
	b = b[1:]
	uvarint := func() uint64 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			panic(fmt.Sprintf("exchange batch at %s/%d@%d: bad uvarint", r.Topic, r.Partition, r.Offset))
		}
		b = b[n:]
		return v
	}
	take := func(n uint64) []byte {
		out := b[:n:n]
		b = b[n:]
		return out
	}
	var out []*kgo.Record
	for len(b) > 0 {
		flags := b[0]
		b = b[1:]
		in := &kgo.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp,
			Attrs: r.Attrs, ProducerID: r.ProducerID, ProducerEpoch: r.ProducerEpoch, LeaderEpoch: r.LeaderEpoch}
		if flags&4 != 0 {
			ms, n := binary.Varint(b)
			if n <= 0 {
				panic(fmt.Sprintf("exchange batch at %s/%d@%d: bad varint", r.Topic, r.Partition, r.Offset))
			}
			b = b[n:]
			in.Timestamp = time.UnixMilli(ms)
		}
		if flags&1 != 0 {
			in.Key = take(uvarint())
		}
		if flags&2 != 0 {
			in.Value = take(uvarint())
		}
		for range uvarint() {
			h := kgo.RecordHeader{Key: string(take(uvarint()))}
			if n := uvarint(); n > 0 {
				h.Value = take(n - 1)
			}
			in.Headers = append(in.Headers, h)
		}
		if flags&8 != 0 { // version 2: the change kind in bits 4-5, bit 6 the upsert mode header
			kind := []string{"+I", "-U", "+U", "-D"}[flags>>4&3]
			in.Headers = append(in.Headers, kgo.RecordHeader{Key: "kstreamd-change", Value: []byte(kind)})
			if flags&64 != 0 {
				in.Headers = append(in.Headers, kgo.RecordHeader{Key: "kstreamd-changelog", Value: []byte("upsert")})
			}
		}
		out = append(out, in)
	}
	return out
}

// ReadTopicWith reads topic with a client of opts at isolation level iso,
// from the start to the end offsets it has now: the last stable offsets for
// read_committed, the high watermarks for read_uncommitted (whose records
// of aborted and open transactions are included). Control records are left
// out; the records are in partition then offset order. It fails the test
// after timeout.
func ReadTopicWith(t testing.TB, opts []kgo.Opt, iso kgo.IsolationLevel, topic string, timeout time.Duration) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	recs, err := readTopic(ctx, opts, iso, topic)
	if err != nil {
		t.Fatalf("read topic %q: %v", topic, err)
	}
	return recs
}

// TryReadTopic is ReadTopicWith returning the error instead of failing the
// test: for a read inside a Poll, where one read that times out on a loaded
// machine is retried rather than ending the test. The error of a timed out
// read names the partitions not read to their end with the offsets read and
// the partitions' last stable offsets and high watermarks then.
func TryReadTopic(opts []kgo.Opt, iso kgo.IsolationLevel, topic string, timeout time.Duration) ([]*kgo.Record, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return readTopic(ctx, opts, iso, topic)
}

func readTopic(ctx context.Context, opts []kgo.Opt, iso kgo.IsolationLevel, topic string) ([]*kgo.Record, error) {
	adm, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	defer adm.Close()
	var ends kadm.ListedOffsets
	if iso == kgo.ReadCommitted() {
		// A partition whose last stable offset could not be listed (a
		// transient error under load) would be left out and its records
		// not read: list again for up to 2 s while one failed.
		retryUntil := time.Now().Add(2 * time.Second)
		for {
			ends, err = kadm.NewClient(adm).ListCommittedOffsets(ctx, topic)
			if err != nil || ends.Error() == nil || time.Now().After(retryUntil) || ctx.Err() != nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	} else {
		if ends, err = kadm.NewClient(adm).ListEndOffsets(ctx, topic); err == nil {
			err = ends.Error()
		}
	}
	if err != nil {
		return nil, err
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	byPart := map[int32][]*kgo.Record{}
	if len(want) > 0 {
		cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), opts...), kgo.ConsumeTopics(topic),
			kgo.FetchIsolationLevel(iso), kgo.KeepControlRecords(),
			// A fetch the broker holds for want of new bytes returns within
			// a second, not franz-go's default 5 s, so a broker that misses
			// waking it when the last stable offset moves costs little.
			kgo.FetchMaxWait(time.Second))...)
		if err != nil {
			return nil, err
		}
		defer cl.Close()
		last := map[int32]int64{}
		for len(want) > 0 {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%w with partitions %v (partition: end offset to reach) not read to their end; last offsets read %v; %s",
					ctx.Err(), want, last, describeEnds(opts, topic))
			}
			fs.EachRecord(func(r *kgo.Record) {
				last[r.Partition] = r.Offset
				if !r.Attrs.IsControl() {
					byPart[r.Partition] = append(byPart[r.Partition], r)
				}
				if end, ok := want[r.Partition]; ok && r.Offset+1 >= end {
					delete(want, r.Partition)
				}
			})
		}
	}
	var out []*kgo.Record
	for p := int32(0); p < 1<<16 && len(byPart) > 0; p++ {
		out = append(out, byPart[p]...)
		delete(byPart, p)
	}
	return out, nil
}

// describeEnds says what topic's partitions hold now, for a read that timed
// out: their last stable offsets and high watermarks.
func describeEnds(opts []kgo.Opt, topic string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err.Error()
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	lso, err1 := adm.ListCommittedOffsets(ctx, topic)
	hwm, err2 := adm.ListEndOffsets(ctx, topic)
	if err := errors.Join(err1, err2); err != nil {
		return "listing the offsets now: " + err.Error()
	}
	now := map[int32]string{}
	lso.Each(func(o kadm.ListedOffset) { now[o.Partition] = fmt.Sprintf("%d", o.Offset) })
	hwm.Each(func(o kadm.ListedOffset) { now[o.Partition] += fmt.Sprintf("/%d", o.Offset) })
	return fmt.Sprintf("now (last stable offset/high watermark) %v", now)
}

// SyncBuffer is a bytes.Buffer that goroutines may write to concurrently,
// for logs and a process's output.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// DescribeConfigsAsKafka answers a DescribeConfigs request for the broker
// resource "" as Kafka does: with the cluster-wide dynamic defaults only
// (none here), never a static config such as transaction.max.timeout.ms,
// where kfake answers every broker config. A kfake control function for
// kmsg.DescribeConfigs returns its answer, and handles is false (with a nil
// answer) for a request of any other resource, which kfake then answers as
// usual.
func DescribeConfigsAsKafka(req kmsg.Request) (resp kmsg.Response, handles bool) {
	dreq := req.(*kmsg.DescribeConfigsRequest)
	dresp := dreq.ResponseKind().(*kmsg.DescribeConfigsResponse)
	for _, r := range dreq.Resources {
		if r.ResourceType != kmsg.ConfigResourceTypeBroker || r.ResourceName != "" {
			return nil, false
		}
		rr := kmsg.NewDescribeConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		dresp.Resources = append(dresp.Resources, rr) // no dynamic default is set
	}
	return dresp, true
}
