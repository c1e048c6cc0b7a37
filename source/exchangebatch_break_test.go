package source

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/runtime"
)

// TestRepartitionSourceBatchRecordsAreNeverMarkers: a record of an
// exchange batch is a data record, whatever its headers: an input record
// carries its headers through a stage into the repartition topic, so one
// with a "kstreamd-marker" header of its own (written by whoever produces
// to the job's input) must reach the next stage as data. Read as a marker,
// a watermark marker naming an upstream unit moved the next stage's
// watermark to the record's value (a forged watermark: every window fires,
// later records are late), and a header the valve cannot decode failed the
// unit on every restart.
func TestRepartitionSourceBatchRecordsAreNeverMarkers(t *testing.T) {
	opts, produce := exchangeTopic(t)
	var b runtime.ExchangeBatch
	b.Append(time.UnixMilli(300), []byte("a"), []byte(`"d1"`), 1)
	b.AppendHeader(runtime.ChangeHeader, []byte("+I"))
	b.Append(time.UnixMilli(301), []byte("b"), []byte(`99999999999999`), 3)
	b.AppendHeader(runtime.MarkerHeader, []byte(runtime.MarkerWatermark))
	b.AppendHeader(runtime.MarkerUnitHeader, []byte("0/0"))
	b.AppendHeader(runtime.ChangeHeader, []byte("+I"))
	b.Append(time.UnixMilli(302), []byte("c"), []byte(`"d3"`), 2)
	b.AppendHeader(runtime.MarkerHeader, []byte("anything"))
	b.AppendHeader(runtime.ChangeHeader, []byte("+I"))
	produce(exchangeBatchRecord(b.Take(0)))
	got, err := runExchangeSource(t, opts, []string{"0/0"}, 3)
	if err != nil {
		t.Fatalf("emitted %q, then %v", got, err)
	}
	want := []string{
		`@0 "d1" ts=300 +I key=a []`,
		`@0 99999999999999 ts=301 +I key=b [kstreamd-marker=watermark kstreamd-unit=0/0]`,
		`@0 "d3" ts=302 +I key=c [kstreamd-marker=anything]`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("repartition source emitted\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
