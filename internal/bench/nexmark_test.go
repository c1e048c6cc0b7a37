package bench

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestNexmarkGeneratorDeterministic: two generators with one seed give the
// same JSON for every event; another seed gives other events with the same
// ids, types and times (those depend on the event number only).
func TestNexmarkGeneratorDeterministic(t *testing.T) {
	a := NewNexmarkGenerator(NexmarkConfig{Seed: 7, BaseTime: 1_700_000_000_000})
	b := NewNexmarkGenerator(NexmarkConfig{Seed: 7, BaseTime: 1_700_000_000_000})
	c := NewNexmarkGenerator(NexmarkConfig{Seed: 8, BaseTime: 1_700_000_000_000})
	differ := 0
	for i := range 5000 {
		ea, eb, ec := a.Next(), b.Next(), c.Next()
		ja, jb, jc := ea.AppendJSON(nil), eb.AppendJSON(nil), ec.AppendJSON(nil)
		if !bytes.Equal(ja, jb) {
			t.Fatalf("event %d: %s and %s from the same seed", i, ja, jb)
		}
		if ea.Type != ec.Type || ea.Time() != ec.Time() {
			t.Fatalf("event %d: type %d time %d, other seed %d %d", i, ea.Type, ea.Time(), ec.Type, ec.Time())
		}
		if ea.Type == NexmarkPerson && ea.Person.ID != ec.Person.ID || ea.Type == NexmarkAuction && ea.Auction.ID != ec.Auction.ID {
			t.Fatalf("event %d: ids differ between seeds", i)
		}
		if !bytes.Equal(ja, jc) {
			differ++
		}
	}
	if differ < 4900 {
		t.Fatalf("only %d of 5000 events differ between seeds 7 and 8", differ)
	}
}

// TestNexmarkGeneratorModel checks the stream against the model's rules
// on 50,000 events: the 1:3:46 mix by event number, person and auction
// ids consecutive from 1000, event times BaseTime + n/Rate, the JSON of
// every event valid with the nexmark project's field names, bids' auctions
// and bidders within the generator's ranges (at most 10 ahead of the last
// auction or person) with the hot auction and hot bidder drawing about half
// and three quarters of the bids, auctions that expire after they start,
// prices in [100, 100,000,000] cents.
func TestNexmarkGeneratorModel(t *testing.T) {
	const n, base, rate = 50_000, int64(1_000_000), 1000.0
	g := NewNexmarkGenerator(NexmarkConfig{Seed: 1, BaseTime: base, Rate: rate})
	var persons, auctions, bids, hotAuction, hotBidder int
	lastPerson, lastAuction := int64(999), int64(999)
	for i := range int64(n) {
		ev := g.Next()
		want := NexmarkBid
		switch i % 50 {
		case 0:
			want = NexmarkPerson
		case 1, 2, 3:
			want = NexmarkAuction
		}
		if ev.Type != want {
			t.Fatalf("event %d: type %d, want %d", i, ev.Type, want)
		}
		if wantTs := base + i; ev.Time() != wantTs { // 1000 events/s: one per ms
			t.Fatalf("event %d: time %d, want %d", i, ev.Time(), wantTs)
		}
		js := ev.AppendJSON(nil)
		var m map[string]any
		if err := json.Unmarshal(js, &m); err != nil {
			t.Fatalf("event %d: %s: %v", i, js, err)
		}
		if len(m) != 2 || m["event_type"] != float64(ev.Type) {
			t.Fatalf("event %d: %s", i, js)
		}
		sub := map[int]string{NexmarkPerson: "person", NexmarkAuction: "auction", NexmarkBid: "bid"}[ev.Type]
		fields := map[int]int{NexmarkPerson: 8, NexmarkAuction: 10, NexmarkBid: 7}[ev.Type]
		if o, ok := m[sub].(map[string]any); !ok || len(o) != fields || o["dateTime"] != float64(ev.Time()) {
			t.Fatalf("event %d: %s: want %q with %d fields", i, js, sub, fields)
		}
		switch ev.Type {
		case NexmarkPerson:
			persons++
			if p := ev.Person; p.ID != lastPerson+1 || len(p.CreditCard) != 19 {
				t.Fatalf("event %d: person %+v after id %d", i, p, lastPerson)
			}
			lastPerson = ev.Person.ID
		case NexmarkAuction:
			auctions++
			a := ev.Auction
			if a.ID != lastAuction+1 || a.Expires <= a.DateTime || a.Seller < 1000 || a.Seller > lastPerson+10 ||
				a.Category < 10 || a.Category > 14 || a.Reserve <= a.InitialBid || a.InitialBid < 100 || a.InitialBid > 100_000_000 {
				t.Fatalf("event %d: auction %+v after id %d, person %d", i, a, lastAuction, lastPerson)
			}
			lastAuction = a.ID
		default:
			bids++
			b := ev.Bid
			if b.Auction < 1000 || b.Auction > lastAuction+10 || b.Bidder < 1000 || b.Bidder > lastPerson+10 ||
				b.Price < 100 || b.Price > 100_000_000 || b.Channel == "" || b.URL == "" {
				t.Fatalf("event %d: bid %+v, last auction %d, person %d", i, b, lastAuction, lastPerson)
			}
			if b.Auction == (lastAuction-1000)/100*100+1000 {
				hotAuction++
			}
			if b.Bidder == (lastPerson-1000)/100*100+1+1000 {
				hotBidder++
			}
		}
	}
	if persons != n/50 || auctions != 3*n/50 || bids != 46*n/50 {
		t.Fatalf("%d persons, %d auctions, %d bids; want 1:3:46 of %d", persons, auctions, bids, n)
	}
	// P(hot auction) = 1 - 1/2, P(hot bidder) = 1 - 1/4, plus the random
	// picks that land on them.
	if f := float64(hotAuction) / float64(bids); f < 0.48 || f > 0.56 {
		t.Errorf("hot auction in %.3f of the bids, want about 0.5", f)
	}
	if f := float64(hotBidder) / float64(bids); f < 0.73 || f > 0.78 {
		t.Errorf("hot bidder in %.3f of the bids, want about 0.75", f)
	}
}

// TestNexmarkGeneratorRate: event n's time is BaseTime + floor(n * 1e6 /
// Rate µs) / 1000 ms (GeneratorConfig.timestampForEvent), never
// decreasing; Rebase continues at the new base and rate from the next
// event, and never goes back in time.
func TestNexmarkGeneratorRate(t *testing.T) {
	g := NewNexmarkGenerator(NexmarkConfig{Seed: 3, BaseTime: 5000, Rate: 3000})
	prev := int64(0)
	for i := range int64(9000) {
		ts := g.Next().Time()
		if want := 5000 + int64(float64(i)*(1e6/3000))/1000; ts != want || ts < prev {
			t.Fatalf("event %d at %d, want %d (previous %d)", i, ts, want, prev)
		}
		prev = ts
	}
	if prev != 7999 { // event 8999 at 8999/3 ms = 2999.67 ms after the base
		t.Fatalf("event 8999 at %d, want 7999", prev)
	}
	g.Rebase(100_000, 100) // one event per 10 ms from 100,000
	for i := range int64(5) {
		if ts := g.Next().Time(); ts != 100_000+10*i {
			t.Fatalf("rebased event %d at %d, want %d", i, ts, 100_000+10*i)
		}
	}
	g.Rebase(0, 100) // before the last event: continues from it
	if ts := g.Next().Time(); ts != 100_040 {
		t.Fatalf("event after a rebase into the past at %d, want 100040", ts)
	}
}
