package state

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/state/keygroup"
)

// TestReadKeyedSnapshot: a keyed snapshot of both backends (Pebble full and
// incremental) read back with ReadKeyedSnapshot gives every state's meta
// record and exactly the stored entries, in key order, each decoded by its
// serializer: an int64 value, a json list with TTL (one timestamp per
// element), a string/json map, a bytes value in base64 with its
// serializer named, and a key that is not UTF-8 in base64.
func TestReadKeyedSnapshot(t *testing.T) {
	for _, tc := range []struct{ kind, shared string }{{KindHashmap, ""}, {KindPebble, ""}, {KindPebble, "shared"}} {
		t.Run(tc.kind+"/"+tc.shared, func(t *testing.T) {
			cfg := testConfig(t, tc.kind)
			clock := newFakeClock()
			cfg.Clock = clock
			b := open(t, cfg)
			counts := must1(GetValueState(b, ValueStateDescriptor[int64]{Name: "count", Serializer: Int64Serializer{}}))(t)
			ttl := &StateTtlConfig{TTL: time.Hour}
			lists := must1(GetListState(b, ListStateDescriptor[string]{Name: "seen", Serializer: JSONSerializer[string]{}, TTL: ttl}))(t)
			maps := must1(GetMapState(b, MapStateDescriptor[string, map[string]int]{Name: "by", KeySerializer: StringSerializer{}, ValueSerializer: JSONSerializer[map[string]int]{}}))(t)
			raw := must1(GetValueState(b, ValueStateDescriptor[[]byte]{Name: "raw", Serializer: BytesSerializer{}}))(t)
			must1(GetValueState(b, ValueStateDescriptor[int64]{Name: "unused", Serializer: Int64Serializer{}}))(t)
			b.SetCurrentKey([]byte("alice"))
			must(t, counts.Update(3))
			must(t, lists.Add("x"))
			must(t, lists.Add("y"))
			must(t, maps.Put("m", map[string]int{"a": 1}))
			b.SetCurrentKey([]byte{0xff, 0x00})
			must(t, raw.Update([]byte{1, 2}))
			dir := t.TempDir()
			shared := ""
			if tc.shared != "" {
				shared = t.TempDir()
			}
			ks := snapshotOf(t, b, dir, shared)

			var lines []string
			infos, err := ReadKeyedSnapshot(RestoreHandle{Handle: ks.Handle, Dir: dir, SharedDir: shared}, t.TempDir(), func(e KeyedEntry) error {
				d, err := e.Decode()
				if err != nil {
					return err
				}
				j, _ := json.Marshal(d)
				lines = append(lines, string(j))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, in := range infos {
				names = append(names, in.Name+":"+in.Kind+":"+in.Serializer)
			}
			if got, want := strings.Join(names, " "), "by:map:string/json count:value:int64 raw:value:bytes seen:list:json unused:value:int64"; got != want {
				t.Errorf("states = %s, want %s", got, want)
			}
			ts := epoch.UnixMilli()
			kgAlice, kgRaw := keyGroupOf("alice"), keyGroupOf("\xff\x00")
			want := map[string]bool{
				`{"state":"count","kind":"value","key_group":` + itoa(kgAlice) + `,"key":"alice","value":3}`:                                                                true,
				`{"state":"seen","kind":"list","key_group":` + itoa(kgAlice) + `,"key":"alice","value":["x","y"],"ttl_timestamps":[` + itoa64(ts) + `,` + itoa64(ts) + `]}`: true,
				`{"state":"by","kind":"map","key_group":` + itoa(kgAlice) + `,"key":"alice","user_key":"m","value":{"a":1}}`:                                                true,
				`{"state":"raw","kind":"value","key_group":` + itoa(kgRaw) + `,"key_base64":"/wA=","value_base64":"AQI=","serializer":"bytes"}`:                             true,
			}
			if len(lines) != len(want) {
				t.Fatalf("entries:\n%s\nwant %d", strings.Join(lines, "\n"), len(want))
			}
			for _, l := range lines {
				if !want[l] {
					t.Errorf("unexpected entry %s", l)
				}
			}
		})
	}
}

func keyGroupOf(key string) int { return keygroup.Assign([]byte(key), testMaxP) }

func itoa(n int) string { return strconv.Itoa(n) }

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }
