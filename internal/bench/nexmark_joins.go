package bench

import (
	"cmp"
	"math"
	"slices"
	"strconv"
)

// The models of the Nexmark queries that join (q3, q8, q20, ...), written
// from the queries' SQL as the other models in nexmark_queries.go.

// nexmarkClock is the watermark a Nexmark query's operators see: the
// source's (event time minus its 4 s out-of-orderness minus 1 ms) as the
// least over the partitions of their largest time, none until every
// partition has had a record. The generator's times never decrease, so
// no event is late.
type nexmarkClock struct {
	partMax []int64 // largest time per partition, -1 before the first
	seen    int
}

func newNexmarkClock(partitions int) *nexmarkClock {
	c := &nexmarkClock{partMax: make([]int64, partitions)}
	for i := range c.partMax {
		c.partMax[i] = -1
	}
	return c
}

// advance takes item it's time and returns the watermark after it; ok is
// false while some partition has had no record.
func (c *nexmarkClock) advance(it Item) (wm int64, ok bool) {
	if c.partMax[it.Partition] < 0 {
		c.seen++
	}
	c.partMax[it.Partition] = max(c.partMax[it.Partition], it.Time)
	if c.seen < len(c.partMax) {
		return 0, false
	}
	return slices.Min(c.partMax) - 4000 - 1, true
}

// nexmarkQ8Size is q8's TUMBLE size.
const nexmarkQ8Size = 10_000

// nexmarkQ8 models q8: per 10 s tumbling window, the persons registered in
// it who are the seller of an auction opened in it, each once, emitted
// when the watermark reaches the window's end minus 1 ms.
type nexmarkQ8 struct {
	clock   *nexmarkClock
	windows []int64 // starts of the windows not fired yet, ascending
	persons map[int64][]*NexmarkPersonEvent
	sellers map[int64]map[int64]bool
	joined  int // records the window join received for the last item
}

func newNexmarkQ8(partitions int) *nexmarkQ8 {
	return &nexmarkQ8{clock: newNexmarkClock(partitions), persons: map[int64][]*NexmarkPersonEvent{}, sellers: map[int64]map[int64]bool{}}
}

// tumble is the start of the size ms tumbling window holding t.
func tumble(t, size int64) int64 { return t - ((t%size)+size)%size }

// Processed implements the Processed count: the window join receives
// every person and every auction (it keeps the first auction of each
// seller and window itself: dedup: right).
func (m *nexmarkQ8) Processed(Item) int { return m.joined }

// Values implements valueModel.
func (m *nexmarkQ8) Values(it Item) []any {
	ev := it.Nexmark
	m.joined = 0
	open := func(w int64) {
		if _, ok := m.sellers[w]; !ok {
			m.sellers[w] = map[int64]bool{}
			i, _ := slices.BinarySearch(m.windows, w)
			m.windows = slices.Insert(m.windows, i, w)
		}
	}
	switch ev.Type {
	case NexmarkPerson:
		w := tumble(ev.Person.DateTime, nexmarkQ8Size)
		open(w)
		m.persons[w] = append(m.persons[w], ev.Person)
		m.joined = 1
	case NexmarkAuction:
		w := tumble(ev.Auction.DateTime, nexmarkQ8Size)
		open(w)
		m.joined = 1
		m.sellers[w][ev.Auction.Seller] = true
	}
	wm, ok := m.clock.advance(it)
	if !ok {
		return nil
	}
	var out []any
	for len(m.windows) > 0 && m.windows[0]+nexmarkQ8Size-1 <= wm {
		w := m.windows[0]
		m.windows = m.windows[1:]
		for _, p := range m.persons[w] {
			if m.sellers[w][p.ID] {
				out = append(out, map[string]any{"id": p.ID, "name": p.Name, "starttime": rfc3339ms(w)})
			}
		}
		delete(m.persons, w)
		delete(m.sellers, w)
	}
	return out
}

// nexmarkQ3 models q3: the auctions of category 10 joined with their
// seller when the seller lives in Oregon, Idaho or California, each pair
// emitted once both are in (an unbounded inner join of two append-only
// streams emits only insertions, whichever side comes first).
type nexmarkQ3 struct {
	persons  map[int64]*NexmarkPersonEvent
	auctions map[int64][]*NexmarkAuctionEvent // by seller
}

func newNexmarkQ3() *nexmarkQ3 {
	return &nexmarkQ3{persons: map[int64]*NexmarkPersonEvent{}, auctions: map[int64][]*NexmarkAuctionEvent{}}
}

func nexmarkQ3Row(p *NexmarkPersonEvent, a *NexmarkAuctionEvent) any {
	return map[string]any{"name": p.Name, "city": p.City, "state": p.State, "id": a.ID}
}

// Values implements valueModel.
func (m *nexmarkQ3) Values(it Item) []any {
	ev := it.Nexmark
	var out []any
	switch ev.Type {
	case NexmarkPerson:
		p := ev.Person
		if p.State != "OR" && p.State != "ID" && p.State != "CA" {
			return nil
		}
		m.persons[p.ID] = p
		for _, a := range m.auctions[p.ID] {
			out = append(out, nexmarkQ3Row(p, a))
		}
	case NexmarkAuction:
		a := ev.Auction
		if a.Category != 10 {
			return nil
		}
		m.auctions[a.Seller] = append(m.auctions[a.Seller], a)
		if p := m.persons[a.Seller]; p != nil {
			out = append(out, nexmarkQ3Row(p, a))
		}
	}
	return out
}

// nexmarkQ20 models q20: every bid joined with its auction when that is of
// category 10, each pair emitted once both are in.
type nexmarkQ20 struct {
	auctions map[int64]*NexmarkAuctionEvent
	others   map[int64]bool               // auctions of other categories: their bids join nothing
	bids     map[int64][]*NexmarkBidEvent // by auction, while it has not come
}

func newNexmarkQ20() *nexmarkQ20 {
	return &nexmarkQ20{auctions: map[int64]*NexmarkAuctionEvent{}, others: map[int64]bool{}, bids: map[int64][]*NexmarkBidEvent{}}
}

func nexmarkQ20Row(b *NexmarkBidEvent, a *NexmarkAuctionEvent) any {
	return map[string]any{"auction": b.Auction, "bidder": b.Bidder, "price": b.Price, "channel": b.Channel, "url": b.URL,
		"bid_dateTime": b.DateTime, "bid_extra": b.Extra, "itemName": a.ItemName, "description": a.Description,
		"initialBid": a.InitialBid, "reserve": a.Reserve, "auction_dateTime": a.DateTime, "expires": a.Expires,
		"seller": a.Seller, "category": a.Category, "auction_extra": a.Extra}
}

// Values implements valueModel.
func (m *nexmarkQ20) Values(it Item) []any {
	ev := it.Nexmark
	var out []any
	switch ev.Type {
	case NexmarkAuction:
		a := ev.Auction
		if a.Category != 10 {
			m.others[a.ID] = true
			delete(m.bids, a.ID)
			return nil
		}
		m.auctions[a.ID] = a
		for _, b := range m.bids[a.ID] {
			out = append(out, nexmarkQ20Row(b, a))
		}
		delete(m.bids, a.ID) // auction ids are unique: later bids find the auction
	case NexmarkBid:
		b := ev.Bid
		if a := m.auctions[b.Auction]; a != nil {
			out = append(out, nexmarkQ20Row(b, a))
		} else if !m.others[b.Auction] {
			m.bids[b.Auction] = append(m.bids[b.Auction], b)
		}
	}
	return out
}

// nexmarkQ23 models q23 (not in the nexmark project's original suite:
// RisingWave's and Arroyo's Nexmark add it): every bid joined with its
// bidder (person) and with each auction that bidder sells, a multi-way
// inner join on bidder = person.id = auction.seller. Both joins are
// unbounded and their inputs append-only, so every triple is emitted once,
// when the last of its three events is in, whatever the order.
type nexmarkQ23 struct {
	persons  map[int64]*NexmarkPersonEvent
	auctions map[int64][]*NexmarkAuctionEvent // by seller
	bids     map[int64][]*NexmarkBidEvent     // by bidder
}

func newNexmarkQ23() *nexmarkQ23 {
	return &nexmarkQ23{persons: map[int64]*NexmarkPersonEvent{}, auctions: map[int64][]*NexmarkAuctionEvent{}, bids: map[int64][]*NexmarkBidEvent{}}
}

// nexmarkQ23Row is a triple's columns as q23's sink table names them.
func nexmarkQ23Row(b *NexmarkBidEvent, p *NexmarkPersonEvent, a *NexmarkAuctionEvent) any {
	return map[string]any{"bidder": b.Bidder, "price": b.Price, "channel": b.Channel, "url": b.URL, "bid_extra": b.Extra,
		"person_id": p.ID, "name": p.Name, "emailAddress": p.EmailAddress, "creditCard": p.CreditCard, "city": p.City,
		"state": p.State, "person_extra": p.Extra, "itemName": a.ItemName, "description": a.Description,
		"initialBid": a.InitialBid, "reserve": a.Reserve, "auction_dateTime": a.DateTime, "expires": a.Expires,
		"seller": a.Seller, "category": a.Category, "auction_extra": a.Extra}
}

// Values implements valueModel.
func (m *nexmarkQ23) Values(it Item) []any {
	ev := it.Nexmark
	var out []any
	switch ev.Type {
	case NexmarkPerson:
		p := ev.Person
		m.persons[p.ID] = p
		for _, b := range m.bids[p.ID] {
			for _, a := range m.auctions[p.ID] {
				out = append(out, nexmarkQ23Row(b, p, a))
			}
		}
	case NexmarkAuction:
		a := ev.Auction
		m.auctions[a.Seller] = append(m.auctions[a.Seller], a)
		if p := m.persons[a.Seller]; p != nil {
			for _, b := range m.bids[a.Seller] {
				out = append(out, nexmarkQ23Row(b, p, a))
			}
		}
	case NexmarkBid:
		b := ev.Bid
		m.bids[b.Bidder] = append(m.bids[b.Bidder], b)
		if p := m.persons[b.Bidder]; p != nil {
			for _, a := range m.auctions[b.Bidder] {
				out = append(out, nexmarkQ23Row(b, p, a))
			}
		}
	}
	return out
}

// nexmarkBidRow is a bid's columns as q18 and q19 write them.
func nexmarkBidRow(b *NexmarkBidEvent) map[string]any {
	return map[string]any{"auction": b.Auction, "bidder": b.Bidder, "price": b.Price, "channel": b.Channel,
		"url": b.URL, "dateTime": b.DateTime, "extra": b.Extra}
}

// nexmarkQ18 models q18: per bidder and auction the bids of the latest
// dateTime (more than one when they tie: the query's ROW_NUMBER leaves
// them in no order, and the last to arrive wins). It keeps of them only
// the hash of their row (a run of 10M events has about 3M keys).
type nexmarkQ18 struct {
	last map[[2]int64]*q18Last
}

type q18Last struct {
	ts   int64
	rows rowHashes
}

func newNexmarkQ18() *nexmarkQ18 { return &nexmarkQ18{last: map[[2]int64]*q18Last{}} }

// Processed implements the Processed count: the dedup receives every bid.
func (m *nexmarkQ18) Processed(it Item) int {
	if it.Nexmark.Type == NexmarkBid {
		return 1
	}
	return 0
}

// Updates implements tableModel: the first bid of a key is written
// whatever the order; a later one only when it arrives after the bids it
// is not older than (so not counted: a lower bound).
func (m *nexmarkQ18) Updates(it Item) int {
	if it.Nexmark.Type != NexmarkBid {
		return 0
	}
	b := it.Nexmark.Bid
	k := [2]int64{b.Bidder, b.Auction}
	cur := m.last[k]
	switch {
	case cur == nil:
		m.last[k] = &q18Last{ts: b.DateTime, rows: rowHashes{rowHash(nexmarkBidRow(b))}}
		return 1
	case b.DateTime > cur.ts:
		cur.ts, cur.rows = b.DateTime, rowHashes{rowHash(nexmarkBidRow(b))}
	case b.DateTime == cur.ts:
		cur.rows = append(cur.rows, rowHash(nexmarkBidRow(b)))
	}
	return 0
}

// Final implements tableModel: keyed "<bidder>|<auction>".
func (m *nexmarkQ18) Final() map[string]any {
	out := make(map[string]any, len(m.last))
	for k, l := range m.last {
		out[strconv.FormatInt(k[0], 10)+"|"+strconv.FormatInt(k[1], 10)] = l.rows
	}
	return out
}

// nexmarkQ19N is q19's rank_number bound.
const nexmarkQ19N = 10

// nexmarkQ19 models q19: per auction its bids of the 10 highest prices,
// kept in descending price (ties in arrival order: the query leaves them
// in no order, so a rank whose price several bids share may hold any of
// them).
type nexmarkQ19 struct {
	top  map[int64][]*NexmarkBidEvent // the bids priced at least the 10th highest
	bids map[int64]int
}

func newNexmarkQ19() *nexmarkQ19 {
	return &nexmarkQ19{top: map[int64][]*NexmarkBidEvent{}, bids: map[int64]int{}}
}

// Processed implements the Processed count: the top_n receives every bid.
func (m *nexmarkQ19) Processed(it Item) int { return (&nexmarkQ18{}).Processed(it) }

// Updates implements tableModel: each of an auction's first 10 bids adds a
// rank, written whatever the order; the other updates depend on it (a
// lower bound).
func (m *nexmarkQ19) Updates(it Item) int {
	if it.Nexmark.Type != NexmarkBid {
		return 0
	}
	b := it.Nexmark.Bid
	t := append(m.top[b.Auction], b)
	slices.SortStableFunc(t, func(x, y *NexmarkBidEvent) int { return cmp.Compare(y.Price, x.Price) })
	if len(t) > nexmarkQ19N {
		lowest := t[nexmarkQ19N-1].Price
		for len(t) > nexmarkQ19N && t[len(t)-1].Price < lowest {
			t = t[:len(t)-1]
		}
	}
	m.top[b.Auction] = t
	m.bids[b.Auction]++
	if m.bids[b.Auction] <= nexmarkQ19N {
		return 1
	}
	return 0
}

// Final implements tableModel: per auction and rank r, keyed
// "<auction>#<r>", the r-th bid by price, or any bid of that price.
func (m *nexmarkQ19) Final() map[string]any {
	out := map[string]any{}
	for a, t := range m.top {
		for r := 1; r <= min(nexmarkQ19N, len(t)); r++ {
			var alts anyOf
			for _, b := range t {
				if b.Price == t[r-1].Price {
					row := nexmarkBidRow(b)
					row["rank_number"] = r
					alts = append(alts, row)
				}
			}
			k := strconv.FormatInt(a, 10) + "#" + strconv.Itoa(r)
			if len(alts) == 1 {
				out[k] = alts[0]
			} else {
				out[k] = alts
			}
		}
	}
	return out
}

// nexmarkQ9Upper is q9's interval_join upper bound: a bid joins an
// auction at most this long after it opened.
const nexmarkQ9Upper = 60_000

// nexmarkQ9 models q9: per auction, among the bids for it made while it
// was open (from its dateTime to its expires, and at most 60 s after it
// opened: see configs/nexmark/q9.yaml), the highest, the earliest of equal
// prices (several when both tie: the query leaves them in no order).
type nexmarkQ9 struct {
	auctions map[int64]*NexmarkAuctionEvent
	waiting  map[int64][]*NexmarkBidEvent // bids of auctions not seen yet
	best     map[int64][]*NexmarkBidEvent
	pairs    int     // pairs the top_n received for the last item
	firsts   []int64 // auctions whose first open pair the last item made
	upper    int64   // how long after its auction opened a bid may join
}

func newNexmarkQ9() *nexmarkQ9 {
	return &nexmarkQ9{auctions: map[int64]*NexmarkAuctionEvent{}, waiting: map[int64][]*NexmarkBidEvent{}, best: map[int64][]*NexmarkBidEvent{},
		upper: nexmarkQ9Upper}
}

// open reports whether b was made while a was open (and within the
// join's bound).
func (m *nexmarkQ9) open(a *NexmarkAuctionEvent, b *NexmarkBidEvent) bool {
	return b.DateTime >= a.DateTime && b.DateTime <= a.Expires && b.DateTime-a.DateTime <= m.upper
}

// pair takes an open pair and returns the updates every order writes:
// one for the auction's first.
func (m *nexmarkQ9) pair(a *NexmarkAuctionEvent, b *NexmarkBidEvent) int {
	m.pairs++
	cur, ok := m.best[a.ID]
	switch {
	case !ok || b.Price > cur[0].Price || b.Price == cur[0].Price && b.DateTime < cur[0].DateTime:
		m.best[a.ID] = []*NexmarkBidEvent{b}
	case b.Price == cur[0].Price && b.DateTime == cur[0].DateTime:
		m.best[a.ID] = append(cur, b)
	}
	if ok {
		return 0
	}
	m.firsts = append(m.firsts, a.ID)
	return 1
}

// Processed implements the Processed count: the top_n receives every
// open pair.
func (m *nexmarkQ9) Processed(Item) int { return m.pairs }

// Updates implements tableModel.
func (m *nexmarkQ9) Updates(it Item) int {
	m.pairs, m.firsts = 0, m.firsts[:0]
	n := 0
	switch ev := it.Nexmark; ev.Type {
	case NexmarkAuction:
		a := ev.Auction
		m.auctions[a.ID] = a
		for _, b := range m.waiting[a.ID] {
			if m.open(a, b) {
				n += m.pair(a, b)
			}
		}
		delete(m.waiting, a.ID)
	case NexmarkBid:
		b := ev.Bid
		if a := m.auctions[b.Auction]; a == nil {
			m.waiting[b.Auction] = append(m.waiting[b.Auction], b)
		} else if m.open(a, b) {
			n += m.pair(a, b)
		}
	}
	return n
}

// Final implements tableModel: each auction's winner, keyed "<id>#1".
func (m *nexmarkQ9) Final() map[string]any {
	out := make(map[string]any, len(m.best))
	for id, bs := range m.best {
		a := m.auctions[id]
		var alts anyOf
		for _, b := range bs {
			alts = append(alts, map[string]any{"id": a.ID, "itemName": a.ItemName, "description": a.Description,
				"initialBid": a.InitialBid, "reserve": a.Reserve, "dateTime": a.DateTime, "expires": a.Expires,
				"seller": a.Seller, "category": a.Category, "extra": a.Extra, "auction": b.Auction, "bidder": b.Bidder,
				"price": b.Price, "bid_dateTime": b.DateTime, "bid_extra": b.Extra})
		}
		k := strconv.FormatInt(id, 10) + "#1"
		if len(alts) == 1 {
			out[k] = alts[0]
		} else {
			out[k] = alts
		}
	}
	return out
}

// nexmarkQ7Size is q7's TUMBLE size.
const nexmarkQ7Size = 10_000

// nexmarkQ7 models q7: when the watermark reaches a 10 s window's end
// minus 1 ms, the bids of its highest price made from its start to its
// end, both included (a bid at the end belongs to the next window; it has
// arrived by then, as the generator's times never decrease per partition).
type nexmarkQ7 struct {
	clock   *nexmarkClock
	windows []int64 // starts of the windows not fired yet, ascending
	bids    map[int64][]*NexmarkBidEvent
	max     map[int64]int64
}

func newNexmarkQ7(partitions int) *nexmarkQ7 {
	return &nexmarkQ7{clock: newNexmarkClock(partitions), bids: map[int64][]*NexmarkBidEvent{}, max: map[int64]int64{}}
}

// Processed implements the Processed count: the window receives every
// bid.
func (m *nexmarkQ7) Processed(it Item) int { return (&nexmarkQ18{}).Processed(it) }

// Values implements valueModel.
func (m *nexmarkQ7) Values(it Item) []any {
	if b := it.Nexmark.Bid; it.Nexmark.Type == NexmarkBid {
		w := tumble(b.DateTime, nexmarkQ7Size)
		if _, ok := m.max[w]; !ok {
			i, _ := slices.BinarySearch(m.windows, w)
			m.windows = slices.Insert(m.windows, i, w)
			m.max[w] = b.Price
		}
		m.max[w] = max(m.max[w], b.Price)
		m.bids[w] = append(m.bids[w], b)
	}
	wm, ok := m.clock.advance(it)
	if !ok {
		return nil
	}
	var out []any
	for len(m.windows) > 0 && m.windows[0]+nexmarkQ7Size-1 <= wm {
		w := m.windows[0]
		m.windows = m.windows[1:]
		for _, b := range append(m.bids[w], m.bids[w+nexmarkQ7Size]...) {
			if b.Price == m.max[w] && b.DateTime <= w+nexmarkQ7Size {
				out = append(out, map[string]any{"auction": b.Auction, "price": b.Price, "bidder": b.Bidder, "dateTime": b.DateTime, "extra": b.Extra})
			}
		}
		delete(m.bids, w)
		delete(m.max, w)
	}
	return out
}

// nexmarkQ5Size and nexmarkQ5Slide are q5's HOP size and slide.
const (
	nexmarkQ5Size  = 10_000
	nexmarkQ5Slide = 2_000
)

// nexmarkQ5 models q5: when the watermark reaches a sliding window's end
// minus 1 ms, the auctions with the most bids in it, with that count.
type nexmarkQ5 struct {
	clock   *nexmarkClock
	windows []int64 // starts of the windows not fired yet, ascending
	counts  map[int64]map[int64]int64
}

func newNexmarkQ5(partitions int) *nexmarkQ5 {
	return &nexmarkQ5{clock: newNexmarkClock(partitions), counts: map[int64]map[int64]int64{}}
}

// Processed implements the Processed count: the counting window receives
// every bid.
func (m *nexmarkQ5) Processed(it Item) int { return (&nexmarkQ18{}).Processed(it) }

// Values implements valueModel.
func (m *nexmarkQ5) Values(it Item) []any {
	if b := it.Nexmark.Bid; it.Nexmark.Type == NexmarkBid {
		last := tumble(b.DateTime, nexmarkQ5Slide)
		for w := last - nexmarkQ5Size + nexmarkQ5Slide; w <= last; w += nexmarkQ5Slide {
			c := m.counts[w]
			if c == nil {
				c = map[int64]int64{}
				m.counts[w] = c
				i, _ := slices.BinarySearch(m.windows, w)
				m.windows = slices.Insert(m.windows, i, w)
			}
			c[b.Auction]++
		}
	}
	wm, ok := m.clock.advance(it)
	if !ok {
		return nil
	}
	var out []any
	for len(m.windows) > 0 && m.windows[0]+nexmarkQ5Size-1 <= wm {
		w := m.windows[0]
		m.windows = m.windows[1:]
		var most int64
		for _, n := range m.counts[w] {
			most = max(most, n)
		}
		for a, n := range m.counts[w] {
			if n == most {
				out = append(out, map[string]any{"auction": a, "num": n})
			}
		}
		delete(m.counts, w)
	}
	return out
}

// nexmarkQ4 models q4 from q9's pairs without its 60 s bound (q4 joins
// with a regular join): per category the average (BIGINT: truncated) of
// its auctions' highest open bid.
type nexmarkQ4 struct {
	q9         *nexmarkQ9
	categories map[int64]bool
}

func newNexmarkQ4() *nexmarkQ4 {
	q9 := newNexmarkQ9()
	q9.upper = math.MaxInt64
	return &nexmarkQ4{q9: q9, categories: map[int64]bool{}}
}

// Processed implements the Processed count: the per-auction aggregate
// receives every open pair.
func (m *nexmarkQ4) Processed(it Item) int { return m.q9.Processed(it) }

// Updates implements tableModel: a category's first row is written
// whatever the order; the others depend on it (a lower bound).
func (m *nexmarkQ4) Updates(it Item) int {
	m.q9.Updates(it)
	n := 0
	for _, id := range m.q9.firsts {
		if c := m.q9.auctions[id].Category; !m.categories[c] {
			m.categories[c] = true
			n++
		}
	}
	return n
}

// Final implements tableModel: per category, keyed by its number.
func (m *nexmarkQ4) Final() map[string]any {
	sum, n := map[int64]int64{}, map[int64]int64{}
	for id, bs := range m.q9.best {
		c := m.q9.auctions[id].Category
		sum[c] += bs[0].Price
		n[c]++
	}
	out := map[string]any{}
	for c := range sum {
		out[strconv.FormatInt(c, 10)] = map[string]any{"id": c, "final": sum[c] / n[c]}
	}
	return out
}

// nexmarkSideInputRows is the size of q13's side input (side_input_gen.sh:
// SideInputGenerator --num 10000).
const nexmarkSideInputRows = 10_000

// nexmarkSideInput is q13's side input table as the records of its topic:
// key i, value {"key": i, "value": "i"}, for i below 10,000.
func nexmarkSideInput() []RuleRecord {
	rs := make([]RuleRecord, nexmarkSideInputRows)
	for i := range rs {
		k := strconv.Itoa(i)
		rs[i] = RuleRecord{Key: k, Value: `{"key":` + k + `,"value":"` + k + `"}`}
	}
	return rs
}

// nexmarkQ13 models q13: every bid with the side input's value of its
// auction mod 10,000 (every key has a row: the string of the key).
func nexmarkQ13(b *NexmarkBidEvent) []any {
	return []any{map[string]any{"auction": b.Auction, "bidder": b.Bidder, "price": b.Price, "dateTime": b.DateTime,
		"value": strconv.FormatInt(b.Auction%nexmarkSideInputRows, 10)}}
}
