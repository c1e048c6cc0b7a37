package bench

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// nexmarkItem helpers build single events for the model tests.
func nmPerson(p int32, id int64, state string, ts int64) Item {
	return Item{Partition: p, Time: ts, Nexmark: &NexmarkEvent{Type: NexmarkPerson,
		Person: &NexmarkPersonEvent{ID: id, Name: "n" + strings.Repeat("x", int(id%3)), City: "c", State: state, DateTime: ts}}}
}

func nmAuction(p int32, id, seller, category, ts int64) Item {
	return Item{Partition: p, Time: ts, Nexmark: &NexmarkEvent{Type: NexmarkAuction,
		Auction: &NexmarkAuctionEvent{ID: id, Seller: seller, Category: category, DateTime: ts, Expires: ts + 1000}}}
}

func nmBid(p int32, auction, bidder, price, ts int64) Item {
	return Item{Partition: p, Time: ts, Nexmark: &NexmarkEvent{Type: NexmarkBid,
		Bid: &NexmarkBidEvent{Auction: auction, Bidder: bidder, Price: price, DateTime: ts}}}
}

func jsonOf(t *testing.T, vs []any) []string {
	t.Helper()
	var out []string
	for _, v := range vs {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	return out
}

// TestNexmarkQ8Model: a person is emitted once per window in which it
// also opened an auction (two auctions: still once), not for an auction
// in the next window, and only when the least partition's time minus 4 s
// passes the window's end minus 1 ms.
func TestNexmarkQ8Model(t *testing.T) {
	m := newNexmarkQ8(2)
	row := func(id int64, name string, start int64) string {
		b, _ := json.Marshal(map[string]any{"id": id, "name": name, "starttime": rfc3339ms(start)})
		return string(b)
	}
	for i, c := range []struct {
		it   Item
		want []string
	}{
		{nmPerson(0, 1000, "OR", 1000), nil},
		{nmPerson(1, 1001, "OR", 2000), nil},
		{nmAuction(0, 1, 1000, 10, 3000), nil},
		{nmAuction(1, 2, 1000, 10, 4000), nil},   // a second auction of 1000 in the window
		{nmAuction(0, 3, 1001, 10, 10_000), nil}, // 1001's auction is in the next window
		{nmPerson(1, 1002, "OR", 12_000), nil},
		{nmAuction(1, 4, 1002, 10, 13_000), nil},
		{nmBid(0, 1, 1, 1, 14_000), nil},                              // watermark 13000 - 4001 = 8999
		{nmBid(1, 1, 1, 1, 14_001), []string{row(1000, "nx", 0)}},     // watermark 9999 = end - 1
		{nmBid(0, 1, 1, 1, 40_000), nil},                              // partition 1 holds it at 9999
		{nmBid(1, 1, 1, 1, 40_000), []string{row(1002, "n", 10_000)}}, // 1001 opened no auction in [0, 10 s)
	} {
		got := jsonOf(t, m.Values(c.it))
		if !slices.Equal(got, c.want) {
			t.Fatalf("item %d: %v, want %v", i, got, c.want)
		}
		if c.it.Nexmark.Type == NexmarkAuction && i == 3 && m.Processed(c.it) != 1 {
			t.Errorf("the second auction of a seller and window: %d records reach the join, want 1 (it keeps the first itself)", m.Processed(c.it))
		}
	}
}

// TestNexmarkJoinModels: q3 pairs a category-10 auction with its OR/ID/CA
// seller whichever comes first, and q20 a bid with its category-10
// auction, whichever comes first, never with another category.
func TestNexmarkJoinModels(t *testing.T) {
	q3 := newNexmarkQ3()
	var got []string
	for _, it := range []Item{
		nmAuction(0, 1, 1000, 10, 1), // before its seller
		nmPerson(1, 1000, "CA", 2),
		nmAuction(0, 2, 1000, 11, 3), // another category
		nmAuction(0, 3, 1000, 10, 4), // after
		nmPerson(1, 1001, "WA", 5),   // another state
		nmAuction(0, 4, 1001, 10, 6),
	} {
		got = append(got, jsonOf(t, q3.Values(it))...)
	}
	want := []string{`{"city":"c","id":1,"name":"nx","state":"CA"}`, `{"city":"c","id":3,"name":"nx","state":"CA"}`}
	if !slices.Equal(got, want) {
		t.Errorf("q3: %v, want %v", got, want)
	}
	q20 := newNexmarkQ20()
	got = nil
	for _, it := range []Item{
		nmBid(0, 7, 1, 100, 1), // before its auction
		nmAuction(1, 7, 1000, 10, 2),
		nmBid(0, 7, 2, 200, 3),
		nmAuction(1, 8, 1000, 12, 4),
		nmBid(0, 8, 3, 300, 5), // category 12
	} {
		for _, v := range q20.Values(it) {
			r := v.(map[string]any)
			got = append(got, jsonOf(t, []any{[]any{r["auction"], r["bidder"], r["price"], r["category"], r["auction_dateTime"], r["bid_dateTime"]}})...)
		}
	}
	want = []string{`[7,1,100,10,2,1]`, `[7,2,200,10,2,3]`}
	if !slices.Equal(got, want) {
		t.Errorf("q20: %v, want %v", got, want)
	}
}

// TestNexmarkQ23Model: q23 emits each (bid, bidder, auction the bidder
// sells) triple once, when the last of the three is in, whichever comes
// last; a bid of a person who sells nothing, an auction whose seller never
// bids and a bid of an unknown person emit nothing.
func TestNexmarkQ23Model(t *testing.T) {
	m := newNexmarkQ23()
	var got []string
	for _, it := range []Item{
		nmBid(0, 7, 1000, 100, 1),     // before its bidder and the bidder's auctions
		nmAuction(1, 7, 1000, 10, 2),  // before the person: nothing yet
		nmPerson(1, 1000, "CA", 3),    // completes (bid 100, auction 7)
		nmAuction(0, 8, 1000, 12, 4),  // completes (bid 100, auction 8)
		nmBid(0, 9, 1000, 200, 5),     // two auctions: two triples
		nmPerson(0, 1001, "OR", 6),    // sells nothing
		nmBid(1, 7, 1001, 300, 7),     // of 1001: no auction
		nmAuction(1, 10, 1002, 10, 8), // seller 1002 never bids
		nmBid(1, 7, 1003, 400, 9),     // unknown bidder
	} {
		for _, v := range m.Values(it) {
			r := v.(map[string]any)
			got = append(got, jsonOf(t, []any{[]any{it.Time, r["bidder"], r["price"], r["person_id"], r["state"], r["seller"], r["category"], r["auction_dateTime"]}})...)
		}
	}
	want := []string{`[3,1000,100,1000,"CA",1000,10,2]`, `[4,1000,100,1000,"CA",1000,12,4]`,
		`[5,1000,200,1000,"CA",1000,10,2]`, `[5,1000,200,1000,"CA",1000,12,4]`}
	if !slices.Equal(got, want) {
		t.Errorf("q23: %v, want %v", got, want)
	}
}

// TestNexmarkRankModels: q18 keeps per bidder and auction the latest bid
// (ties: either), counting only a key's first bid as a sure update; q19
// keeps per auction the 10 highest, a rank shared by equal prices
// accepting any of them.
func TestNexmarkRankModels(t *testing.T) {
	q18 := newNexmarkQ18()
	n := 0
	for _, it := range []Item{nmBid(0, 7, 1, 100, 5), nmBid(1, 7, 1, 200, 3), nmBid(0, 7, 1, 300, 5), nmBid(0, 8, 1, 1, 1)} {
		n += q18.Updates(it)
	}
	tab := newTable()
	tab.put([]byte("1|7"), []byte(`{"auction":7,"bidder":1,"price":100,"channel":"","url":"","dateTime":5,"extra":""}`))
	tab.put([]byte("1|8"), []byte(`{"auction":8,"bidder":1,"price":1,"channel":"","url":"","dateTime":1,"extra":""}`))
	if d := tab.diff(q18.Final()); n != 2 || d != "" {
		t.Errorf("q18: %d sure updates (want 2), diff %q", n, d)
	}
	tab.put([]byte("1|7"), []byte(`{"auction":7,"bidder":1,"price":300,"channel":"","url":"","dateTime":5,"extra":""}`))
	if d := tab.diff(q18.Final()); d != "" {
		t.Errorf("q18, the other bid of the tie: %q", d)
	}
	tab.put([]byte("1|7"), []byte(`{"auction":7,"bidder":1,"price":200,"channel":"","url":"","dateTime":3,"extra":""}`))
	if d := tab.diff(q18.Final()); !strings.Contains(d, `key "1|7"`) {
		t.Errorf("q18, an older bid kept: %q", d)
	}

	q19 := newNexmarkQ19()
	n = 0
	for i := range 12 {
		n += q19.Updates(nmBid(int32(i%2), 7, int64(i), int64(100+i), int64(i)))
	}
	n += q19.Updates(nmBid(0, 7, 99, 105, 20)) // ties with bidder 5's 105: rank 7 either
	f := q19.Final()
	if n != 10 || len(f) != 10 {
		t.Fatalf("q19: %d sure updates, %d rows; want 10 and 10", n, len(f))
	}
	if r := f["7#1"].(map[string]any); r["price"] != int64(111) || r["rank_number"] != 1 {
		t.Errorf("q19 rank 1: %v", r)
	}
	for _, k := range []string{"7#7", "7#8"} {
		alts, ok := f[k].(anyOf)
		if !ok || len(alts) != 2 || alts[0].(map[string]any)["price"] != int64(105) {
			t.Errorf("q19 %s: %v, want either bid of price 105", k, f[k])
		}
	}
	if r := f["7#10"].(map[string]any); r["price"] != int64(103) {
		t.Errorf("q19 rank 10: %v, want price 103", r)
	}
}

// TestTableDiffAnyOf: a row the model gives as anyOf matches each of its
// values and nothing else.
func TestTableDiffAnyOf(t *testing.T) {
	want := map[string]any{"a": anyOf{map[string]any{"n": 1}, map[string]any{"n": 2}}}
	for v, ok := range map[string]bool{`{"n":1}`: true, `{"n":2.0}`: true, `{"n":3}`: false} {
		tab := newTable()
		tab.put([]byte("a"), []byte(v))
		if d := tab.diff(want); (d == "") != ok {
			t.Errorf("%s: diff %q, want match %t", v, d, ok)
		}
	}
}

// TestNexmarkQ9Model: the winner is the highest bid made while the
// auction was open, the earlier of equal prices; a bid before the auction
// opened, after it expired or before the auction came in order is handled;
// only the auction's first open pair is a sure update.
func TestNexmarkQ9Model(t *testing.T) {
	m := newNexmarkQ9()
	n, pairs := 0, 0
	for _, it := range []Item{
		nmBid(0, 7, 1, 500, 1500),       // before its auction arrives: waits, then open
		nmAuction(1, 7, 1000, 10, 1000), // open 1000..2000
		nmBid(0, 7, 2, 900, 999),        // before it opened
		nmBid(1, 7, 3, 900, 2001),       // after it expired
		nmBid(0, 7, 4, 700, 1800),
		nmBid(1, 7, 5, 700, 1200), // same price, earlier: wins
		nmBid(0, 7, 6, 600, 1100),
	} {
		n += m.Updates(it)
		pairs += m.Processed(it)
	}
	f := m.Final()
	r, ok := f["7#1"].(map[string]any)
	if n != 1 || pairs != 4 || len(f) != 1 || !ok || r["bidder"] != int64(5) || r["price"] != int64(700) || r["bid_dateTime"] != int64(1200) {
		t.Errorf("%d sure updates (want 1), %d pairs (want 4), table %v; want bidder 5's 700 at 1200", n, pairs, f)
	}
}

// TestNexmarkQ7Model: when [0, 10 s) fires, the bids of its max price
// from 0 to 10 s both included: two of that price in it, and one at 10 s
// exactly (in the next window), but not one at 10 s + 1 ms.
func TestNexmarkQ7Model(t *testing.T) {
	m := newNexmarkQ7(1)
	row := func(bidder, ts int64) string {
		return jsonOf(t, []any{map[string]any{"auction": 7, "price": 900, "bidder": bidder, "dateTime": ts, "extra": ""}})[0]
	}
	var got []string
	for _, it := range []Item{
		nmBid(0, 7, 1, 900, 100), nmBid(0, 7, 2, 50, 200), nmBid(0, 7, 3, 900, 9999),
		nmBid(0, 7, 4, 900, 10_000), nmBid(0, 7, 5, 900, 10_001), nmBid(0, 7, 6, 1, 13_999),
	} {
		got = append(got, jsonOf(t, m.Values(it))...)
	}
	if len(got) != 0 {
		t.Fatalf("before the watermark reached 9999: %v", got)
	}
	got = jsonOf(t, m.Values(nmBid(0, 7, 6, 1, 14_000)))
	if want := []string{row(1, 100), row(3, 9999), row(4, 10_000)}; !slices.Equal(got, want) {
		t.Errorf("%v, want %v", got, want)
	}
}

// TestNexmarkQ5Model: a bid counts in the five sliding windows holding
// it; a window fires at its end - 1 ms with every auction of its most bids
// (two when they tie).
func TestNexmarkQ5Model(t *testing.T) {
	m := newNexmarkQ5(1)
	var got []string
	for _, it := range []Item{nmBid(0, 7, 1, 1, 1000), nmBid(0, 7, 1, 1, 1500), nmBid(0, 8, 1, 1, 2500), nmBid(0, 8, 1, 1, 3000)} {
		got = append(got, jsonOf(t, m.Values(it))...)
	}
	if len(got) != 0 || len(m.windows) != 5+1 { // [-8 s, 2 s) ... [0, 10 s), and [2 s, 12 s) from 2500
		t.Fatalf("%v; %d windows open, want none out and 6 open", got, len(m.windows))
	}
	got = jsonOf(t, m.Values(nmBid(0, 9, 1, 1, 2000+4000))) // watermark 1999: [-8 s, 2 s) fires
	if want := []string{`{"auction":7,"num":2}`}; !slices.Equal(got, want) {
		t.Errorf("[-8 s, 2 s): %v, want %v", got, want)
	}
	got = jsonOf(t, m.Values(nmBid(0, 9, 1, 1, 4000+4000))) // [-6 s, 4 s): 7 twice, 8 twice
	slices.Sort(got)
	if want := []string{`{"auction":7,"num":2}`, `{"auction":8,"num":2}`}; !slices.Equal(got, want) {
		t.Errorf("[-6 s, 4 s): %v, want %v", got, want)
	}
}

// TestNexmarkQ4Model: per category the truncated average of its auctions'
// highest open bid; an auction without an open bid does not count.
func TestNexmarkQ4Model(t *testing.T) {
	m := newNexmarkQ4()
	n := 0
	for _, it := range []Item{
		nmAuction(0, 1, 1000, 10, 1000), nmAuction(0, 2, 1000, 10, 1000), nmAuction(0, 3, 1000, 11, 1000),
		nmAuction(0, 4, 1000, 11, 1000),
		nmBid(1, 1, 1, 100, 1100), nmBid(1, 1, 1, 300, 1200), nmBid(1, 2, 1, 50, 1300), // 10: (300 + 50) / 2
		nmBid(1, 3, 1, 7, 1400), nmBid(1, 4, 1, 9, 2500), // 11: 4's bid after it expired
	} {
		n += m.Updates(it)
	}
	got := jsonOf(t, []any{m.Final()})[0]
	if want := `{"10":{"final":175,"id":10},"11":{"final":7,"id":11}}`; n != 2 || got != want {
		t.Errorf("%d sure updates, table %s; want 2, %s", n, got, want)
	}
}

// TestTableTombstone: a nil value (an upsert sink's tombstone) removes
// its key, as compaction does.
func TestTableTombstone(t *testing.T) {
	tab := newTable()
	tab.put([]byte("a"), []byte(`{"n":1}`))
	tab.put([]byte("b"), []byte(`{"n":2}`))
	tab.put([]byte("a"), nil)
	if d := tab.diff(map[string]any{"b": map[string]any{"n": 2}}); d != "" {
		t.Errorf("%s", d)
	}
}

// TestNexmarkQ13Model: the side input holds keys 0 to 9,999 with their
// own text as value, and a bid gets the value of its auction mod 10,000.
func TestNexmarkQ13Model(t *testing.T) {
	rs := nexmarkSideInput()
	if len(rs) != 10_000 || rs[0] != (RuleRecord{Key: "0", Value: `{"key":0,"value":"0"}`}) || rs[9999].Key != "9999" {
		t.Errorf("side input: %d rows, first %v, last %v", len(rs), rs[0], rs[len(rs)-1])
	}
	got := jsonOf(t, nexmarkQ13(&NexmarkBidEvent{Auction: 1_012_345, Bidder: 1001, Price: 7, DateTime: 5}))
	if want := []string{`{"auction":1012345,"bidder":1001,"dateTime":5,"price":7,"value":"2345"}`}; !slices.Equal(got, want) {
		t.Errorf("%v, want %v", got, want)
	}
}
