package operators

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/kstreamd/kstreamd/runtime"
)

// TestTopNDeepCheckedRecord: a record nested deeper than encoding/json's
// 10,000 levels is valid to gjson, the check a Kafka source of format json
// marks its records with (runtime.ValidJSON), and invalid to encoding/json,
// which decodes top_n's state. top_n must not take the source's mark for
// encoding/json's check: the record is ranked as the string of its bytes
// (as without the mark), so the ranking's checkpoint restores, on both
// backends, and the rankings go on from it.
func TestTopNDeepCheckedRecord(t *testing.T) {
	deep := `{"price":5,"x":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`
	if !gjson.Valid(deep) || json.Valid([]byte(deep)) {
		t.Fatalf("gjson.Valid %v, json.Valid %v: want true, false", gjson.Valid(deep), json.Valid([]byte(deep)))
	}
	quoted, _ := json.Marshal(deep)
	p := TopNParams{N: 2, By: compiled(t, "price"), Order: TopNDesc}
	for _, kind := range backends {
		t.Run(kind, func(t *testing.T) {
			h, err := openStateful(t, kind, t.TempDir(), nil, nil, NewTopN(p))
			if err != nil {
				t.Fatal(err)
			}
			rec := runtime.Record{Key: []byte("k"), Value: []byte(deep), Format: runtime.FormatJSON, Timestamp: time.UnixMilli(1)}
			rec.SetDecoded(runtime.ValidJSON{}) // as the source marks it
			h.process(rec)
			first := rankText(h.emitted())
			h2, err := openStateful(t, kind, t.TempDir(), nil, snapshotRestore(t, h), NewTopN(p))
			if err != nil {
				t.Fatal(err)
			}
			h2.process(bid("k", "b", 9, 2))
			got := append(first, rankText(h2.finish())...)
			want := []string{
				`+I k#1 {"key":"k","rank":1,"row":` + string(quoted) + `}`,
				`-U k#1 {"key":"k","rank":1,"row":` + string(quoted) + `}`,
				`+U k#1 {"key":"k","rank":1,"row":{"bid":"b","price":9}}`,
				`+I k#2 {"key":"k","rank":2,"row":` + string(quoted) + `}`,
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("changelog (%d records)\n%.300q\nwant\n%.300q", len(got), got, want)
			}
		})
	}
}
