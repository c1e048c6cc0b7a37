// Package testkit holds helpers shared by kstreamd's tests: free loopback
// ports, scraping a /metrics endpoint, polling for a condition, and reading a
// Kafka topic to its end. Only tests import it.
package testkit

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// FreeAddr returns a 127.0.0.1:port address that was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Scrape returns the sum of every sample of metric on the /metrics page at
// url whose labels include every pair of match; 0 when there is none. It
// returns an error when the page cannot be read or parsed.
func Scrape(url, metric string, match map[string]string) (float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, err
	}
	fam, ok := fams[metric]
	if !ok {
		return 0, nil
	}
	var sum float64
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
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Untyped != nil:
			sum += m.Untyped.GetValue()
		}
	}
	return sum, nil
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
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	recs, err := readTopic(ctx, brokers, topic)
	if err != nil {
		t.Fatalf("read topic %q: %v", topic, err)
	}
	return recs
}

func readTopic(ctx context.Context, brokers []string, topic string) ([]*kgo.Record, error) {
	adm, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, err
	}
	defer adm.Close()
	ends, err := kadm.NewClient(adm).ListCommittedOffsets(ctx, topic)
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
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
		if err != nil {
			return nil, err
		}
		defer cl.Close()
		for len(want) > 0 {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%w with partitions %v not read to their end", ctx.Err(), want)
			}
			fs.EachRecord(func(r *kgo.Record) {
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
