package expression

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/ext"
	"github.com/tidwall/gjson"
)

// directPrograms are expressions of the direct evaluator's form (and a few
// just outside it), for FuzzDirectEqualsCEL.
var directPrograms = []string{
	`amount < 500`, `amount <= 500`, `amount > 500.5`, `amount >= -1`, `amount == 317`, `amount != 317`,
	`event_type == 2`, `bid.auction % 123 == 0`, `bid.price * 908 > 1000000000 && bid.price * 908 < 50000000000`,
	`note == "x"`, `note < "m"`, `key == "k"`, `key == null`, `flag == true`, `flag != false`, `!flag`, `n == null`,
	`amount < 500 || note == "x"`, `amount > 500 && note == "x"`, `-amount < 0`, `-d > 0.0`, `d / 0.0 > 1.0`,
	`amount + 9223372036854775807 > 0`, `amount - 9223372036854775807 < 0`, `amount * 9223372036854775807 > 0`,
	`amount / 0 == 1`, `amount % 0 == 1`, `amount / 7 == 45`, `amount % -7 == 2`, `d == d`, `0.0 / 0.0 == d`,
	`bid.price`, `bid.price * 908`, `double(bid.price * 908) / 1000.0`, `double(d)`, `double(note)`, `note + "!"`,
	`event_type == 0 ? person.dateTime : event_type == 1 ? auction.dateTime : bid.dateTime`, `timestamp`, `topic`, `key`,
	`{"id": id, "key": key, "amount": amount}`, `{"z": id, "a": note, "m": amount, "n": n, "f": flag}`,
	`{"auction": bid.auction, "bidder": bid.bidder, "price": double(bid.price * 908) / 1000.0, "dateTime": bid.dateTime, "extra": bid.extra}`,
	`{"t": bid.dateTime / 3600000 % 24 >= 8 && bid.dateTime / 3600000 % 24 <= 18 ? 'day' : bid.dateTime / 3600000 % 24 <= 6 ? 'night' : 'other'}`,
	`{"d": d, "i": double(amount), "q": d / 3.0, "e": 1e-7, "g": 1e21, "h": -0.0, "x": 0.0 / 0.0}`,
	`{"a": 1, "a": 2}`, `{"b": bid}`, `{"m": missing}`, `{"s": note + "\u2028\x01"}`, `{"ts": timestamp, "tp": topic}`,
	`bid == null`, `bid != null`, `null == person`, `person == null ? 0 : person.dateTime`, `{"p": bid != null ? bid.price : null}`,
	`bid.missing == null`, `amount == null`, `n != null`, `value == null`, `value.bid == null`,
	`amount`, `amount < 500.0`, `amount == 317.0`, `bid.missing == 1`, `value.amount < 500`, `headers.h == "v"`,
	// String functions (directstr.go): Nexmark q14, q21, q22 and their corners.
	`bid.url.startsWith('channel_id=') || bid.url.contains('&channel_id=') || bid.channel.lowerAscii() in ['apple', 'google', 'facebook', 'baidu']`,
	`{"auction": bid.auction, "channel": bid.channel, "channel_id": bid.channel.lowerAscii() == 'apple' ? '0' : bid.channel.lowerAscii() == 'baidu' ? '3' : bid.url.startsWith('channel_id=') ? bid.url.substring(11).split('&')[0] : bid.url.contains('&channel_id=') ? dyn(bid.url.split('&channel_id=')[1].split('&')[0]) : null}`,
	`{"dir1": size(bid.url.split('/')) > 3 ? dyn(bid.url.split('/')[3]) : null, "dir3": size(bid.url.split('/')) > 5 ? dyn(bid.url.split('/')[5]) : null}`,
	`{"price": double(bid.price * 908) / 1000.0, "c_counts": size(bid.extra) - size(bid.extra.replace('c', ''))}`,
	`note.startsWith("a")`, `note.endsWith("x")`, `note.contains("")`, `note.contains(url)`, `note.lowerAscii()`, `url.lowerAscii() == "ab"`,
	`note.substring(2)`, `note.substring(0)`, `note.substring(-1)`, `note.substring(16)`, `note.substring(amount)`, `url.substring(3)`,
	`note.replace("x", "yy")`, `note.replace("", "-")`, `url.replace("/", note)`, `size(note)`, `note.size()`, `size(url)`, `size(bid)`,
	`url.split("/")[1]`, `url.split("/")[0]`, `url.split("/")[-1]`, `url.split("/")[9]`, `url.split("")[0]`, `url.split(note)[0]`,
	`url.split("/")[amount]`, `url.split("/")[dyn(1.0)]`, `size(url.split("/"))`, `size(url.split(""))`, `size(note.split("x")) == 17`,
	`note in ["a", "xxxxxxxxxxxxxxxx"]`, `amount in ["a"]`, `url in []`, `dyn(note)`, `dyn(amount) + 1`, `note + url`,
	`{"a": url.split("/")[2], "b": url.substring(1).lowerAscii(), "c": note.contains("x") ? size(note) : -1}`,
	// Date formatting (directtime.go): Nexmark q15-q17's day and q16's minute, and their corners.
	`string(timestamp(bid.dateTime / 1000)).substring(0, 10)`, `string(timestamp(bid.dateTime / 1000)).substring(11, 16)`,
	`string(bid.auction) + '|' + string(timestamp(bid.dateTime / 1000)).substring(0, 10)`, `string(timestamp(amount))`,
	`string(timestamp(amount)).substring(0, 20)`, `string(timestamp(amount)).substring(20, 20)`, `string(timestamp(amount)).substring(3, 21)`,
	`string(timestamp(amount * 1000000000))`, `string(timestamp(-amount * 100000000)).substring(0, 4)`, `string(timestamp(d))`,
	`string(timestamp(note)).substring(0, 10)`, `string(timestamp(amount)).substring(5, 2)`, `string(amount)`, `string(note)`, `string(d)`, `string(flag)`, `string(timestamp(amount)).substring(amount, 4)`,
	`{"day": string(timestamp(bid.dateTime / 1000)).substring(0, 10), "n": string(timestamp(-62135596800 + amount)), "m": string(timestamp(253402300799 + amount))}`,
	// string + in cost-tracked programs (issue 25): q16's key, string of
	// an int or a string, results past directStringBound.
	`bid.channel + '|' + string(timestamp(bid.dateTime / 1000)).substring(0, 10)`, `string(amount) + '|' + note`,
	`note + note`, `string(note) + string(amount)`, `{"k": string(bid.auction) + '|' + bid.channel, "n": size(note + url)}`,
	// string of an arithmetic result or a scalar in a cost-tracked +
	// (Nexmark q8's dedup key: s44-src), and their corners.
	`string(auction.seller) + '@' + string(auction.dateTime - auction.dateTime % 10000)`, `note + string(amount * 2)`,
	`string(-amount) + string(d / 2.0) + string(flag)`, `string(amount % 0) + note`, `string(d - 1.5) + url`, `string(note - 1) + note`,
	// A constant right operand, held as its value (dbinary.rc):
	// interval-join's two filters, operands of other kinds than the
	// constant's, the int corners.
	`amount % 2 == 0`, `amount % 2 == 1`, `id % 2 == 0`, `d % 2 == 0`, `note % 2 == 1`, `d < 500`, `d >= 2.5`, `note == 2`,
	`amount == "x"`, `note < "m"`, `flag == false`, `amount % -1 == 0`, `amount * -1 < 0`, `amount - -9223372036854775807 > 0`,
	`amount / -1 >= 0`, `d * 2.0 == 5.0`, `d - 0.5 != 1.0`, `note + "" == note`, `amount != 0.0`,
	// s45-ebreak: a constant on the left (not held: evaluated as a node)
	// and on the right, CEL's heterogeneous equality and ordering (1 ==
	// 1.0, 1u == 1), uint, bytes, timestamp and duration constants the
	// direct form does not hold, the int64 corners with constants on
	// either side, negative modulo, a nested field against a nested field.
	`0 == amount % 2`, `500 > amount`, `2 == event_type`, `-1 <= amount`, `"m" > note`, `null == amount`, `true == flag`,
	`amount == 1u`, `1u == amount`, `amount < 2u`, `amount == 1.0`, `1.0 == amount`, `amount < 1.5`, `1.5 > amount`, `d == 2`, `2 < d`,
	`amount == -9223372036854775808`, `-9223372036854775808 / amount == 1`, `-9223372036854775808 % amount == 0`, `7 % amount`,
	`-7 % amount`, `amount % -3`, `-amount % 3`, `amount % 3 == -1`, `9223372036854775807 + amount`, `-9223372036854775807 - amount`,
	`amount * -9223372036854775808`, `2 * amount`, `amount / 0.0`, `0.0 / d`, `d + 1`, `amount + 1u`, `note == b"x"`,
	`b"x" == note`, `flag < true`, `flag >= false`, `null == null`, `note < null`, `amount > null`, `d != d`, `d == -0.0`,
	`d * 1e308 > 1e308`, `-d < 0.0`, `timestamp(amount) < timestamp("1970-01-01T00:00:02Z")`, `timestamp == timestamp`, `duration("1s") == duration("1000ms")`,
	`bid.price % 7 == bid.auction % 7`, `bid.price - bid.auction`, `value.bid.price * 2 > 0`, `bid.price == amount`, `amount == amount`,
	`amount + 0 == amount`, `amount / 1`, `amount % 1`, `amount - 0`, `d - 0.0`, `note + "\u00e9" > note`, `"" + note`,
}

// nexmarkStateless are configs/nexmark/q14.yaml's, q21.yaml's and
// q22.yaml's filters and maps as written there (s43-stateless), and
// forms of the repeated subexpressions (directmemo.go), of
// s.lowerAscii() compared with literals and of size(s.replace(a, b))
// that the direct evaluator computes without building their strings,
// with their corners.
var nexmarkStateless = []string{
	`bid.price * 908 > 1000000000 && bid.price * 908 < 50000000000`,
	`{"auction": bid.auction, "bidder": bid.bidder, "price": double(bid.price * 908) / 1000.0, "bidTimeType": bid.dateTime / 3600000 % 24 >= 8 && bid.dateTime / 3600000 % 24 <= 18 ? 'dayTime' : bid.dateTime / 3600000 % 24 <= 6 || bid.dateTime / 3600000 % 24 >= 20 ? 'nightTime' : 'otherTime', "dateTime": bid.dateTime, "extra": bid.extra, "c_counts": size(bid.extra) - size(bid.extra.replace('c', ''))}`,
	`bid.url.startsWith('channel_id=') || bid.url.contains('&channel_id=') || bid.channel.lowerAscii() in ['apple', 'google', 'facebook', 'baidu']`,
	`{"auction": bid.auction, "bidder": bid.bidder, "price": bid.price, "channel": bid.channel, "channel_id": bid.channel.lowerAscii() == 'apple' ? '0' : bid.channel.lowerAscii() == 'google' ? '1' : bid.channel.lowerAscii() == 'facebook' ? '2' : bid.channel.lowerAscii() == 'baidu' ? '3' : bid.url.startsWith('channel_id=') ? bid.url.substring(11).split('&')[0] : bid.url.contains('&channel_id=') ? dyn(bid.url.split('&channel_id=')[1].split('&')[0]) : null}`,
	`{"auction": bid.auction, "bidder": bid.bidder, "price": bid.price, "channel": bid.channel, "dir1": size(bid.url.split('/')) > 3 ? dyn(bid.url.split('/')[3]) : null, "dir2": size(bid.url.split('/')) > 4 ? dyn(bid.url.split('/')[4]) : null, "dir3": size(bid.url.split('/')) > 5 ? dyn(bid.url.split('/')[5]) : null}`,
	`note.lowerAscii() == 'xx' || note.lowerAscii() != 'ab'`, `'ab' == url.lowerAscii()`, `url.lowerAscii() != 'Ab'`,
	`note.lowerAscii() == note`, `url.lowerAscii() in ['ab', 'a/b', '']`, `amount.lowerAscii() == 'x'`, `note.lowerAscii() < 'b'`,
	`{"a": note.lowerAscii(), "b": note.lowerAscii() == 'x' ? 1 : 2, "c": note.lowerAscii() in ['ab']}`,
	`size(note) - size(note.replace('x', ''))`, `size(note.replace('', '\u00e9'))`, `note.replace('x', 'yy').size()`,
	`size(url.replace('\u00e9', 'e'))`, `size(url.replace('/', ''))`, `size(note.replace(url, note))`, `size(note.replace('x', 'x'))`,
	`{"a": amount / 0, "b": amount / 0}`, `(amount + 1) * (amount + 1) > 0`, `{"a": note + url, "b": note + url, "c": size(note + url)}`,
	`amount % 123 == 0 ? amount % 123 : -amount % 123`, `{"x": bid == null ? 0 : bid.price, "y": bid == null}`,
	`bid.price * 908 > 1 && bid.price * 908 < 5 || bid.price * 908 == 0`, `d * d + d * d`, `{"u": url, "v": url, "w": size(url)}`,
	`{"p": double(bid.price * 908) / 1000.0, "q": double(amount) / 1000000.0, "r": double(amount) / 10.0, "s": double(d) / 100.0}`,
	`double(amount * 3) / 1000.0 < 2.0`, `{"a": double(amount) / 1000.0 + 1.0, "b": -(double(amount) / 1000.0), "c": [double(amount) / 100.0]}`,
	`{"k": amount % 2 == 0 ? double(amount) / 1000.0 : double(amount) / 10.0, "l": "dayTime", "m": "a\"b", "n": note + "x"}`,
	// s43-ebreak's attacks: a repeated subexpression whose evaluation
	// fails (or gives up) in a branch CEL does not take, or in both;
	// lowerAscii compared with non-ASCII literals; replace with an empty
	// or overlapping old; decimals at their bounds; plain strings with
	// HTML characters and DEL.
	`amount == 0 || amount / 0 == 1 || amount / 0 == 2`, `amount != 0 && amount / 0 == 1`, `amount / 0 == 1 || true`,
	`note == 'x' ? url.split('/')[3] : url.split('/')[3] + note`, `amount > 2 ? note.substring(3) : size(note.substring(3)) > 0 ? 'a' : 'b'`,
	`{"a": amount > 0 ? url.split('/')[amount] : 'n', "b": amount > 1 ? url.split('/')[amount] : 'm'}`,
	`note.lowerAscii() == '\u00e9t\u00e9x/y' || note.lowerAscii() in ['\u00e9', 'x']`, `url.lowerAscii() == '/a/b\u00e9/c'`, `note.lowerAscii() != '\u00c0'`,
	`{"a": size('aaa'.replace('aa', 'b')), "b": size(note.replace('xx', 'y')), "c": size(note.replace('\u00e9', '')), "d": size(note.replace('', ''))}`,
	`{"a": size(url.substring(1).replace('', 'x')), "b": size(url.split('/')[1].replace('b', '\u00e9\u00e9')), "c": size(note.lowerAscii().replace('a', ''))}`,
	`{"a": double(amount + 999999999999999) / 10.0, "b": double(amount - 999999999999999) / 1000000.0, "c": double(amount * 100000) / 100000.0, "d": double(-amount) / 100.0}`,
	`{"a": double(amount + 1000000000000000) / 10.0, "b": double(amount) / 1000000.0 * 0.0, "c": double(amount) / 1000000.0 == double(amount) / 1000000.0, "d": double(0 - amount) / 1000.0}`,
	`{"a": note + '<>&\x7f', "b": url.substring(1), "c": note.split('\u00e9')[0], "d": '\u2028' + url, "e": url.split('/')[1] + '&'}`,
}

// FuzzDirectEqualsCEL checks that the direct evaluator gives exactly what
// CEL's interpreter gives (the general path, direct off): the same Eval
// result, EvalInt64 result (its int unboxed, Eval's otherwise), EvalBool
// result, EvalJSON bytes, decoded value and roundTrips,
// and the same errors, over records fuzzed as bytes and read through a
// Doc known valid, a Doc checked by itself, and the whole decoded value.
// Its seeds are small records; the large ones, which take seconds each
// (the fuzzer would take them for hangs), are TestDirectEqualsCELLarge's.
func FuzzDirectEqualsCEL(f *testing.F) {
	for _, s := range []string{
		`{"id":123456,"key":"k000042","amount":317,"note":"xxxxxxxxxxxxxxxx"}`,
		`{"event_type":2,"person":null,"auction":null,"bid":{"auction":1007,"bidder":2001,"price":4617,"channel":"c","url":"u","dateTime":1700000000123,"extra":"cc"}}`,
		`{"event_type":0,"person":{"dateTime":5},"amount":600,"d":2.5,"flag":true,"n":null,"note":"a\"b\u2028"}`,
		`{"event_type":1,"auction":{"dateTime":-3},"amount":-9223372036854775808,"d":-0.0,"flag":false,"note":"\xff"}`,
		`{"amount":1e300,"bid":{"price":9223372036854775807,"dateTime":"x"}}`, `{"amount":"12","d":1,"flag":1}`,
		`{"amount":{"a":1},"id":[1],"note":true}`, `[1]`, `"s"`, `{"bid":{"price":1e400}}`, `{"amount":3,"amount":4}`,
		`{"bid":{"price":2.5,"auction":-7}, "amount": 9223372036854775807}`, `{"d": 1e-320, "amount": 0}`, `not json`,
		`{"event_type":2,"bid":{"auction":1,"price":5000,"channel":"Apple","url":"https://www.nexmark.com/abc/def/ghi/item.htm?query=1&channel_id=1234","extra":"ccaxc"}}`,
		`{"event_type":2,"bid":{"auction":2,"price":99,"channel":"channel-7","url":"channel_id=77&x=1","extra":""}}`,
		`{"bid":{"channel":"BAIDU","url":"a&channel_id=&channel_id=5","extra":"\u00e9c"},"url":"/A/b\u00e9/c","note":"\u00e9t\u00e9x/y","amount":2}`,
		`{"bid":{"channel":"\u00c0pple","url":"channel_id","extra":"c"},"url":"Ab","note":"x","amount":-3}`,
		"{\"url\":\"a/\xff/b\",\"note\":\"\xffAB\",\"amount\":1,\"bid\":{\"channel\":\"G\xffOOGLE\",\"url\":\"/\xff/\",\"extra\":\"c\xff\"}}",
		`{"note":"aaaa\u00e9\u00e9xx","url":"/A/b\u00e9/c<&>","amount":1,"bid":{"price":-1}}`, `{"note":"","url":"","amount":-999999999999999}`,
		`{"note":"\u00c0\u00e9","url":"a/b/c/d","amount":999999999999999}`, `{"note":"x","url":"a/b","amount":0}`, `{"amount":-1000000,"note":"\u007f<"}`,
	} {
		f.Add([]byte(s))
	}
	fast, general := directEqualsCELPrograms(f)
	f.Fuzz(func(t *testing.T, b []byte) { directEqualsCEL(t, fast, general, b) })
}

// largeDirectRecords are FuzzDirectEqualsCEL's records of thousands of
// bytes (long strings of plain, repeated and non-ASCII bytes against the
// cost bound, split and replace; a channel of 4,090 bytes): each takes
// FuzzDirectEqualsCEL's check a second or more (4-5 s for the first under
// load), so they are not in its corpus, where `go test -fuzz` runs every
// seed before fuzzing and reports a slow one as a hang.
var largeDirectRecords = []string{
	`{"url":"` + strings.Repeat("a/", 2100) + `","note":"` + strings.Repeat("x", 5000) + `","amount":4}`,
	`{"url":"` + strings.Repeat("u", 96) + `","note":"` + strings.Repeat("x", 4000) + `","amount":-9223372036854775808}`,
	`{"note":"` + strings.Repeat("\u00e9", 1024) + `","amount":12345}`,
	`{"note":"` + strings.Repeat("y", 2048) + `","amount":7,"bid":{"auction":-1,"channel":"` + strings.Repeat("c", 4090) + `","dateTime":0}}`,
}

// TestDirectEqualsCELLarge is FuzzDirectEqualsCEL's check on
// largeDirectRecords, which were its seeds.
func TestDirectEqualsCELLarge(t *testing.T) {
	fast, general := directEqualsCELPrograms(t)
	for i, s := range largeDirectRecords {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			t.Parallel()
			directEqualsCEL(t, fast, general, []byte(s))
		})
	}
}

// directEqualsCELPrograms compiles directPrograms and nexmarkStateless
// twice: with their direct forms (fast) and without (general, CEL's
// interpreter alone), failing when one known to have a direct form has
// none.
func directEqualsCELPrograms(tb testing.TB) (fast, general []*Program) {
	directPrograms := append(slices.Clip(directPrograms), nexmarkStateless...)
	fast = make([]*Program, len(directPrograms))
	general = make([]*Program, len(directPrograms))
	for i, src := range directPrograms {
		fast[i] = mustCompile(tb, src)
		g := *fast[i]
		g.direct = nil
		general[i] = &g
	}
	musts := []int{0, 43, 57, 58, 59, 60} // amount < 500, Nexmark q0, q21 (2), q22, q14
	for i := range 5 {                    // Nexmark q14, q21 and q22 as configured
		musts = append(musts, len(directPrograms)-len(nexmarkStateless)+i)
	}
	for _, i := range musts {
		if fast[i].direct == nil {
			tb.Fatalf("%s: no direct form compiled", directPrograms[i])
		}
	}
	return fast, general
}

// directEqualsCEL is FuzzDirectEqualsCEL's check of one record b: every
// program of fast gives what the same program of general gives, read
// through every kind of input.
func directEqualsCEL(t *testing.T, fast, general []*Program, b []byte) {
	directEqualsCELOf(t, append(slices.Clip(directPrograms), nexmarkStateless...), fast, general, b)
}

// directEqualsCELOf is directEqualsCEL of the programs fast and general
// compiled of directPrograms (their sources, for the messages).
func directEqualsCELOf(t *testing.T, directPrograms []string, fast, general []*Program, b []byte) {
	valid := gjson.ValidBytes(b)
	inputs := []func() *Input{
		func() *Input { return &Input{Doc: NewDoc(b)} },
		func() *Input { return &Input{JSON: b} },
	}
	if valid {
		inputs = append(inputs, func() *Input { return &Input{Doc: NewValidDoc(b)} })
		// A source's Doc indexed in its check (ResetChecked after a
		// read of the previous value).
		inputs = append(inputs, func() *Input { return &Input{Doc: foldedDoc(b)} })
		if v, err := DecodeJSON(b); err == nil {
			inputs = append(inputs, func() *Input { return &Input{Value: v} })
		}
	}
	for i := range fast {
		for j, mk := range inputs {
			in := func() *Input {
				x := mk()
				x.Key, x.Timestamp, x.Topic = []byte("k"), time.UnixMilli(1500), "tp"
				x.Headers = []Header{{Key: "h", Value: []byte("v")}}
				return x
			}
			gv, gerr := general[i].Eval(NewEnv(in()))
			fv, ferr := fast[i].Eval(NewEnv(in()))
			if fmt.Sprintf("%#v %v", gv, gerr) != fmt.Sprintf("%#v %v", fv, ferr) {
				t.Fatalf("%s on %q (input %d): Eval direct %#v, %v; CEL %#v, %v", directPrograms[i], b, j, fv, ferr, gv, gerr)
			}
			// EvalInt64 where the direct form gives a result (where
			// it gives up, EvalInt64 is CEL's Eval, which
			// TestEvalInt64 checks: evaluating it again here would
			// take the largest seeds past the fuzzer's hang limit).
			if d := fast[i].direct; d != nil && d.root != nil && d.eval(NewEnv(in())).k != dFail {
				x, isInt, xv, xerr := fast[i].EvalInt64(NewEnv(in()))
				_, evalInt := gv.(int64)
				got := fmt.Sprintf("%#v %v", xv, xerr)
				if isInt {
					got = fmt.Sprintf("%#v %v", x, xerr)
				}
				if isInt != evalInt || (isInt && xv != nil) || got != fmt.Sprintf("%#v %v", gv, gerr) {
					t.Fatalf("%s on %q (input %d): EvalInt64 %d, %v, %#v, %v; CEL's Eval %#v, %v", directPrograms[i], b, j, x, isInt, xv, xerr, gv, gerr)
				}
			}
			gb, gerr := general[i].EvalBool(NewEnv(in()))
			fb, ferr := fast[i].EvalBool(NewEnv(in()))
			if gb != fb || fmt.Sprint(gerr) != fmt.Sprint(ferr) {
				t.Fatalf("%s on %q (input %d): EvalBool direct %v, %v; CEL %v, %v", directPrograms[i], b, j, fb, ferr, gb, gerr)
			}
			gj, gv2, gsame, gerr := general[i].EvalJSON([]byte("prefix"), NewEnv(in()))
			fj, fv2, fsame, ferr := fast[i].EvalJSON([]byte("prefix"), NewEnv(in()))
			if !bytes.Equal(gj, fj) || fmt.Sprintf("%#v", gv2) != fmt.Sprintf("%#v", fv2) || gsame != fsame || fmt.Sprint(gerr) != fmt.Sprint(ferr) {
				t.Fatalf("%s on %q (input %d): EvalJSON direct %q, %#v, %v, %v; CEL %q, %#v, %v, %v", directPrograms[i], b, j, fj, fv2, fsame, ferr, gj, gv2, gsame, gerr)
			}
		}
	}
}

// TestDirectForms checks which expressions take the direct evaluator: the
// filter-map scenario's, Nexmark q0-q2's and the string functions of
// q14, q21 and q22 (cost-tracked programs), and not those it cannot
// evaluate (a function call, a presence test, a cost-tracked program).
func TestDirectForms(t *testing.T) {
	for src, want := range map[string]bool{
		`amount < 500`: true, `event_type == 2`: true, `bid.auction % 123 == 0`: true,
		`{"id": id, "key": key, "amount": amount}`: true,
		`{"auction": bid.auction, "bidder": bid.bidder, "price": double(bid.price * 908) / 1000.0, "dateTime": bid.dateTime, "extra": bid.extra}`: true,
		`event_type == 0 ? person.dateTime : event_type == 1 ? auction.dateTime : bid.dateTime`:                                                   true,
		`size(note) > 3`: true, `has(bid.price)`: false, `{"a": 1, "a": 2}`: false, `{"a": note.split("/")}`: false,
		`bid.url.startsWith('channel_id=') || bid.channel.lowerAscii() in ['apple', 'google']`: true,
		`{"dir1": size(bid.url.split('/')) > 3 ? dyn(bid.url.split('/')[3]) : null}`:           true,
		`note.split("/")`: false, `note.split("/", 2)[0]`: false, `note.upperAscii()`: false, `note in tags`: false,
		`note in ["a", 1]`: false, `note.matches("a+")`: false, `[note][0]`: false,
		`string(timestamp(bid.dateTime / 1000)).substring(0, 10)`: true, `string(bid.auction) + '|' + string(timestamp(bid.dateTime / 1000)).substring(0, 10)`: true,
		`bid.channel + '|' + string(timestamp(bid.dateTime / 1000)).substring(0, 10)`: true, `string(timestamp(last_time / 1000)).substring(11, 16)`: true,
		`string(timestamp(amount)).substring(1)`: true, `string(timestamp(amount)).substring(0, amount)`: false, `string(duration(note))`: false,
		`{?"a": optional.none()}`: false, `bid.?price`: false, `[amount]`: false, `{1: amount}`: false,
	} {
		p := mustCompile(t, src)
		if got := p.direct != nil; got != want {
			t.Errorf("%s: direct %v, want %v", src, got, want)
		}
	}
	p, err := Compile(`note + note + note == "x"`, WithLimits(Limits{MaxCost: 1}))
	if err == nil && p.direct != nil {
		t.Errorf("a cost-tracked program has a direct form")
	}
}

// TestDirectStringBound checks that the direct form of a cost-tracked
// program gives up on a string longer than directStringBound, where CEL's
// cost limit decides: an error on a long string, the value on a short one.
func TestDirectStringBound(t *testing.T) {
	p, err := Compile(`note.contains("a")`, WithLimits(Limits{MaxCost: 1000}))
	if err != nil {
		t.Fatal(err)
	}
	if !p.tracked || p.direct == nil {
		t.Fatalf("tracked %v, direct %v: want a cost-tracked program with a direct form", p.tracked, p.direct != nil)
	}
	short := []byte(`{"note":"xxa"}`)
	if v, err := p.Eval(NewEnv(&Input{Doc: NewValidDoc(short)})); v != true || err != nil {
		t.Fatalf("short note: %v, %v; want true", v, err)
	}
	long := []byte(`{"note":"` + strings.Repeat("x", 100000) + `a"}`)
	v, err := p.Eval(NewEnv(&Input{Doc: NewValidDoc(long)}))
	if err == nil || !strings.Contains(err.Error(), "cost") {
		t.Fatalf("long note: %v, %v; want CEL's cost limit error", v, err)
	}
}

// TestDirectReplaceBound: a replace whose result would be longer than
// directStringBound is left to CEL (replacing "" inserts the new string at
// every rune boundary: a 1,000-byte note and an 8-byte new string make
// 9,008 bytes), while a short one is evaluated directly; both give CEL's
// value.
func TestDirectReplaceBound(t *testing.T) {
	p, err := Compile(`note.replace("", "abcdefgh")`, WithLimits(Limits{MaxCost: 1000000}))
	if err != nil {
		t.Fatal(err)
	}
	if !p.tracked || p.direct == nil {
		t.Fatalf("tracked %v, direct %v: want a cost-tracked program with a direct form", p.tracked, p.direct != nil)
	}
	for _, tc := range []struct {
		note   string
		direct bool
	}{{"xy", true}, {strings.Repeat("x", 1000), false}} {
		env := NewEnv(&Input{Doc: NewValidDoc([]byte(`{"note":"` + tc.note + `"}`))})
		dv, ok := p.direct.value(env)
		if ok != tc.direct {
			t.Fatalf("note of %d bytes: direct ok %v (%v), want %v", len(tc.note), ok, dv, tc.direct)
		}
		want := strings.ReplaceAll(tc.note, "", "abcdefgh")
		v, err := p.Eval(NewEnv(&Input{Doc: NewValidDoc([]byte(`{"note":"` + tc.note + `"}`))}))
		if err != nil || v != want {
			t.Fatalf("note of %d bytes: %d bytes, %v; want %d bytes", len(tc.note), len(fmt.Sprint(v)), err, len(want))
		}
	}
}

// TestDirectConcatTracked checks that the direct form of a cost-tracked
// program concatenates strings (Nexmark q16's and q17's keys: issue 25)
// into a result of at most directStringBound bytes, and leaves a longer
// one to CEL; both give CEL's value.
func TestDirectConcatTracked(t *testing.T) {
	bid := []byte(`{"event_type":2,"bid":{"auction":1007,"channel":"Apple","dateTime":1700000000123}}`)
	for src, want := range map[string]string{
		`string(bid.auction) + '|' + string(timestamp(bid.dateTime / 1000)).substring(0, 10)`: "1007|2023-11-14",
		`bid.channel + '|' + string(timestamp(bid.dateTime / 1000)).substring(0, 10)`:         "Apple|2023-11-14",
	} {
		p, err := Compile(src)
		if err != nil {
			t.Fatal(err)
		}
		if !p.tracked || p.direct == nil {
			t.Fatalf("%s: tracked %v, direct %v: want a cost-tracked program with a direct form", src, p.tracked, p.direct != nil)
		}
		if v, ok := p.direct.value(NewEnv(&Input{Doc: NewValidDoc(bid)})); !ok || v != want {
			t.Errorf("%s: direct %v, %v; want %q", src, v, ok, want)
		}
		if v, err := p.Eval(NewEnv(&Input{Doc: NewValidDoc(bid)})); err != nil || v != want {
			t.Errorf("%s: %v, %v; want %q", src, v, err, want)
		}
	}
	p, err := Compile(`note + note`)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		n      int
		direct bool
	}{{2048, true}, {2049, false}} {
		note := strings.Repeat("x", tc.n)
		doc := []byte(`{"note":"` + note + `"}`)
		if _, ok := p.direct.value(NewEnv(&Input{Doc: NewValidDoc(doc)})); ok != tc.direct {
			t.Errorf("note of %d bytes: direct ok %v, want %v", tc.n, ok, tc.direct)
		}
		if v, err := p.Eval(NewEnv(&Input{Doc: NewValidDoc(doc)})); err != nil || v != note+note {
			t.Errorf("note of %d bytes: %d bytes, %v; want %d bytes", tc.n, len(fmt.Sprint(v)), err, 2*tc.n)
		}
	}
}

// TestDirectStringOfArithmetic checks that a cost-tracked program
// concatenating the string of an arithmetic result (Nexmark q8's dedup
// key) has a direct form: CEL's estimate leaves string() of a dynamically
// typed operand unbounded unless it is read from the record, so on
// a9c897c this key went through CEL's interpreter on every auction. The
// direct form gives CEL's value, and gives up where CEL fails (a string
// dateTime: no overload) or the operand is missing, so that the error is
// CEL's.
func TestDirectStringOfArithmetic(t *testing.T) {
	const src = `string(auction.seller) + '@' + string(auction.dateTime - auction.dateTime % 10000)`
	p, err := Compile(src)
	if err != nil {
		t.Fatal(err)
	}
	if !p.tracked || p.direct == nil {
		t.Fatalf("tracked %v, direct %v: want a cost-tracked program with a direct form", p.tracked, p.direct != nil)
	}
	g := *p
	g.direct = nil
	for _, tc := range []struct {
		rec, want string
		direct    bool
	}{
		{`{"event_type":1,"auction":{"seller":1234,"dateTime":1700000012345}}`, "1234@1700000010000", true},
		{`{"auction":{"seller":"s-9","dateTime":-12345}}`, "s-9@-10000", true},
		{`{"auction":{"seller":1.5,"dateTime":1.5e3}}`, "", false},
		{`{"auction":{"seller":7,"dateTime":"1700000012345"}}`, "", false},
		{`{"auction":{"seller":7}}`, "", false},
	} {
		env := func() *Env { return NewEnv(&Input{Doc: NewValidDoc([]byte(tc.rec))}) }
		dv, ok := p.direct.value(env())
		if ok != tc.direct || (ok && dv != tc.want) {
			t.Errorf("%s: direct %v, %v; want %q, %v", tc.rec, dv, ok, tc.want, tc.direct)
		}
		v, err := p.Eval(env())
		gv, gerr := g.Eval(env())
		if v != gv || fmt.Sprint(err) != fmt.Sprint(gerr) {
			t.Errorf("%s: Eval %v, %v; CEL %v, %v", tc.rec, v, err, gv, gerr)
		}
		if tc.direct && (err != nil || v != tc.want) {
			t.Errorf("%s: Eval %v, %v; want %q", tc.rec, v, err, tc.want)
		}
	}
}

// TestBoundedSizesStringConversion checks the estimate compileDirect's
// bound rests on for string(x): a scalar's text at most maxScalarText
// bytes (checked against CEL's own conversion at each kind's longest), a
// string's or bytes' x's own bound, and an operand whose size nothing
// bounds left to CEL (nil).
func TestBoundedSizesStringConversion(t *testing.T) {
	for _, v := range []string{
		fmt.Sprint(int64(-9223372036854775808)), fmt.Sprint(uint64(18446744073709551615)),
	} {
		if len(v) > maxScalarText {
			t.Fatalf("%q is longer than %d", v, maxScalarText)
		}
	}
	for _, src := range []string{`string(-9223372036854775807 - 1)`, `string(18446744073709551615u)`, `string(-2.2250738585072014e-308)`,
		`string(-1.7976931348623157e308)`, `string(duration('-9223372036.854775808s'))`, `string(false)`} {
		v, err := mustCompile(t, src).Eval(nil)
		if err != nil || len(v.(string)) > maxScalarText {
			t.Errorf("%s: %v, %v: want at most %d bytes", src, v, err, maxScalarText)
		}
	}
	// CEL's estimate with every string read from the record at most
	// directStringBound (4096) bytes: the arithmetic's text is a scalar's
	// (4 calls, string() 1, the + 1 + 33/10 rounded up); string of a
	// string read from the record is bounded by that string's 4096 bytes.
	// On a9c897c the first was unbounded (math.MaxUint64).
	for src, want := range map[string]uint64{
		`'@' + string(amount - amount % 10)`: 9,
		`'@' + string(note)`:                 821,
		`'@' + string(dyn(note))`:            822,
		`'@' + string(note + note)`:          2462,
	} {
		env, err := cel.NewEnv(cel.OptionalTypes(), ext.Strings(), cel.Variable("amount", cel.DynType), cel.Variable("note", cel.DynType))
		if err != nil {
			t.Fatal(err)
		}
		a, iss := env.Compile(src)
		if iss.Err() != nil {
			t.Fatal(iss.Err())
		}
		est, err := env.EstimateCost(a, boundedSizes{directStringBound})
		if err != nil || est.Max != want {
			t.Errorf("%s: estimate %v, %v; want a maximum of %d", src, est, err, want)
		}
	}
}

// TestDirectConcatSlack checks that the direct form of a cost-tracked
// program whose estimate leaves less of the limit than concatCost may
// charge its string + (1 + directStringBound/10 units) gives up on the +,
// so that CEL's cost limit decides, and concatenates once the limit leaves
// that much; where it concatenates, CEL gives the same value and no error.
func TestDirectConcatSlack(t *testing.T) {
	doc := []byte(`{"note":"` + strings.Repeat("x", 2000) + `"}`)
	var gaveUp, concat bool
	for limit := uint64(1); limit <= 2000; limit++ {
		p, err := Compile(`size(note + note)`, WithLimits(Limits{MaxCost: limit}))
		if err != nil || p.direct == nil {
			continue
		}
		v, cerr := p.Eval(NewEnv(&Input{Doc: NewValidDoc(doc)}))
		dv, ok := p.direct.value(NewEnv(&Input{Doc: NewValidDoc(doc)}))
		if ok && (cerr != nil || v != dv || dv != int64(4000)) {
			t.Fatalf("limit %d: direct %v, CEL %v, %v; want 4000", limit, dv, v, cerr)
		}
		if ok && !gaveUp {
			t.Fatalf("limit %d: the first direct form concatenates, want it to give up until the limit leaves %d units", limit, 1+directStringBound/10)
		}
		gaveUp, concat = gaveUp || !ok, concat || ok
	}
	if !gaveUp || !concat {
		t.Fatalf("gave up %v, concatenated %v: want both over the limits", gaveUp, concat)
	}
}

// TestEvalInt64 checks EvalInt64 against Eval on results of each kind, on
// the direct evaluator and on CEL's (a list index, which the direct one
// does not take): an int comes back unboxed with isInt, anything else,
// errors too, as Eval gives it.
func TestEvalInt64(t *testing.T) {
	doc := []byte(`{"amount":317,"d":2.5,"note":"x","n":null,"big":9223372036854775807}`)
	for _, tc := range []struct {
		src    string
		direct bool
		want   int64 // when isInt
		isInt  bool
	}{
		{`amount`, true, 317, true},
		{`big`, true, 9223372036854775807, true},
		{`amount * 2 - 1`, true, 633, true},
		{`[amount, 1][0]`, false, 317, true},
		{`d`, true, 0, false},
		{`note`, true, 0, false},
		{`n`, true, 0, false},
		{`amount > 1`, true, 0, false},
		{`[amount]`, false, 0, false},
		{`missing`, true, 0, false},
		{`big + 1`, true, 0, false},
	} {
		p := mustCompile(t, tc.src)
		if (p.direct != nil) != tc.direct {
			t.Errorf("%s: direct form %v, want %v", tc.src, p.direct != nil, tc.direct)
		}
		want, werr := p.Eval(NewEnv(&Input{Doc: NewValidDoc(doc)}))
		i, isInt, v, err := p.EvalInt64(NewEnv(&Input{Doc: NewValidDoc(doc)}))
		if isInt != tc.isInt || i != tc.want || fmt.Sprint(err) != fmt.Sprint(werr) {
			t.Errorf("%s: EvalInt64 = %d, %v, %#v, %v; want %d, %v (Eval: %#v, %v)", tc.src, i, isInt, v, err, tc.want, tc.isInt, want, werr)
		}
		if !isInt && fmt.Sprintf("%#v", v) != fmt.Sprintf("%#v", want) {
			t.Errorf("%s: EvalInt64's value %#v, Eval's %#v", tc.src, v, want)
		}
		if isInt && want != any(i) {
			t.Errorf("%s: EvalInt64's int %d, Eval's %#v", tc.src, i, want)
		}
	}
}

// TestDirectConstantOperand: a comparison or arithmetic whose right
// operand is a literal holds its value (dbinary.rc) and does not
// evaluate it as a node: interval-join's filter id % 2 == 0 is two
// nodes that read the record (the field, then the remainder and the
// comparison) where it was four; each still gives CEL's result
// (directPrograms' `amount % 2 == 0` and the corners after it).
func TestDirectConstantOperand(t *testing.T) {
	p := mustCompile(t, `id % 2 == 0`)
	if p.direct == nil {
		t.Fatal("no direct form")
	}
	cmp, ok := p.direct.root.(*dcmp)
	if !ok || !cmp.rconst || cmp.rc != (dval{k: dInt}) || cmp.op != dopEq {
		t.Fatalf("root %#v, want a dcmp == holding the int 0", p.direct.root)
	}
	rem, ok := cmp.l.(*darith)
	if !ok || !rem.rconst || rem.rc != (dval{k: dInt, i: 2}) || rem.op != dopMod {
		t.Fatalf("left operand %#v, want a darith %% holding the int 2", cmp.l)
	}
	if _, ok := rem.l.(*dpath); !ok {
		t.Fatalf("dividend %#v, want the field id", rem.l)
	}
	for _, c := range []struct {
		rec  string
		want bool
	}{{`{"id":4}`, true}, {`{"id":7}`, false}, {`{"id":-8}`, true}, {`{"id":-9223372036854775808}`, true}} {
		got, err := p.EvalBool(NewEnv(&Input{Doc: NewDoc([]byte(c.rec))}))
		if err != nil || got != c.want {
			t.Fatalf("%s: %v, %v; want %v", c.rec, got, err, c.want)
		}
	}
	if _, err := p.EvalBool(NewEnv(&Input{Doc: NewDoc([]byte(`{"id":4.5}`))})); err == nil {
		t.Fatal("id 4.5: no error, want CEL's no such overload")
	}
}
