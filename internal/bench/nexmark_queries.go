package bench

import (
	"bytes"
	"container/heap"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/kstreamd/kstreamd/configs/nexmark"
)

// The Nexmark scenarios: nexmark-q<N> runs configs/nexmark/q<N>.yaml (the
// nexmark project's query N translated into a pipeline) over the Nexmark
// generator's events, and checks every committed output's value against an
// independent model of the query written here in Go from the query's SQL:
// the multiset of values (each as canonical JSON) must be equal, not only
// their count.

// nexmarkSeed is the seed of the bench's Nexmark stream.
const nexmarkSeed = 1

// DefaultNexmarkRate is Config.NexmarkRate's default: the nexmark
// project's NexmarkConfiguration.firstEventRate, 10,000 events per second
// of event time.
const DefaultNexmarkRate = 10_000

// nexmarkScenario is the scenario of query q (as "q5") with a model; a
// stateful query sets processed to its keyed operator and
// minLatencyPhase (see Scenario).
func nexmarkScenario(q, doc string, newModel func(partitions int) valueModel, processed string, minLatencyPhase time.Duration) Scenario {
	return Scenario{
		Name: "nexmark-" + q, Doc: doc, Nexmark: q, Processed: processed, MinLatencyPhase: minLatencyPhase,
		NewModel: func(partitions int) Model { return newValueCheck(newModel(partitions)) },
	}
}

// nexmarkTableScenario is the scenario of an updating query q.
func nexmarkTableScenario(q, doc string, newModel func() tableModel) Scenario {
	return Scenario{
		Name: "nexmark-" + q, Doc: doc, Nexmark: q,
		NewModel: func(int) Model { return &tableCheck{m: newModel()} },
	}
}

// nexmarkSettlingScenario is the scenario of an updating query q whose
// count of outputs depends on the order of arrival (tableCheck.atLeast);
// processed names its keyed operator, which the throughput phase waits on.
func nexmarkSettlingScenario(q, doc string, newModel func() tableModel, processed string) Scenario {
	return Scenario{
		Name: "nexmark-" + q, Doc: doc, Nexmark: q, Processed: processed,
		NewModel: func(int) Model { return &tableCheck{m: newModel(), atLeast: true} },
	}
}

// nexmarkScenarios are the Nexmark queries kstreamd expresses (README
// "Nexmark" lists the others and the feature each needs).
func nexmarkScenarios() []Scenario {
	stateless := func(f func(*NexmarkBidEvent) []any) func(int) valueModel {
		return func(int) valueModel { return bidMap(f) }
	}
	return []Scenario{
		nexmarkScenario("q0", "Nexmark q0: every bid, projected (pass-through)", stateless(nexmarkQ0), "", 0),
		nexmarkScenario("q1", "Nexmark q1: every bid with its price in euros (0.908 * price)", stateless(nexmarkQ1), "", 0),
		nexmarkScenario("q2", "Nexmark q2: the bids of every 123rd auction", stateless(nexmarkQ2), "", 0),
		nexmarkScenario("q3", "Nexmark q3: category-10 auctions joined with their OR/ID/CA sellers (regular join, on pebble)",
			func(int) valueModel { return newNexmarkQ3() }, "", 0),
		nexmarkSettlingScenario("q4", "Nexmark q4: per category the average closing price (q9's join, max per auction, avg over its changelog; on pebble)",
			func() tableModel { return newNexmarkQ4() }, "closing"),
		nexmarkScenario("q5", "Nexmark q5: per 10 s window every 2 s the auctions with the most bids (two windows and a window join, on pebble)",
			func(partitions int) valueModel { return newNexmarkQ5(partitions) }, "counts", 2*(nexmarkQ5Size+4000)*time.Millisecond),
		nexmarkScenario("q7", "Nexmark q7: the bids of each 10 s window's highest price (window max joined back by interval join, on pebble)",
			func(partitions int) valueModel { return newNexmarkQ7(partitions) }, "maxes", 2*(nexmarkQ7Size+4000)*time.Millisecond),
		nexmarkScenario("q8", "Nexmark q8: persons who opened an auction in the 10 s window they registered in (window join, on pebble)",
			func(partitions int) valueModel { return newNexmarkQ8(partitions) }, "q8", 2*(nexmarkQ8Size+4000)*time.Millisecond),
		nexmarkSettlingScenario("q9", "Nexmark q9: per auction the winning bid (interval join of auctions and bids while open, top_n 1; on pebble)",
			func() tableModel { return newNexmarkQ9() }, "top"),
		nexmarkScenario("q11", "Nexmark q11: bids per bidder per session (10 s gap) on event time, on pebble",
			func(partitions int) valueModel { return newNexmarkQ11(partitions) }, "sessions", 2*nexmarkQ11Close),
		func() Scenario {
			s := nexmarkScenario("q13", "Nexmark q13: every bid with its side input row (auction mod 10,000; global_table_join)", stateless(nexmarkQ13), "", 0)
			s.RuleRecords = nexmarkSideInput()
			return s
		}(),
		nexmarkScenario("q14", "Nexmark q14: bids of 1M to 50M euros with time of day and the c's of extra", stateless(nexmarkQ14), "", 0),
		nexmarkSettlingScenario("q15", "Nexmark q15: per day, bids, bidders and auctions in all and per price rank (updating, mini_batch, on pebble)",
			func() tableModel { return newNexmarkDaily(nexmarkQ15Key, nexmarkQ15Row, true) }, "daily"),
		nexmarkSettlingScenario("q16", "Nexmark q16: per channel and day, q15's figures and the last minute (updating, mini_batch, on pebble)",
			func() tableModel { return newNexmarkDaily(nexmarkQ16Key, nexmarkQ16Row, true) }, "daily"),
		nexmarkSettlingScenario("q17", "Nexmark q17: per auction and day, bids per price rank and min, max, avg, sum of price (updating, mini_batch, on pebble)",
			func() tableModel { return newNexmarkDaily(nexmarkQ17Key, nexmarkQ17Row, false) }, "daily"),
		nexmarkSettlingScenario("q18", "Nexmark q18: per bidder and auction the latest bid (dedup keep: last, a changelog; on pebble)",
			func() tableModel { return newNexmarkQ18() }, "last"),
		nexmarkSettlingScenario("q19", "Nexmark q19: per auction the 10 highest bids (top_n, a changelog; on pebble)",
			func() tableModel { return newNexmarkQ19() }, "top"),
		nexmarkScenario("q20", "Nexmark q20: bids joined with their auction when of category 10 (regular join, on pebble)",
			func(int) valueModel { return newNexmarkQ20() }, "", 0),
		nexmarkScenario("q21", "Nexmark q21: bids of the big channels or with a channel_id, with that id", stateless(nexmarkQ21), "", 0),
		nexmarkScenario("q22", "Nexmark q22: every bid with the first three directories of its url", stateless(nexmarkQ22), "", 0),
		nexmarkScenario("q23", "Nexmark q23: bids joined with their bidder and each auction the bidder sells (two regular joins, on pebble)",
			func(int) valueModel { return newNexmarkQ23() }, "", 0),
	}
}

// nexmarkSource is the input of a Nexmark run: the generator's events,
// each on partition (event number mod partitions), the round-robin of the
// nexmark project's Kafka table, with its dateTime as the Kafka timestamp.
type nexmarkSource struct {
	g *NexmarkGenerator
}

// newNexmarkSource returns the stream of a run loading records events at
// rate events per second of event time, timed so that the last of them is
// at now: the throughput phase reads a backlog from the past.
func newNexmarkSource(records int, rate float64, now time.Time) *nexmarkSource {
	span := int64(float64(records) / rate * 1000)
	return &nexmarkSource{g: NewNexmarkGenerator(NexmarkConfig{Seed: nexmarkSeed, Rate: rate, BaseTime: now.UnixMilli() - span})}
}

func (s *nexmarkSource) nextItem(partitions int) Item {
	n := s.g.Count()
	ev := s.g.Next()
	return Item{ID: n, Nexmark: &ev, Time: ev.Time(), Partition: int32(n % int64(partitions))}
}

// live rebases the stream on the wall clock at rate events per second:
// the latency phase produces each event at its time.
func (s *nexmarkSource) live(rate float64) { s.g.Rebase(time.Now().UnixMilli(), rate) }

// valueModel is a model that knows the values of the outputs: Values
// returns those the item causes (each a JSON-marshalable value).
type valueModel interface {
	Values(Item) []any
}

// valueCheck is the Model of a valueModel: it counts the outputs and
// keeps the multiset of their values.
type valueCheck struct {
	m    valueModel
	want *multiset
}

func newValueCheck(m valueModel) *valueCheck { return &valueCheck{m: m, want: newMultiset()} }

// Outputs implements Model.
func (c *valueCheck) Outputs(it Item) int {
	vs := c.m.Values(it)
	for _, v := range vs {
		b, err := json.Marshal(v)
		if err != nil {
			panic(fmt.Sprintf("bench: model value %v: %v", v, err)) // the models' values are maps of numbers and strings
		}
		c.want.addJSON(b)
	}
	return len(vs)
}

// Processed implements ProcessedModel: the model's count of records the
// scenario's Processed operator receives for it, 0 when it has none.
func (c *valueCheck) Processed(it Item) int {
	if p, ok := c.m.(interface{ Processed(Item) int }); ok {
		return p.Processed(it)
	}
	return 0
}

// tableModel is the model of an updating query (a GROUP BY without a
// window), whose outputs are an upsert stream keyed by the group: Updates
// counts the outputs an item causes, Final gives the last row of every key
// (the query's result table), by the outputs' Kafka key.
type tableModel interface {
	Updates(Item) int
	Final() map[string]any
}

// tableCheck is the Model of a tableModel. The rows in between depend on
// the order in which the operator receives the records of different
// partitions, so the run checks the count of outputs and the last output
// of each key against the model's table.
//
// With atLeast the count of outputs depends on that order too (a keep-last
// dedup or a top-N emits an update only for a record that beats the kept
// one, and which does depends on which came first): Updates then counts
// the outputs every order gives (a lower bound), and the run, once that
// many are read, waits for the table to settle on the model's (see
// reader.settle).
type tableCheck struct {
	m       tableModel
	atLeast bool
}

// Outputs implements Model.
func (c *tableCheck) Outputs(it Item) int { return c.m.Updates(it) }

// Processed implements ProcessedModel as valueCheck does.
func (c *tableCheck) Processed(it Item) int {
	if p, ok := c.m.(interface{ Processed(Item) int }); ok {
		return p.Processed(it)
	}
	return 0
}

// anyOf is a row of a model's table whose value may be any of these: the
// query's result is not unique (rows equal in the ORDER BY of a
// ROW_NUMBER, which the SQL leaves in no order).
type anyOf []any

// wantTable is a model's table prepared for comparing: per key the hashes
// of the canonical JSON of the values it may have, and their text.
type wantTable map[string]wantRow

type wantRow struct {
	hashes []uint64
	text   string
}

// rowHashes is a row of a model's table given as the hashes (rowHash) of
// the values it may have, for a model that keeps no more of its rows.
type rowHashes []uint64

// rowHash is the hash a table keeps of v (a model's value): of its
// canonical JSON.
func rowHash(v any) uint64 {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("bench: model value %v: %v", v, err)) // the models' values are maps of numbers and strings
	}
	c, err := canonicalJSON(b)
	if err != nil {
		panic(fmt.Sprintf("bench: model value %s: %v", b, err))
	}
	return hash64(c)
}

// prepare returns want as a wantTable.
func prepare(want map[string]any) (wantTable, error) {
	w := make(wantTable, len(want))
	for k, v := range want {
		if hs, ok := v.(rowHashes); ok {
			w[k] = wantRow{hashes: hs, text: fmt.Sprintf("a value of hash %x", []uint64(hs))}
			continue
		}
		alts, ok := v.(anyOf)
		if !ok {
			alts = anyOf{v}
		}
		var r wantRow
		var texts []string
		for _, a := range alts {
			b, err := json.Marshal(a)
			if err != nil {
				return nil, err
			}
			c, err := canonicalJSON(b)
			if err != nil {
				return nil, err
			}
			r.hashes = append(r.hashes, hash64(c))
			texts = append(texts, c)
		}
		r.text = strings.Join(texts, " or ")
		w[k] = r
	}
	return w, nil
}

// table is the last value of each key of a topic: a hash of its
// canonical JSON, and the value itself while there are at most
// multisetKeep keys, to name the differences.
type table struct {
	rows map[string]uint64
	vals map[string]string
	bad  int64
}

func newTable() *table { return &table{rows: map[string]uint64{}, vals: map[string]string{}} }

func hash64(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// put records value as key's latest, or removes key when value is nil (a
// tombstone); a value that is not JSON is counted as bad.
func (t *table) put(key, value []byte) {
	if value == nil { // a tombstone (an upsert sink's -D): compaction drops the key
		delete(t.rows, string(key))
		if t.vals != nil {
			delete(t.vals, string(key))
		}
		return
	}
	c, err := canonicalJSON(value)
	if err != nil {
		t.bad++
		c = "not JSON: " + string(value)
	}
	t.rows[string(key)] = hash64(c)
	if t.vals != nil {
		t.vals[string(key)] = c
		if len(t.vals) > multisetKeep {
			t.vals = nil
		}
	}
}

// diff returns "" when t holds exactly the rows of want, else what
// differs (up to three keys). A value of want that is an anyOf matches
// any of its values.
func (t *table) diff(want map[string]any) string {
	w, err := prepare(want)
	if err != nil {
		return err.Error()
	}
	return t.diffWant(w)
}

// diffWant is diff of a prepared table.
func (t *table) diffWant(want wantTable) string {
	got := func(k string) string {
		if t.vals != nil {
			return t.vals[k]
		}
		return fmt.Sprintf("a value of hash %x", t.rows[k])
	}
	var d []string
	for k, r := range want {
		if h, ok := t.rows[k]; !ok {
			d = append(d, fmt.Sprintf("key %q: missing, want %s", k, r.text))
		} else if !slices.Contains(r.hashes, h) {
			d = append(d, fmt.Sprintf("key %q: %s, want %s", k, got(k), r.text))
		}
	}
	for k := range t.rows {
		if _, ok := want[k]; !ok {
			d = append(d, fmt.Sprintf("key %q: %s, not expected", k, got(k)))
		}
	}
	if len(d) == 0 && t.bad == 0 {
		return ""
	}
	slices.Sort(d)
	return fmt.Sprintf("%d keys (%d values not JSON) against %d expected: %s", len(t.rows), t.bad, len(want), strings.Join(d[:min(3, len(d))], "; "))
}

// multiset is an order-independent digest of JSON values: their count and
// the sums (mod 2^64) of two hashes of each one's canonical form
// (canonicalJSON), and the values themselves while there are at most
// multisetKeep, to name the differences.
type multiset struct {
	n, bad     int64
	sum1, sum2 uint64
	vals       map[string]int
}

// multisetKeep is how many values a multiset keeps to report differences.
const multisetKeep = 20_000

func newMultiset() *multiset { return &multiset{vals: map[string]int{}} }

// addJSON adds the value b; a value that is not JSON counts as bad (and
// never equals anything).
func (s *multiset) addJSON(b []byte) {
	c, err := canonicalJSON(b)
	if err != nil {
		s.bad++
		c = "not JSON: " + string(b)
	}
	h1, h2 := fnv.New64a(), fnv.New64()
	h1.Write([]byte(c))
	h2.Write([]byte(c))
	s.n++
	s.sum1 += h1.Sum64()
	s.sum2 += h2.Sum64()
	if s.vals != nil {
		s.vals[c]++
		if len(s.vals) > multisetKeep {
			s.vals = nil
		}
	}
}

// diff returns "" when s and o hold the same values, else what differs
// (up to three values on each side when both kept them).
func (s *multiset) diff(o *multiset) string {
	if s.n == o.n && s.sum1 == o.sum1 && s.sum2 == o.sum2 && s.bad == 0 && o.bad == 0 {
		return ""
	}
	d := fmt.Sprintf("%d values (%d not JSON) against %d expected", s.n, s.bad, o.n)
	if s.vals == nil || o.vals == nil {
		return d + ", digests differ"
	}
	only := func(a, b map[string]int) []string {
		var r []string
		for v, n := range a {
			if n > b[v] {
				r = append(r, fmt.Sprintf("%s (x%d)", v, n-b[v]))
			}
		}
		slices.Sort(r)
		return r[:min(3, len(r))]
	}
	return fmt.Sprintf("%s; committed, not expected: %v; expected, not committed: %v", d, only(s.vals, o.vals), only(o.vals, s.vals))
}

// canonicalJSON is b with object keys sorted, no spaces, and numbers in
// one spelling: an integer as its digits, any other number as Go's
// shortest float64 text (so 1.0, 1 and 1e0 are one value, as are a JSON
// double and the same double written by another encoder).
func canonicalJSON(b []byte) (string, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return "", err
	}
	if d.More() {
		return "", fmt.Errorf("trailing data after the value")
	}
	out, err := json.Marshal(normNumbers(v))
	return string(out), err
}

func normNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return json.Number(strconv.FormatInt(i, 10))
		}
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil {
			return x
		}
		if f == float64(int64(f)) && f > -1e15 && f < 1e15 {
			return json.Number(strconv.FormatInt(int64(f), 10))
		}
		return json.Number(strconv.FormatFloat(f, 'g', -1, 64))
	case map[string]any:
		for k, e := range x {
			x[k] = normNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = normNumbers(e)
		}
	}
	return v
}

// nexmarkPipelineYAML returns configs/nexmark/<q>.yaml set up for one
// bench run: its job name and parallelism, data dir, brokers, checkpoints
// (interval, incremental, 1m timeout), metrics off, the first source's
// topic (on_error fail) and the first sink's name ("sink"), topic and
// delivery replaced;
// its operators, state backend and source time settings kept as written.
// side, when set, is the topic of the source called side_input (q13's
// side input table, which the scenario's RuleRecords fill).
func nexmarkPipelineYAML(q, job, dataDir string, brokers []string, in, side, out, delivery string, parallelism int, interval string) (string, error) {
	file, err := nexmark.Queries.ReadFile(q + ".yaml")
	if err != nil {
		return "", fmt.Errorf("bench: nexmark %s: %w", q, err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(file, &doc); err != nil {
		return "", fmt.Errorf("bench: configs/nexmark/%s.yaml: %w", q, err)
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return "", fmt.Errorf("bench: configs/nexmark/%s.yaml: not a mapping", q)
	}
	root := doc.Content[0]
	var errs []string
	set := func(m *yaml.Node, key, snippet string) {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(snippet), &n); err != nil {
			errs = append(errs, err.Error())
			return
		}
		setKey(m, key, n.Content[0])
	}
	jobNode := mapValue(root, "job")
	if jobNode == nil {
		return "", fmt.Errorf("bench: configs/nexmark/%s.yaml: no job", q)
	}
	set(jobNode, "name", job)
	set(jobNode, "parallelism", strconv.Itoa(parallelism))
	set(root, "data_dir", strconv.Quote(dataDir))
	set(root, "kafka", fmt.Sprintf("{brokers: [%s], client_id: kstreamd-bench}", strings.Join(brokers, ", ")))
	set(root, "checkpoints", fmt.Sprintf("{interval: %s, incremental: true, timeout: 1m}", interval))
	set(root, "metrics", `{address: ""}`)
	first := func(key string) *yaml.Node {
		if l := mapValue(root, key); l != nil && l.Kind == yaml.SequenceNode && len(l.Content) > 0 {
			return l.Content[0]
		}
		errs = append(errs, "no "+key)
		return &yaml.Node{Kind: yaml.MappingNode}
	}
	src, sink := first("sources"), first("sinks")
	set(src, "topic", in)
	if side != "" {
		found := false
		if l := mapValue(root, "sources"); l != nil {
			for _, n := range l.Content {
				if v := mapValue(n, "name"); v != nil && v.Value == "side_input" {
					set(n, "topic", side)
					found = true
				}
			}
		}
		if !found {
			errs = append(errs, "no source side_input")
		}
	}
	set(src, "on_error", "fail")
	set(sink, "name", "sink") // the name jobTarget.committed counts
	set(sink, "topic", out)
	set(sink, "delivery", delivery)
	deleteKey(sink, "transaction_timeout")
	if delivery == ExactlyOnce {
		set(sink, "transaction_timeout", "10m") // as pipelineYAML
	}
	if len(errs) > 0 {
		return "", fmt.Errorf("bench: configs/nexmark/%s.yaml: %s", q, strings.Join(errs, "; "))
	}
	b, err := yaml.Marshal(&doc)
	return string(b), err
}

// mapValue returns the value of key in mapping m, nil when absent.
func mapValue(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// setKey sets key in mapping m to v.
func setKey(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, v)
}

// deleteKey removes key from mapping m.
func deleteKey(m *yaml.Node, key string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content = slices.Delete(m.Content, i, i+2)
			return
		}
	}
}

// bidMap is the model of a stateless query over bids: f gives the
// outputs of one bid; other events give none.
type bidMap func(*NexmarkBidEvent) []any

func (f bidMap) Values(it Item) []any {
	if it.Nexmark == nil || it.Nexmark.Type != NexmarkBid {
		return nil
	}
	return f(it.Nexmark.Bid)
}

// euros is 0.908 * price as DECIMAL(23, 3) gives it: price * 908 / 1000
// exactly; as a float64 the one nearest to that decimal.
func euros(price int64) float64 { return float64(price*908) / 1000 }

// nexmarkQ0: SELECT auction, bidder, price, dateTime, extra FROM bid.
func nexmarkQ0(b *NexmarkBidEvent) []any {
	return []any{map[string]any{"auction": b.Auction, "bidder": b.Bidder, "price": b.Price, "dateTime": b.DateTime, "extra": b.Extra}}
}

// nexmarkQ1: SELECT auction, bidder, 0.908 * price as price, dateTime,
// extra FROM bid.
func nexmarkQ1(b *NexmarkBidEvent) []any {
	return []any{map[string]any{"auction": b.Auction, "bidder": b.Bidder, "price": euros(b.Price), "dateTime": b.DateTime, "extra": b.Extra}}
}

// nexmarkQ2: SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0.
func nexmarkQ2(b *NexmarkBidEvent) []any {
	if b.Auction%123 != 0 {
		return nil
	}
	return []any{map[string]any{"auction": b.Auction, "price": b.Price}}
}

// nexmarkQ14: the bids with 1,000,000 < 0.908 * price < 50,000,000 (as
// decimals), with the time of day of their UTC hour and the count of 'c'
// in extra.
func nexmarkQ14(b *NexmarkBidEvent) []any {
	if cents := b.Price * 908; cents <= 1_000_000_000 || cents >= 50_000_000_000 {
		return nil
	}
	hour := time.UnixMilli(b.DateTime).UTC().Hour()
	kind := "otherTime"
	switch {
	case hour >= 8 && hour <= 18:
		kind = "dayTime"
	case hour <= 6 || hour >= 20:
		kind = "nightTime"
	}
	return []any{map[string]any{"auction": b.Auction, "bidder": b.Bidder, "price": euros(b.Price), "bidTimeType": kind,
		"dateTime": b.DateTime, "extra": b.Extra, "c_counts": strings.Count(b.Extra, "c")}}
}

// nexmarkChannelID is q21's REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2).
var nexmarkChannelID = regexp.MustCompile(`(&|^)channel_id=([^&]*)`)

// nexmarkQ21: the bids whose url has a channel_id or whose channel is
// one of the four (case-insensitive), with the channel's number or that id.
func nexmarkQ21(b *NexmarkBidEvent) []any {
	m := nexmarkChannelID.FindStringSubmatch(b.URL)
	ids := map[string]string{"apple": "0", "google": "1", "facebook": "2", "baidu": "3"}
	id, big := ids[strings.ToLower(b.Channel)]
	if !big {
		if m == nil {
			return nil
		}
		id = m[2]
	}
	return []any{map[string]any{"auction": b.Auction, "bidder": b.Bidder, "price": b.Price, "channel": b.Channel, "channel_id": id}}
}

// nexmarkQ22: every bid with SPLIT_INDEX(url, '/', 3), 4 and 5 (null past
// the last piece).
func nexmarkQ22(b *NexmarkBidEvent) []any {
	parts := strings.Split(b.URL, "/")
	dir := func(i int) any {
		if i < len(parts) {
			return parts[i]
		}
		return nil
	}
	return []any{map[string]any{"auction": b.Auction, "bidder": b.Bidder, "price": b.Price, "channel": b.Channel,
		"dir1": dir(3), "dir2": dir(4), "dir3": dir(5)}}
}

// nexmarkQ11Gap is q11's SESSION gap, nexmarkQ11Close the event time after
// a bidder's last bid until its session fires: the gap plus the source's
// 4 s out-of-orderness.
const (
	nexmarkQ11Gap   = 10_000
	nexmarkQ11Close = (nexmarkQ11Gap + 4000) * time.Millisecond
)

// nexmarkQ11 models
//
//	SELECT bidder, count(*) as bid_count, SESSION_START(dateTime, 10s),
//	  SESSION_END(dateTime, 10s) FROM bid GROUP BY bidder, SESSION(dateTime, 10s)
//
// as Flink's event-time session windows run it: a bid at t is the window
// [t, t+10s); windows of one bidder that intersect (Flink's
// TimeWindow.intersects: touching counts) merge. A session fires once the
// watermark (the least over partitions of their largest time minus 4 s
// minus 1 ms) reaches its end minus 1 ms. The generator's times never
// decrease, so the model merges in generation order; no bid is late.
type nexmarkQ11 struct {
	partMax []int64 // largest time per partition, -1 before the first
	seen    int
	open    map[int64]*q11Session
	ends    q11Heap
}

type q11Session struct {
	bidder, start, end, count int64
	fired                     bool
}

// q11Due is a session's end as it was when pushed; stale when the session
// was extended since.
type q11Due struct {
	end int64
	s   *q11Session
}

type q11Heap []q11Due

func (h q11Heap) Len() int           { return len(h) }
func (h q11Heap) Less(i, j int) bool { return h[i].end < h[j].end }
func (h q11Heap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *q11Heap) Push(x any)        { *h = append(*h, x.(q11Due)) }
func (h *q11Heap) Pop() any          { x := (*h)[len(*h)-1]; *h = (*h)[:len(*h)-1]; return x }

func newNexmarkQ11(partitions int) *nexmarkQ11 {
	m := &nexmarkQ11{partMax: make([]int64, partitions), open: map[int64]*q11Session{}}
	for i := range m.partMax {
		m.partMax[i] = -1
	}
	return m
}

// Processed implements the Processed count: the session window receives
// every bid.
func (m *nexmarkQ11) Processed(it Item) int {
	if it.Nexmark != nil && it.Nexmark.Type == NexmarkBid {
		return 1
	}
	return 0
}

// Values implements valueModel: the sessions the watermark closes once it
// is read.
func (m *nexmarkQ11) Values(it Item) []any {
	if m.partMax[it.Partition] < 0 {
		m.seen++
	}
	m.partMax[it.Partition] = max(m.partMax[it.Partition], it.Time)
	if it.Nexmark.Type == NexmarkBid {
		b := it.Nexmark.Bid
		t := b.DateTime
		s := m.open[b.Bidder]
		if s != nil && !s.fired && t <= s.end { // [t, t+gap) intersects [start, end)
			s.end = max(s.end, t+nexmarkQ11Gap)
			s.count++
		} else {
			// The previous session, if any, no longer grows; it fires
			// from the heap when the watermark passes its end.
			s = &q11Session{bidder: b.Bidder, start: t, end: t + nexmarkQ11Gap, count: 1}
			m.open[b.Bidder] = s
		}
		heap.Push(&m.ends, q11Due{end: s.end, s: s})
	}
	if m.seen < len(m.partMax) {
		return nil
	}
	wm := slices.Min(m.partMax) - 4000 - 1
	var out []any
	for len(m.ends) > 0 && m.ends[0].end-1 <= wm {
		d := heap.Pop(&m.ends).(q11Due)
		s := d.s
		if s.fired || s.end != d.end {
			continue // extended since: a later entry fires it
		}
		s.fired = true
		if m.open[s.bidder] == s {
			delete(m.open, s.bidder)
		}
		out = append(out, map[string]any{"bidder": s.bidder, "bid_count": s.count,
			"starttime": rfc3339ms(s.start), "endtime": rfc3339ms(s.end)})
	}
	return out
}

// rfc3339ms is t (ms since the epoch) as the window operator writes
// window bounds: RFC 3339 in UTC with the fraction's trailing zeros cut.
func rfc3339ms(t int64) string { return time.UnixMilli(t).UTC().Format(time.RFC3339Nano) }

// nexmarkDay is DATE_FORMAT(dateTime, 'yyyy-MM-dd') in UTC.
func nexmarkDay(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.DateOnly) }

// nexmarkGroup is what q15, q16 and q17 keep of the bids of one group.
type nexmarkGroup struct {
	first                        *NexmarkBidEvent
	bids                         [4]int64 // all, rank 1, 2, 3
	bidders, auctions            [4]map[int64]bool
	minPrice, maxPrice, sumPrice int64
	lastTime                     int64
}

// nexmarkRank is a price's rank: 1 below 10,000 cents, 2 below 1,000,000,
// else 3.
func nexmarkRank(price int64) int {
	switch {
	case price < 10_000:
		return 1
	case price < 1_000_000:
		return 2
	}
	return 3
}

// nexmarkDaily models q15, q16 and q17: the groups of the bids by key,
// each output row made by row from its group. The aggregate runs with
// mini_batch, so a group emits one row per batch it has bids in, and how
// the bids fall into batches depends on the arrival order and on when
// checkpoints and watermarks come: Updates counts one output per group
// (its first bid's: a lower bound, every group emits at least once), and
// the run checks the final table exactly, each group's last row against
// row's (tableCheck.atLeast); Processed counts every bid, which the
// aggregate ("daily") receives.
// distinct says whether the rows count distinct bidders and auctions (q15,
// q16); q17's groups, one per auction and day, keep no such sets.
type nexmarkDaily struct {
	key      func(*NexmarkBidEvent) string
	row      func(*nexmarkGroup) map[string]any
	distinct bool
	groups   map[string]*nexmarkGroup
}

func newNexmarkDaily(key func(*NexmarkBidEvent) string, row func(*nexmarkGroup) map[string]any, distinct bool) *nexmarkDaily {
	return &nexmarkDaily{key: key, row: row, distinct: distinct, groups: map[string]*nexmarkGroup{}}
}

// Updates implements tableModel.
func (m *nexmarkDaily) Updates(it Item) int {
	if it.Nexmark == nil || it.Nexmark.Type != NexmarkBid {
		return 0
	}
	b := it.Nexmark.Bid
	k := m.key(b)
	g := m.groups[k]
	if g == nil {
		g = &nexmarkGroup{first: b, minPrice: b.Price, maxPrice: b.Price}
		if m.distinct {
			for i := range g.bidders {
				g.bidders[i], g.auctions[i] = map[int64]bool{}, map[int64]bool{}
			}
		}
		m.groups[k] = g
	}
	r := nexmarkRank(b.Price)
	for _, i := range []int{0, r} {
		g.bids[i]++
		if m.distinct {
			g.bidders[i][b.Bidder] = true
			g.auctions[i][b.Auction] = true
		}
	}
	g.minPrice, g.maxPrice, g.sumPrice = min(g.minPrice, b.Price), max(g.maxPrice, b.Price), g.sumPrice+b.Price
	g.lastTime = max(g.lastTime, b.DateTime)
	if g.bids[0] == 1 {
		return 1 // the group's first bid: its row is written at least once
	}
	return 0
}

// Processed implements the Processed count: the aggregate receives every
// bid.
func (m *nexmarkDaily) Processed(it Item) int { return (&nexmarkQ18{}).Processed(it) }

// Final implements tableModel.
func (m *nexmarkDaily) Final() map[string]any {
	out := make(map[string]any, len(m.groups))
	for k, g := range m.groups {
		out[k] = m.row(g)
	}
	return out
}

func nexmarkQ15Key(b *NexmarkBidEvent) string { return nexmarkDay(b.DateTime) }

// nexmarkQ15Row is q15's row of a day: the bids, the distinct bidders
// and auctions, in all and per rank.
func nexmarkQ15Row(g *nexmarkGroup) map[string]any {
	row := map[string]any{"day": nexmarkDay(g.first.DateTime)}
	for i, name := range []string{"total", "rank1", "rank2", "rank3"} {
		row[name+"_bids"] = g.bids[i]
		row[name+"_bidders"] = len(g.bidders[i])
		row[name+"_auctions"] = len(g.auctions[i])
	}
	return row
}

func nexmarkQ16Key(b *NexmarkBidEvent) string { return b.Channel + "|" + nexmarkDay(b.DateTime) }

// nexmarkQ16Row is q16's row of a channel's day: q15's figures, the
// channel, and max(HH:mm) of its bids.
func nexmarkQ16Row(g *nexmarkGroup) map[string]any {
	row := nexmarkQ15Row(g)
	row["channel"] = g.first.Channel
	row["minute"] = time.UnixMilli(g.lastTime).UTC().Format("15:04")
	return row
}

func nexmarkQ17Key(b *NexmarkBidEvent) string {
	return strconv.FormatInt(b.Auction, 10) + "|" + nexmarkDay(b.DateTime)
}

// nexmarkQ17Row is q17's row of an auction's day: the bids in all and per
// rank, and the least, largest, average (BIGINT: truncated) and total
// price.
func nexmarkQ17Row(g *nexmarkGroup) map[string]any {
	return map[string]any{"auction": g.first.Auction, "day": nexmarkDay(g.first.DateTime),
		"total_bids": g.bids[0], "rank1_bids": g.bids[1], "rank2_bids": g.bids[2], "rank3_bids": g.bids[3],
		"min_price": g.minPrice, "max_price": g.maxPrice, "avg_price": g.sumPrice / g.bids[0], "sum_price": g.sumPrice}
}
