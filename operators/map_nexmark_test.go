package operators

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"gopkg.in/yaml.v3"
)

// nexmarkTimestamp is the Nexmark configs' event time
// (configs/nexmark/*.yaml: the table's computed dateTime column).
const nexmarkTimestamp = `event_type == 0 ? person.dateTime : event_type == 1 ? auction.dateTime : bid.dateTime`

// nexmarkRecords are events as internal/bench's Nexmark generator writes
// them (one auction, eleven bids of its first events; times spread over a
// day so that q14's three time-of-day classes occur, and two auctions
// multiples of 123 so that q2 keeps some; channels of all four big names
// and of other channels with and without a channel_id in the url).
var nexmarkRecords = func() []chainRecord {
	bids := []struct {
		auction, price int64
		channel, url   string
		extra          string
	}{
		{1010, 658018, "Facebook", "https://www.nexmark.com/bbn/pov/bkxq/item.htm?query=1", "fruvjhgxjhljsihyjjdmpmvhqxzvuiynvejnwkwytmzkjyjcdauwxnu"},
		{1107, 3345118, "channel-2371", "https://www.nexmark.com/mqt/zsr/aoh/item.htm?query=1&channel_id=1030750208", "hkhsymqnjokemhaxhtprhfwpopvwygehcyvvyaygkwowwewyecqxhsm"},
		{1000, 369004, "Baidu", "https://www.nexmark.com/svf/ft_/nxw/item.htm?query=1", "chpzihfigiixmkdxkqifrxhbtwsbihgikumlmeotkoxhgedkgtxefssmoa"},
		{1000, 490, "channel-1050", "https://www.nexmark.com/divf/c_x/cfr_/item.htm?query=1&channel_id=1478492160", "fhxeskpkecmkftuvujrtbqpdnevitubdafecaeiamhdadtipydgtvacmwqxewoharnhn"},
		{1000, 21917745, "Facebook", "https://www.nexmark.com/bbn/pov/bkxq/item.htm?query=1", "viyeflcnmdjaqnliqswzvmdzltectluloztmzwxlxktexlnyprugsznurwui"},
		{1000, 2564031, "channel-5794", "https://www.nexmark.com/zpj_/aua/_hkz/item.htm?query=1&channel_id=1164443648", "dxhjhkderhwoejopgxlklfkwfdvjahhfjykmlffotitldfuvbcrfzdwgehhywvymbqwdurejtbmzmy"},
		{1009, 27783801, "Facebook", "https://www.nexmark.com/bbn/pov/bkxq/item.htm?query=1", "mqhpfhuhwbwhlhynrbgqlzmqijqwjcaagbrjgxblfovhvlijjjyalhlpgqabcghmvcd"},
		{1230, 1228760, "Facebook", "https://www.nexmark.com/bbn/pov/bkxq/item.htm?query=1", "zdhstjnkyqrbvbsxaisjpdpimeaaujogggxfkgmmzxlgdngelrhmdkneghcorcyxurmywmd"},
		{1000, 8132, "Facebook", "https://www.nexmark.com/bbn/pov/bkxq/item.htm?query=1", "aomkzzkozxdxommtykgxqjklbpqaanzmmnnokzgxrcygkukolmvghsghftjvahmcqhijfkqb"},
		{1000, 3428157, "channel-6288", "https://www.nexmark.com/abx/_ki/psj/item.htm?query=1&channel_id=152567808", "vxcpgclazwzmoaxkmsbeckcghhasqsoxxakawwahqnyilyzhkmayovvaywsyondsfxafytdwuyxc"},
		{1009, 3076331, "Google", "https://www.nexmark.com/kxr/qxc/jlcj/item.htm?query=1", "aorkbkhcomplktdumulpelsnjzjtxijbqotzzxppyyqikqvwwaeboi"},
	}
	const base = 1700000000123 // 22:13 UTC
	recs := []chainRecord{{[]byte(`{"event_type":1,"auction":{"id":1000,"itemName":"j pobh","description":"wmcgf mqsclfzrwmatrajmmzcbjkcfdmxe ruudiicex tofxxswluhmfismzcmorihyxvzjljakijszkyiybrx","initialBid":1789737,"reserve":7890567,"dateTime":1700000000123,"expires":1700000000314,"seller":1001,"category":10,"extra":"urkdtonzyfgzhrlxdqufdipxafmbbscqxwdvfrnggxnqvcnapjdghncbvuvpfzivyticwizxgxpropdjllldqbnojmtwxfzubcfowiidmzkamfwdioljvmdgcgxsrgfuevrhygroxcbpjzxkvau"}}`), base}}
	for i, b := range bids {
		ms := base + int64(i)*7_900_000 // 2 h 12 min apart
		recs = append(recs, chainRecord{fmt.Appendf(nil, `{"event_type":2,"bid":{"auction":%d,"bidder":1001,"price":%d,"channel":%q,"url":%q,"dateTime":%d,"extra":%q}}`,
			b.auction, b.price, b.channel, b.url, ms, b.extra), ms})
	}
	return recs
}()

// nexmarkChain returns Nexmark query q's chain as configs/nexmark/q.yaml
// writes it (its source's timestamp, its filters and its map, which
// must be all its operators) on nexmarkRecords.
func nexmarkChain(tb testing.TB, q string) chainSpec {
	b, err := os.ReadFile(filepath.Join("..", "configs", "nexmark", q+".yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	var cfg struct {
		Sources []struct {
			Timestamp struct{ Expression string }
		}
		Operators []struct {
			Type   string
			Params struct{ Condition, Value string }
		}
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		tb.Fatal(err)
	}
	spec := chainSpec{name: "nexmark-" + q, ts: cfg.Sources[0].Timestamp.Expression, records: nexmarkRecords}
	for i, op := range cfg.Operators {
		switch {
		case op.Type == FilterType:
			spec.filters = append(spec.filters, op.Params.Condition)
		case op.Type == MapType && i == len(cfg.Operators)-1:
			spec.value = op.Params.Value
		default:
			tb.Fatalf("%s: operator %d is a %s: not a chain of filters and a map", q, i, op.Type)
		}
	}
	if spec.ts != nexmarkTimestamp || spec.value == "" {
		tb.Fatalf("%s: timestamp %q, map value %q", q, spec.ts, spec.value)
	}
	return spec
}

// statelessNexmark are the stateless Nexmark queries beside q0 (issue
// 25's q1, q2, q14, q21, q22).
var statelessNexmark = []string{"q1", "q2", "q14", "q21", "q22"}
