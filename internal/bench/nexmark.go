package bench

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// The Nexmark generator: persons, auctions and bids as the Nexmark
// benchmark defines them, ported from the nexmark project's Flink
// generator (github.com/nexmark/nexmark, nexmark-flink/.../generator:
// NexmarkGenerator, GeneratorConfig, model/PersonGenerator,
// AuctionGenerator, BidGenerator, PriceGenerator, StringsGenerator,
// LongGenerator; read at commit 6b3646c3), which is itself Apache Beam's
// (sdks/java/testing/nexmark, sources/generator) with the channel and url
// fields of bids added for q21 and q22. Two departures, both Beam's way:
//
//   - randomness: every event draws from its own generator seeded with
//     (seed, event id), as Beam's NexmarkGenerator seeds a Random with the
//     event id, so the stream is a pure function of the seed and the event
//     number (the nexmark project draws from one unseeded SplittableRandom,
//     which no two runs repeat). The strings shared by all events (the hot
//     urls, the 10,000 channels' urls, the reusable extra text) come from
//     the seed too.
//   - a bid's bidder gets GeneratorConfig.FIRST_PERSON_ID added once, as in
//     Beam; the nexmark project's BidGenerator adds it twice, so its
//     bidders are 1000 above every person id.
//
// Out-of-order groups (outOfOrderGroupSize) are left at 1, the default of
// both: event times never decrease.

// Nexmark event types: the event_type field of the JSON.
const (
	NexmarkPerson  = 0
	NexmarkAuction = 1
	NexmarkBid     = 2
)

// GeneratorConfig.FIRST_*_ID: ids start there so that small runs still
// join.
const (
	nexmarkFirstAuctionID  = 1000
	nexmarkFirstPersonID   = 1000
	nexmarkFirstCategoryID = 10
)

// Constants of the generators' classes.
const (
	nexmarkNumCategories   = 5   // AuctionGenerator.NUM_CATEGORIES
	nexmarkAuctionIDLead   = 10  // AuctionGenerator.AUCTION_ID_LEAD
	nexmarkPersonIDLead    = 10  // PersonGenerator.PERSON_ID_LEAD
	nexmarkHotSellerRatio  = 100 // AuctionGenerator.HOT_SELLER_RATIO: hot sellers are the first of each batch of 100 persons
	nexmarkHotAuctionBatch = 100 // BidGenerator.HOT_AUCTION_RATIO: the hot auction is the first of each batch of 100
	nexmarkHotBidderBatch  = 100 // BidGenerator.HOT_BIDDER_RATIO: the hot bidder is the second of each batch of 100 persons
	nexmarkHotChannelRatio = 2   // BidGenerator.HOT_CHANNELS_RATIO
	nexmarkChannels        = 10_000
	nexmarkMinStringLength = 3       // StringsGenerator.MIN_STRING_LENGTH
	nexmarkReusableExtra   = 1 << 20 // StringsGenerator.REUSABLE_EXTRA_STRING's length
)

var (
	nexmarkHotChannels = []string{"Google", "Facebook", "Baidu", "Apple"}
	nexmarkStates      = strings.Split("AZ,CA,ID,OR,WA,WY", ",")
	nexmarkCities      = strings.Split("Phoenix,Los Angeles,San Francisco,Boise,Portland,Bend,Redmond,Seattle,Kent,Cheyenne", ",")
	nexmarkFirstNames  = strings.Split("Peter,Paul,Luke,John,Saul,Vicky,Kate,Julie,Sarah,Deiter,Walter", ",")
	nexmarkLastNames   = strings.Split("Shultz,Abrams,Spencer,White,Bartels,Walton,Smith,Jones,Noris", ",")
)

// NexmarkConfig is the generator's configuration, the fields of the
// nexmark project's NexmarkConfiguration the generator reads. Zero values
// take its defaults, given with each field.
type NexmarkConfig struct {
	// Seed makes the stream: two generators with the same config produce
	// the same events.
	Seed uint64
	// Rate is first-event.rate: events per second of event time (the
	// inter-event delay is 1e6/Rate µs). Default 10,000.
	Rate float64
	// BaseTime is the first event's time, ms since the epoch. Default 0.
	BaseTime int64
	// PersonProportion, AuctionProportion and BidProportion are the event
	// mix. Default 1, 3 and 46.
	PersonProportion, AuctionProportion, BidProportion int
	// NumActivePeople is how many of the latest persons non-hot auctions
	// and bids pick from. Default 1,000.
	NumActivePeople int
	// NumInFlightAuctions is how many of the latest auctions non-hot bids
	// pick from; it also sets the auctions' mean length. Default 100.
	NumInFlightAuctions int
	// HotAuctionRatio, HotSellersRatio and HotBiddersRatio: a bid is for
	// the hot auction with probability 1 - 1/HotAuctionRatio, an auction's
	// seller and a bid's bidder hot with 1 - 1/ratio. Default 2, 4 and 4.
	HotAuctionRatio, HotSellersRatio, HotBiddersRatio int
	// AvgPersonByteSize, AvgAuctionByteSize and AvgBidByteSize size the
	// extra field. Default 200, 500 and 100.
	AvgPersonByteSize, AvgAuctionByteSize, AvgBidByteSize int
}

func (c *NexmarkConfig) setDefaults() {
	def := func(p *int, v int) {
		if *p <= 0 {
			*p = v
		}
	}
	if c.Rate <= 0 {
		c.Rate = 10_000
	}
	def(&c.PersonProportion, 1)
	def(&c.AuctionProportion, 3)
	def(&c.BidProportion, 46)
	def(&c.NumActivePeople, 1000)
	def(&c.NumInFlightAuctions, 100)
	def(&c.HotAuctionRatio, 2)
	def(&c.HotSellersRatio, 4)
	def(&c.HotBiddersRatio, 4)
	def(&c.AvgPersonByteSize, 200)
	def(&c.AvgAuctionByteSize, 500)
	def(&c.AvgBidByteSize, 100)
}

func (c *NexmarkConfig) total() int64 {
	return int64(c.PersonProportion + c.AuctionProportion + c.BidProportion)
}

// NexmarkPersonEvent is a person (the model's Person): a new user.
type NexmarkPersonEvent struct {
	ID                                          int64
	Name, EmailAddress, CreditCard, City, State string
	DateTime                                    int64 // ms since the epoch
	Extra                                       string
}

// NexmarkAuctionEvent is an auction (the model's Auction): an item put up
// for sale by Seller until Expires.
type NexmarkAuctionEvent struct {
	ID                    int64
	ItemName, Description string
	InitialBid, Reserve   int64
	DateTime, Expires     int64 // ms since the epoch
	Seller, Category      int64
	Extra                 string
}

// NexmarkBidEvent is a bid (the model's Bid): Bidder offers Price cents on
// Auction.
type NexmarkBidEvent struct {
	Auction, Bidder, Price int64
	Channel, URL           string
	DateTime               int64 // ms since the epoch
	Extra                  string
}

// NexmarkEvent is one event: Type says which of the three is set.
type NexmarkEvent struct {
	Type    int
	Person  *NexmarkPersonEvent
	Auction *NexmarkAuctionEvent
	Bid     *NexmarkBidEvent
}

// Time returns the event's dateTime.
func (e NexmarkEvent) Time() int64 {
	switch e.Type {
	case NexmarkPerson:
		return e.Person.DateTime
	case NexmarkAuction:
		return e.Auction.DateTime
	}
	return e.Bid.DateTime
}

// AppendJSON appends the event as the nexmark project's Kafka table holds
// it (queries/ddl_kafka.sql, format json): {"event_type": 0, 1 or 2, and
// the sub-object "person", "auction" or "bid" of that type with its
// fields under their names there (emailAddress, itemName, dateTime, ...)}.
// The two other sub-objects, null in Flink's rows, are left out, and the
// times (dateTime, expires) are integers, ms since the epoch, where
// Flink's json format writes TIMESTAMP(3) as SQL text: kstreamd's
// sources[].timestamp reads them as they are, and the queries' hour and
// day are arithmetic on them. Every string the generator makes is plain
// ASCII without quotes or backslashes, so none needs escaping.
func (e NexmarkEvent) AppendJSON(b []byte) []byte {
	str := func(b []byte, name, v string) []byte {
		b = append(b, `,"`...)
		b = append(b, name...)
		b = append(b, `":"`...)
		b = append(b, v...)
		return append(b, '"')
	}
	num := func(b []byte, name string, v int64) []byte {
		b = append(b, `,"`...)
		b = append(b, name...)
		b = append(b, `":`...)
		return strconv.AppendInt(b, v, 10)
	}
	b = append(b, `{"event_type":`...)
	b = strconv.AppendInt(b, int64(e.Type), 10)
	switch e.Type {
	case NexmarkPerson:
		p := e.Person
		b = append(b, `,"person":{"id":`...)
		b = strconv.AppendInt(b, p.ID, 10)
		b = str(b, "name", p.Name)
		b = str(b, "emailAddress", p.EmailAddress)
		b = str(b, "creditCard", p.CreditCard)
		b = str(b, "city", p.City)
		b = str(b, "state", p.State)
		b = num(b, "dateTime", p.DateTime)
		b = str(b, "extra", p.Extra)
	case NexmarkAuction:
		a := e.Auction
		b = append(b, `,"auction":{"id":`...)
		b = strconv.AppendInt(b, a.ID, 10)
		b = str(b, "itemName", a.ItemName)
		b = str(b, "description", a.Description)
		b = num(b, "initialBid", a.InitialBid)
		b = num(b, "reserve", a.Reserve)
		b = num(b, "dateTime", a.DateTime)
		b = num(b, "expires", a.Expires)
		b = num(b, "seller", a.Seller)
		b = num(b, "category", a.Category)
		b = str(b, "extra", a.Extra)
	default:
		d := e.Bid
		b = append(b, `,"bid":{"auction":`...)
		b = strconv.AppendInt(b, d.Auction, 10)
		b = num(b, "bidder", d.Bidder)
		b = num(b, "price", d.Price)
		b = str(b, "channel", d.Channel)
		b = str(b, "url", d.URL)
		b = num(b, "dateTime", d.DateTime)
		b = str(b, "extra", d.Extra)
	}
	return append(b, "}}"...)
}

// NexmarkGenerator is the Nexmark event stream of a NexmarkConfig: event n
// (from 0) has event id n, is a person, an auction or a bid by n mod
// (1+3+46) (the first PersonProportion, the next AuctionProportion, the
// rest bids), and its time is BaseTime + floor(n * 1e6/Rate µs) / 1000
// (GeneratorConfig.timestampForEvent) until Rebase changes the rate. Not
// safe for concurrent use.
type NexmarkGenerator struct {
	cfg NexmarkConfig
	n   int64 // events generated so far: the next event's number and id

	// The timeline from event segFirst on: segBase + floor((n - segFirst)
	// * delayUs) / 1000.
	segFirst, segBase int64
	delayUs           float64

	pcg *rand.PCG
	rng *rand.Rand

	hotURLs      []string
	channelURLs  []string // of channel-i
	reusable     string
	channelNames []string
}

// NewNexmarkGenerator returns the generator of cfg (zero fields take the
// defaults of NexmarkConfig).
func NewNexmarkGenerator(cfg NexmarkConfig) *NexmarkGenerator {
	cfg.setDefaults()
	g := &NexmarkGenerator{cfg: cfg, segBase: cfg.BaseTime, delayUs: 1e6 / cfg.Rate}
	g.pcg = rand.NewPCG(cfg.Seed, 0)
	g.rng = rand.New(g.pcg)
	// The shared strings, drawn once from the seed in the order of
	// BidGenerator's and StringsGenerator's static initialisers.
	shared := rand.New(rand.NewPCG(cfg.Seed, math.MaxUint64))
	rs := make([]byte, nexmarkReusableExtra)
	for i := range rs {
		rs[i] = byte('a' + shared.IntN(26))
	}
	g.reusable = string(rs)
	for range nexmarkHotChannels {
		g.hotURLs = append(g.hotURLs, nexmarkBaseURL(shared))
	}
	g.channelURLs = make([]string, nexmarkChannels)
	g.channelNames = make([]string, nexmarkChannels)
	for i := range g.channelURLs {
		url := nexmarkBaseURL(shared)
		if shared.IntN(10) > 0 {
			// Math.abs(Integer.reverse(i)): the bits of i reversed, as an
			// int32, whose negation wraps as Java's does (channel 1's id is
			// -2147483648).
			r := int32(reverseBits32(uint32(i)))
			if r < 0 {
				r = -r
			}
			url += "&channel_id=" + strconv.FormatInt(int64(r), 10)
		}
		g.channelURLs[i] = url
		g.channelNames[i] = "channel-" + strconv.Itoa(i)
	}
	return g
}

func reverseBits32(x uint32) uint32 {
	var r uint32
	for range 32 {
		r = r<<1 | x&1
		x >>= 1
	}
	return r
}

// nexmarkBaseURL is BidGenerator.getBaseUrl.
func nexmarkBaseURL(r *rand.Rand) string {
	return "https://www.nexmark.com/" + nexmarkString(r, 5, '_') + "/" + nexmarkString(r, 5, '_') + "/" +
		nexmarkString(r, 5, '_') + "/item.htm?query=1"
}

// Count returns the events generated so far (the next event's number).
func (g *NexmarkGenerator) Count() int64 { return g.n }

// TimestampForEvent is GeneratorConfig.timestampForEvent on the current
// timeline: the time of event number n (n at or after the last Rebase).
func (g *NexmarkGenerator) TimestampForEvent(n int64) int64 {
	return g.segBase + int64(float64(n-g.segFirst)*g.delayUs)/1000
}

// Rebase starts a new timeline at the next event: it has time base and
// the events after it follow at rate events per second, as Beam's rate
// shapes change the inter-event delay between steps. The bench calls it
// before producing at a fixed rate in real time, with base the wall clock,
// so the event times of the latency phase are their produce times. base
// below the last event's time is raised to it: event times never decrease.
func (g *NexmarkGenerator) Rebase(base int64, rate float64) {
	if g.n > 0 {
		base = max(base, g.TimestampForEvent(g.n-1))
	}
	g.segFirst, g.segBase, g.delayUs = g.n, base, 1e6/rate
}

// Next returns the next event (NexmarkGenerator.nextEvent).
func (g *NexmarkGenerator) Next() NexmarkEvent {
	c := &g.cfg
	id := g.n
	ts := g.TimestampForEvent(id)
	g.pcg.Seed(c.Seed, uint64(id))
	var ev NexmarkEvent
	switch rem := id % c.total(); {
	case rem < int64(c.PersonProportion):
		ev = NexmarkEvent{Type: NexmarkPerson, Person: g.nextPerson(id, ts)}
	case rem < int64(c.PersonProportion+c.AuctionProportion):
		ev = NexmarkEvent{Type: NexmarkAuction, Auction: g.nextAuction(id, ts)}
	default:
		ev = NexmarkEvent{Type: NexmarkBid, Bid: g.nextBid(id, ts)}
	}
	g.n++
	return ev
}

// lastBase0PersonID is PersonGenerator.lastBase0PersonId: the last valid
// person id (without FIRST_PERSON_ID), the current one when event id is a
// person.
func (g *NexmarkGenerator) lastBase0PersonID(id int64) int64 {
	c := &g.cfg
	epoch, offset := id/c.total(), id%c.total()
	if offset >= int64(c.PersonProportion) {
		offset = int64(c.PersonProportion) - 1
	}
	return epoch*int64(c.PersonProportion) + offset
}

// lastBase0AuctionID is AuctionGenerator.lastBase0AuctionId.
func (g *NexmarkGenerator) lastBase0AuctionID(id int64) int64 {
	c := &g.cfg
	epoch, offset := id/c.total(), id%c.total()
	switch {
	case offset < int64(c.PersonProportion):
		epoch--
		offset = int64(c.AuctionProportion) - 1
	case offset >= int64(c.PersonProportion+c.AuctionProportion):
		offset = int64(c.AuctionProportion) - 1
	default:
		offset -= int64(c.PersonProportion)
	}
	return epoch*int64(c.AuctionProportion) + offset
}

// nextBase0PersonID is PersonGenerator.nextBase0PersonId: one of the
// active people, or a few ahead of the last.
func (g *NexmarkGenerator) nextBase0PersonID(id int64) int64 {
	numPeople := g.lastBase0PersonID(id) + 1
	active := min(numPeople, int64(g.cfg.NumActivePeople))
	return numPeople - active + g.rng.Int64N(active+nexmarkPersonIDLead)
}

// nextBase0AuctionID is AuctionGenerator.nextBase0AuctionId: one of the
// auctions likely still in flight, or a few ahead.
func (g *NexmarkGenerator) nextBase0AuctionID(id int64) int64 {
	maxAuction := g.lastBase0AuctionID(id)
	minAuction := max(maxAuction-int64(g.cfg.NumInFlightAuctions), 0)
	return minAuction + g.rng.Int64N(maxAuction-minAuction+1+nexmarkAuctionIDLead)
}

// nextPrice is PriceGenerator.nextPrice: cents, log-uniform from 1 $ to
// 1,000,000 $ (Math.round rounds half up).
func (g *NexmarkGenerator) nextPrice() int64 {
	return int64(math.Floor(math.Pow(10, g.rng.Float64()*6)*100 + 0.5))
}

// nexmarkString is StringsGenerator.nextString: 3 to maxLength-1
// characters, a to z with one in 13 the special one, trimmed of spaces.
func nexmarkString(r *rand.Rand, maxLength int, special byte) string {
	n := nexmarkMinStringLength + r.IntN(maxLength-nexmarkMinStringLength)
	b := make([]byte, n)
	for i := range b {
		if r.IntN(13) == 0 {
			b[i] = special
		} else {
			b[i] = byte('a' + r.IntN(26))
		}
	}
	return strings.TrimSpace(string(b))
}

// nextExtra is StringsGenerator.nextExtra: a string that brings
// currentSize to desiredAverage on average (+-20%), cut from the reusable
// random text.
func (g *NexmarkGenerator) nextExtra(currentSize, desiredAverage int) string {
	if currentSize > desiredAverage {
		return ""
	}
	desiredAverage -= currentSize
	delta := int(math.Floor(float64(desiredAverage)*0.2 + 0.5))
	size := desiredAverage - delta
	if delta != 0 {
		size += g.rng.IntN(2 * delta)
	}
	off := g.rng.IntN(len(g.reusable) - size)
	return g.reusable[off : off+size]
}

// nextPerson is PersonGenerator.nextPerson.
func (g *NexmarkGenerator) nextPerson(id, ts int64) *NexmarkPersonEvent {
	r := g.rng
	p := &NexmarkPersonEvent{ID: g.lastBase0PersonID(id) + nexmarkFirstPersonID, DateTime: ts}
	p.Name = nexmarkFirstNames[r.IntN(len(nexmarkFirstNames))] + " " + nexmarkLastNames[r.IntN(len(nexmarkLastNames))]
	p.EmailAddress = nexmarkString(r, 7, ' ') + "@" + nexmarkString(r, 5, ' ') + ".com"
	var cc strings.Builder
	for i := range 4 {
		if i > 0 {
			cc.WriteByte(' ')
		}
		cc.WriteString(strconv.Itoa(10000 + r.IntN(10000))[1:]) // %04d
	}
	p.CreditCard = cc.String()
	p.City = nexmarkCities[r.IntN(len(nexmarkCities))]
	p.State = nexmarkStates[r.IntN(len(nexmarkStates))]
	size := 8 + len(p.Name) + len(p.EmailAddress) + len(p.CreditCard) + len(p.City) + len(p.State)
	p.Extra = g.nextExtra(size, g.cfg.AvgPersonByteSize)
	return p
}

// nextAuction is AuctionGenerator.nextAuction.
func (g *NexmarkGenerator) nextAuction(id, ts int64) *NexmarkAuctionEvent {
	c, r := &g.cfg, g.rng
	a := &NexmarkAuctionEvent{ID: g.lastBase0AuctionID(id) + nexmarkFirstAuctionID, DateTime: ts}
	if r.IntN(c.HotSellersRatio) > 0 {
		a.Seller = (g.lastBase0PersonID(id) / nexmarkHotSellerRatio) * nexmarkHotSellerRatio
	} else {
		a.Seller = g.nextBase0PersonID(id)
	}
	a.Seller += nexmarkFirstPersonID
	a.Category = nexmarkFirstCategoryID + int64(r.IntN(nexmarkNumCategories))
	a.InitialBid = g.nextPrice()
	a.Expires = ts + g.nextAuctionLengthMs(id, ts)
	a.ItemName = nexmarkString(r, 20, ' ')
	a.Description = nexmarkString(r, 100, ' ')
	a.Reserve = a.InitialBid + g.nextPrice()
	size := 8 + len(a.ItemName) + len(a.Description) + 8 + 8 + 8 + 8 + 8
	a.Extra = g.nextExtra(size, c.AvgAuctionByteSize)
	return a
}

// nextAuctionLengthMs is AuctionGenerator.nextAuctionLengthMs: uniform in
// [1, 2*horizon], horizon the time until NumInFlightAuctions more auctions
// have been generated, so about that many are open at any time.
func (g *NexmarkGenerator) nextAuctionLengthMs(n, ts int64) int64 {
	c := &g.cfg
	numEventsForAuctions := int64(c.NumInFlightAuctions) * c.total() / int64(c.AuctionProportion)
	horizon := g.TimestampForEvent(n+numEventsForAuctions) - ts
	return 1 + g.rng.Int64N(max(horizon*2, 1))
}

// nextBid is BidGenerator.nextBid.
func (g *NexmarkGenerator) nextBid(id, ts int64) *NexmarkBidEvent {
	c, r := &g.cfg, g.rng
	b := &NexmarkBidEvent{DateTime: ts}
	if r.IntN(c.HotAuctionRatio) > 0 {
		b.Auction = (g.lastBase0AuctionID(id) / nexmarkHotAuctionBatch) * nexmarkHotAuctionBatch
	} else {
		b.Auction = g.nextBase0AuctionID(id)
	}
	b.Auction += nexmarkFirstAuctionID
	if r.IntN(c.HotBiddersRatio) > 0 {
		b.Bidder = (g.lastBase0PersonID(id)/nexmarkHotBidderBatch)*nexmarkHotBidderBatch + 1
	} else {
		b.Bidder = g.nextBase0PersonID(id)
	}
	b.Bidder += nexmarkFirstPersonID
	b.Price = g.nextPrice()
	if r.IntN(nexmarkHotChannelRatio) > 0 {
		i := r.IntN(len(nexmarkHotChannels))
		b.Channel, b.URL = nexmarkHotChannels[i], g.hotURLs[i]
	} else {
		i := r.IntN(nexmarkChannels)
		b.Channel, b.URL = g.channelNames[i], g.channelURLs[i]
	}
	b.Extra = g.nextExtra(8+8+8+8, c.AvgBidByteSize)
	return b
}
