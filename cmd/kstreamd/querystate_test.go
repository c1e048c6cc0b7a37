package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/sdk"
	"github.com/kstreamd/kstreamd/state/keygroup"
)

// queryStateOps are the operators of TestQueryableState: keyed_count
// "counts" (uid counting) by the record key, and keyed_count "per_shop"
// by the numeric field shop, both written to topic counts. asyncState
// sets async_state on both.
func queryStateOps(asyncState bool) string {
	async := ""
	if asyncState {
		async = "    async_state: true\n"
	}
	return `operators:
  - name: counts
    uid: counting
    type: keyed_count
    input: events
    key_by: key
` + async + `  - name: per_shop
    type: keyed_count
    input: events
    key_by: shop
` + async + `sinks:
  - name: counted
    input: counts
    topic: counts
  - name: shops
    input: per_shop
    topic: counts
`
}

// stateAnswer is the body of GET /api/v1/state/{operator}/{state}.
type stateAnswer struct {
	Operator string          `json:"operator"`
	UID      string          `json:"uid"`
	Subtask  int             `json:"subtask"`
	State    string          `json:"state"`
	Kind     string          `json:"kind"`
	KeyGroup int             `json:"key_group"`
	Found    bool            `json:"found"`
	Value    json.RawMessage `json:"value"`
	Error    string          `json:"error"`
	Ops      []string        `json:"operators"`
	States   []string        `json:"states"`
}

// TestQueryableState is issue 26 item 3's acceptance: after a fixed input
// to a keyed count at parallelism 2, GET /api/v1/state/counts/count of
// three keys returns exactly their counts (found, the int64 count as the
// value, the key group and the subtask owning it), on the Pebble and the
// hashmap backend and on Pebble with async state; the same by the
// operator's uid; a numeric key (key_by of a JSON number) given as its
// JSON text, and as key_base64; a key never seen answers 200 with found
// false and no value; an unknown operator or state answers 404 listing
// what exists; a request without a key 400.
func TestQueryableState(t *testing.T) {
	shops := []int{7, 7, 12, 7, 3, 12, 7, 3, 7, 12, 7}
	keys := []string{"apple", "kiwi", "apple", "fig", "apple", "kiwi", "plum", "apple", "plum", "plum", "apple"}
	wantKey, wantShop := map[string]int64{}, map[string]int64{}
	for i, k := range keys {
		wantKey[k]++
		wantShop[fmt.Sprint(shops[i])]++
	}
	for _, tc := range []struct {
		name, backend string
		async         bool
	}{{"pebble", "pebble", false}, {"hashmap", "hashmap", false}, {"pebble_async", "pebble", true}} {
		t.Run(tc.name, func(t *testing.T) {
			_, broker := startKfake(t, []string{"events", "counts"})
			dir, metrics := t.TempDir(), testkit.FreeAddr(t)
			p := runInProcess(t, sdk.NewRegistry(), dir, stateToolConfig("querystate", dir, broker, metrics, tc.backend, queryStateOps(tc.async)), metrics)
			var recs []*kgo.Record // new ones per run: a produced record keeps its context
			for i, k := range keys {
				recs = append(recs, &kgo.Record{Topic: "events", Key: []byte(k), Value: fmt.Appendf(nil, `{"key":%q,"shop":%d}`, k, shops[i])})
			}
			produce(t, newClient(t, broker), recs...)
			countedIn(t, p, "counts", len(recs))
			countedIn(t, p, "per_shop", len(recs))
			d := &daemon{metrics: metrics}
			get := func(path string) (int, stateAnswer) {
				t.Helper()
				var a stateAnswer
				code := apiGet(t, d, path, "", &a)
				return code, a
			}
			owner := func(key string) (int, int) {
				kg := keygroup.Assign([]byte(key), 128)
				if keygroup.RangeFor(128, 2, 0).Contains(kg) {
					return kg, 0
				}
				return kg, 1
			}
			// Read right after the records were counted in: the answer
			// is consistent with every record processed.
			for _, q := range []struct{ op, key, param string }{
				{"counts", "apple", "key=apple"}, {"counts", "kiwi", "key=kiwi"}, {"counting", "plum", "key=plum"},
				{"per_shop", "7", "key=7"}, {"per_shop", "12", "key_base64=MTI="},
			} {
				want := wantKey[q.key]
				if q.op == "per_shop" {
					want = wantShop[q.key]
				}
				kg, sub := owner(q.key)
				var code int
				var a stateAnswer
				code, a = get("/api/v1/state/" + q.op + "/count?" + q.param)
				name := "counts"
				if q.op == "per_shop" {
					name = "per_shop"
				}
				if code != http.StatusOK || a.Operator != name || a.State != "count" || a.Kind != "value" || !a.Found ||
					string(a.Value) != fmt.Sprint(want) || a.KeyGroup != kg || a.Subtask != sub {
					t.Errorf("GET state/%s/count?%s = %d %+v, want found value %d, key group %d, subtask %d", q.op, q.param, code, a, want, kg, sub)
				}
				if q.op == "counting" && a.UID != "counting" {
					t.Errorf("GET by uid: uid %q, want counting", a.UID)
				}
			}
			code, a := get("/api/v1/state/counts/count?key=" + url.QueryEscape("no such key"))
			if kg, _ := owner("no such key"); code != http.StatusOK || a.Found || a.Value != nil || a.KeyGroup != kg || a.State != "count" {
				t.Errorf("GET of an unknown key = %d %+v, want 200, found false, no value", code, a)
			}
			code, a = get("/api/v1/state/nope/count?key=apple")
			if code != http.StatusNotFound || !slices.Equal(a.Ops, []string{"counts (uid counting)", "per_shop"}) ||
				a.Error != `job: no operator "nope"; operators with keyed state: counts (uid counting), per_shop` {
				t.Errorf("GET of an unknown operator = %d %+v, want 404 listing counts (uid counting), per_shop", code, a)
			}
			code, a = get("/api/v1/state/events/count?key=apple")
			if code != http.StatusNotFound || a.Error != `job: operator "events" keeps no keyed state; operators with keyed state: counts (uid counting), per_shop` {
				t.Errorf("GET of a source = %d %+v, want 404 saying it keeps no keyed state", code, a)
			}
			code, a = get("/api/v1/state/counts/nope?key=apple")
			if code != http.StatusNotFound || !slices.Equal(a.States, []string{"count"}) || a.Error != `state: no keyed state "nope"; the operator holds count` {
				t.Errorf("GET of an unknown state = %d %+v, want 404 listing count", code, a)
			}
			if code, a = get("/api/v1/state/counts/count"); code != http.StatusBadRequest {
				t.Errorf("GET without a key = %d %+v, want 400", code, a)
			}
		})
	}
}
