package expression

import (
	"testing"
	"time"
)

const benchRecord = `{"event_id":"e-123","user":{"id":"u42","country":"NL"},"amount":512,"currency":"EUR","type":"card","tags":["a","b"]}`

// benchExprs are the record shapes' typical expressions: a filter, a
// compound filter, a projection and a flat_map selector; then two that
// walk or read a record's list or string, so run with cost tracking.
var benchExprs = []struct{ name, src string }{
	{"filter", `amount > 100`},
	{"and", `user.country == 'NL' && amount >= 10`},
	{"projection", `{"id": event_id, "amount": amount}`},
	{"list", `tags`},
	{"tracked_exists", `tags.exists(t, t == 'b')`},
	{"tracked_concat", `event_id + '/' + currency`},
}

func benchInput(b *testing.B) *Input {
	v, err := DecodeJSON([]byte(benchRecord))
	if err != nil {
		b.Fatal(err)
	}
	return &Input{
		Value:     v,
		Key:       []byte("u42"),
		Timestamp: time.UnixMilli(1700000000000),
		Headers:   []Header{{Key: "trace", Value: []byte("t-1")}},
	}
}

func BenchmarkCompile(b *testing.B) {
	for _, e := range benchExprs {
		b.Run(e.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Compile(e.src); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEval evaluates on a reused Env, Reset per record as an operator
// goroutine would.
func BenchmarkEval(b *testing.B) {
	in := benchInput(b)
	for _, e := range benchExprs {
		p, err := Compile(e.src)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(e.name, func(b *testing.B) {
			b.ReportAllocs()
			var env Env
			for b.Loop() {
				env.Reset(in)
				if _, err := p.Eval(&env); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEvalNewEnv builds a new Env per evaluation.
func BenchmarkEvalNewEnv(b *testing.B) {
	in := benchInput(b)
	p, err := Compile(`amount > 100`)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.EvalBool(NewEnv(in)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEnvShared compares three expressions that read headers and the
// key on one record: one Env shared by all, against one Env each.
func BenchmarkEnvShared(b *testing.B) {
	in := benchInput(b)
	var ps []*Program
	for _, src := range []string{`headers.trace == 't-1'`, `key == 'u42'`, `'trace' in headers && key != null`} {
		p, err := Compile(src, ExpectBool())
		if err != nil {
			b.Fatal(err)
		}
		ps = append(ps, p)
	}
	b.Run("shared", func(b *testing.B) {
		b.ReportAllocs()
		var env Env
		for b.Loop() {
			env.Reset(in)
			for _, p := range ps {
				if _, err := p.EvalBool(&env); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("each", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, p := range ps {
				if _, err := p.EvalBool(NewEnv(in)); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

func BenchmarkDecodeJSON(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeJSON([]byte(benchRecord)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeJSON(b *testing.B) {
	v := map[string]any{"id": "e-123", "amount": int64(512)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeJSON(v); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEvalToCostLimit is the time a runaway expression runs before
// DefaultMaxCost stops it.
func BenchmarkEvalToCostLimit(b *testing.B) {
	arr := make([]any, 1000)
	for i := range arr {
		arr[i] = int64(i)
	}
	env := NewEnv(&Input{Value: map[string]any{"arr": arr}})
	p, err := Compile(`arr.all(a, arr.all(b, arr.all(c, true)))`)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Eval(env); err == nil {
			b.Fatal("no cost limit")
		}
	}
}

// nexmarkBid is one bid event as the bench's Nexmark generator writes it.
var nexmarkBid = []byte(`{"event_type":2,"person":null,"auction":null,"bid":{"auction":1007,"bidder":2001,"price":4617,"channel":"channel-5901","url":"https://www.nexmark.com/aaaa/bbbb/item.htm?query=1&channel_id=1153433600","dateTime":1700000000123,"extra":"ccccccccccccccccccccc"}}`)

// BenchmarkNexmarkQ1 evaluates nexmark q1's expressions on one bid
// (configs/nexmark/q1.yaml: the source's timestamp, the filter and the
// map, one Env each over the shared Doc, as a chain does), with the map's
// result encoded (EvalJSON, as map does).
func BenchmarkNexmarkQ1(b *testing.B) {
	benchNexmarkChain(b, "", `{"auction": bid.auction, "bidder": bid.bidder, "price": double(bid.price * 908) / 1000.0, "dateTime": bid.dateTime, "extra": bid.extra}`)
}

// benchNexmarkChain evaluates, per iteration on one bid over a shared Doc
// as a chain does: the source's timestamp, the filter on event_type, the
// query's own filter (when not ""), and its map encoded (EvalJSON).
func benchNexmarkChain(b *testing.B, filterSrc, mapSrc string) {
	ts := mustCompile(b, `event_type == 0 ? person.dateTime : event_type == 1 ? auction.dateTime : bid.dateTime`)
	isBid := mustCompile(b, `event_type == 2`)
	var filter *Program
	if filterSrc != "" {
		filter = mustCompile(b, filterSrc)
	}
	proj := mustCompile(b, mapSrc)
	var doc Doc
	var env Env
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		doc.Reset(nexmarkBid, true)
		env.Reset(&Input{Doc: &doc})
		if _, err := ts.Eval(&env); err != nil {
			b.Fatal(err)
		}
		for _, f := range []*Program{isBid, filter} {
			if f == nil {
				continue
			}
			env.Reset(&Input{Doc: &doc})
			if ok, err := f.EvalBool(&env); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
		env.Reset(&Input{Doc: &doc})
		var err error
		if buf, _, _, err = proj.EvalJSON(buf[:0], &env); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNexmarkQ0 is configs/nexmark/q0.yaml's expressions on one bid.
func BenchmarkNexmarkQ0(b *testing.B) {
	benchNexmarkChain(b, "", `{"auction": bid.auction, "bidder": bid.bidder, "price": bid.price, "dateTime": bid.dateTime, "extra": bid.extra}`)
}

// BenchmarkNexmarkQ14 is configs/nexmark/q14.yaml's expressions on one bid.
func BenchmarkNexmarkQ14(b *testing.B) {
	benchNexmarkChain(b, `bid.price * 908 > 1000000 && bid.price * 908 < 50000000000`,
		`{"auction": bid.auction, "bidder": bid.bidder, "price": double(bid.price * 908) / 1000.0,
		"bidTimeType": bid.dateTime / 3600000 % 24 >= 8 && bid.dateTime / 3600000 % 24 <= 18 ? 'dayTime'
		: bid.dateTime / 3600000 % 24 <= 6 || bid.dateTime / 3600000 % 24 >= 20 ? 'nightTime' : 'otherTime',
		"dateTime": bid.dateTime, "extra": bid.extra,
		"c_counts": size(bid.extra) - size(bid.extra.replace('c', ''))}`)
}

// BenchmarkNexmarkQ21 is configs/nexmark/q21.yaml's expressions on one bid.
func BenchmarkNexmarkQ21(b *testing.B) {
	benchNexmarkChain(b, `bid.url.startsWith('channel_id=') || bid.url.contains('&channel_id=')
		|| bid.channel.lowerAscii() in ['apple', 'google', 'facebook', 'baidu']`,
		`{"auction": bid.auction, "bidder": bid.bidder, "price": bid.price, "channel": bid.channel,
		"channel_id": bid.channel.lowerAscii() == 'apple' ? '0'
		: bid.channel.lowerAscii() == 'google' ? '1'
		: bid.channel.lowerAscii() == 'facebook' ? '2'
		: bid.channel.lowerAscii() == 'baidu' ? '3'
		: bid.url.startsWith('channel_id=') ? bid.url.substring(11).split('&')[0]
		: bid.url.contains('&channel_id=') ? dyn(bid.url.split('&channel_id=')[1].split('&')[0])
		: null}`)
}

// BenchmarkNexmarkQ22 is configs/nexmark/q22.yaml's expressions on one bid.
func BenchmarkNexmarkQ22(b *testing.B) {
	benchNexmarkChain(b, "", `{"auction": bid.auction, "bidder": bid.bidder, "price": bid.price, "channel": bid.channel,
		"dir1": size(bid.url.split('/')) > 3 ? dyn(bid.url.split('/')[3]) : null,
		"dir2": size(bid.url.split('/')) > 4 ? dyn(bid.url.split('/')[4]) : null,
		"dir3": size(bid.url.split('/')) > 5 ? dyn(bid.url.split('/')[5]) : null}`)
}

// BenchmarkFilterMap evaluates the filter-map bench scenario's two
// expressions on one record over a shared Doc, the map's result encoded (EvalJSON, as map does).
func BenchmarkFilterMap(b *testing.B) {
	filter := mustCompile(b, `amount < 500`)
	proj := mustCompile(b, `{"id": id, "key": key, "amount": amount}`)
	rec := []byte(`{"id":123456,"key":"k000042","amount":317,"note":"xxxxxxxxxxxxxxxx"}`)
	var doc Doc
	var env Env
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		doc.Reset(rec, true)
		env.Reset(&Input{Doc: &doc})
		if ok, err := filter.EvalBool(&env); err != nil || !ok {
			b.Fatal(ok, err)
		}
		env.Reset(&Input{Doc: &doc})
		var err error
		if buf, _, _, err = proj.EvalJSON(buf[:0], &env); err != nil {
			b.Fatal(err)
		}
	}
}

func mustCompile(tb testing.TB, src string) *Program {
	tb.Helper()
	p, err := Compile(src)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// BenchmarkNexmarkQ17Key evaluates configs/nexmark/q17.yaml's key_by on
// one bid over a shared Doc (Eval, as the keyed exchange does): a
// cost-tracked program (string of a dyn) whose string + the direct form
// takes (issue 25).
func BenchmarkNexmarkQ17Key(b *testing.B) {
	benchNexmarkKey(b, `string(bid.auction) + '|' + string(timestamp(bid.dateTime / 1000)).substring(0, 10)`, "1007|2023-11-14")
}

// BenchmarkNexmarkQ16Key is configs/nexmark/q16.yaml's key_by on one bid.
func BenchmarkNexmarkQ16Key(b *testing.B) {
	benchNexmarkKey(b, `bid.channel + '|' + string(timestamp(bid.dateTime / 1000)).substring(0, 10)`, "channel-5901|2023-11-14")
}

// benchNexmarkKey evaluates the key expression src on nexmarkBid per
// iteration, checking it gives want.
func benchNexmarkKey(b *testing.B, src, want string) {
	p := mustCompile(b, src)
	var doc Doc
	var env Env
	b.ReportAllocs()
	for b.Loop() {
		doc.Reset(nexmarkBid, true)
		env.Reset(&Input{Doc: &doc})
		if v, err := p.Eval(&env); err != nil || v != want {
			b.Fatal(v, err)
		}
	}
}
