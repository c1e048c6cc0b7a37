package source

import (
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/runtime"
)

// v1Rec is one record of a version-1 exchange batch as the repartition
// sink of f2a2eb3 wrote it: its own headers, then the change header, then
// (upsert) the changelog mode header.
type v1Rec struct {
	ts      int64 // 0: none
	key     []byte
	value   []byte
	headers [][2]string
}

// v1Batch encodes recs by the documented layout of version 1 (version
// byte 1, flags with bits 0-2 only), independently of runtime.ExchangeBatch.
func v1Batch(recs ...v1Rec) []byte {
	out := []byte{1}
	for _, r := range recs {
		var flags byte
		if r.key != nil {
			flags |= 1
		}
		if r.value != nil {
			flags |= 2
		}
		if r.ts != 0 {
			flags |= 4
		}
		out = append(out, flags)
		if r.ts != 0 {
			out = binary.AppendVarint(out, r.ts)
		}
		if r.key != nil {
			out = binary.AppendUvarint(out, uint64(len(r.key)))
			out = append(out, r.key...)
		}
		if r.value != nil {
			out = binary.AppendUvarint(out, uint64(len(r.value)))
			out = append(out, r.value...)
		}
		out = binary.AppendUvarint(out, uint64(len(r.headers)))
		for _, h := range r.headers {
			out = binary.AppendUvarint(out, uint64(len(h[0])))
			out = append(out, h[0]...)
			out = binary.AppendUvarint(out, uint64(len(h[1]))+1)
			out = append(out, h[1]...)
		}
	}
	return out
}

// TestRepartitionSourceReadsMixedBatchVersions: one partition of a
// repartition topic holding version-1 batches (written by a daemon of
// f2a2eb3 before the upgrade, or restored from its checkpoint), version-2
// batches (the change kind in the flags) and records of the format before
// batches, interleaved, emits every record with exactly the key, value,
// change kind, own headers and timestamp it was written with, in order.
func TestRepartitionSourceReadsMixedBatchVersions(t *testing.T) {
	opts, produce := exchangeTopic(t)
	ch := func(kind string) [2]string { return [2]string{runtime.ChangeHeader, kind} }
	first := v1Batch(
		v1Rec{ts: 100, key: []byte("a"), value: []byte(`"v1a"`), headers: [][2]string{{"trace", "t1"}, ch("+I")}},
		v1Rec{key: []byte("b"), value: []byte(`"v1b"`), headers: [][2]string{ch("-U")}},
		v1Rec{ts: 101, key: []byte("b"), value: []byte(`"v1c"`), headers: [][2]string{ch("+U")}},
		v1Rec{ts: 102, value: []byte(`"v1d"`), headers: [][2]string{{"e", ""}, ch("-D")}},
	)
	var b runtime.ExchangeBatch
	b.AppendChange(time.UnixMilli(200), []byte("c"), []byte(`"v2a"`), 0, runtime.ChangeInsert, false)
	b.AppendChange(time.Time{}, []byte("c"), []byte(`"v2b"`), 1, runtime.ChangeUpdateBefore, false)
	b.AppendHeader("trace", []byte("t2"))
	b.AppendChange(time.UnixMilli(201), []byte("c"), []byte(`"v2c"`), 0, runtime.ChangeUpdateAfter, false)
	b.AppendChange(time.UnixMilli(202), nil, []byte(`"v2d"`), 2, runtime.ChangeDelete, false)
	b.AppendHeader("x", nil)
	b.AppendHeader("y", []byte("z"))
	second := b.Take(0)
	if second[0] != 2 {
		t.Fatalf("the writer wrote version %d, want 2", second[0])
	}
	third := v1Batch(v1Rec{ts: 300, key: []byte("d"), value: []byte(`"v1e"`), headers: [][2]string{ch("-D")}})
	produce(
		exchangeBatchRecord(first),  // 0: the old daemon's
		exchangeBatchRecord(second), // 1: an upgraded daemon's
		&kgo.Record{Key: []byte("o"), Value: []byte(`"old"`), Timestamp: time.UnixMilli(250), Headers: []kgo.RecordHeader{ch2kgo(ch("+U"))}}, // 2: before batches
		exchangeBatchRecord(third), // 3: an old daemon again
	)
	got, err := runExchangeSource(t, opts, []string{"0/0"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`@0 "v1a" ts=100 +I key=a [trace=t1]`,
		`@0 "v1b" ts=777 -U key=b []`,
		`@0 "v1c" ts=101 +U key=b []`,
		`@0 "v1d" ts=102 -D key= [e=]`,
		`@1 "v2a" ts=200 +I key=c []`,
		`@1 "v2b" ts=777 -U key=c [trace=t2]`,
		`@1 "v2c" ts=201 +U key=c []`,
		`@1 "v2d" ts=202 -D key= [x= y=z]`,
		`@2 "old" ts=250 +U key=o []`,
		`@3 "v1e" ts=300 -D key=d []`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("repartition source emitted\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func ch2kgo(h [2]string) kgo.RecordHeader { return kgo.RecordHeader{Key: h[0], Value: []byte(h[1])} }

// TestRepartitionSourceUpsertModeInBothVersions: a record marked as an
// upsert changelog's reads the same from a version-1 batch (the mode as a
// header) and a version-2 batch (bit 6 of its flags): an upsert changelog
// source emits both with their change kinds and no header left; a full
// changelog source fails on the first of them with UpsertChangelogError
// naming its batch's offset, after the records before it, whichever the
// version.
func TestRepartitionSourceUpsertModeInBothVersions(t *testing.T) {
	mode := [2]string{runtime.ChangelogModeHeader, runtime.UpsertChangelogMode}
	v1 := v1Batch(
		v1Rec{ts: 10, key: []byte("k"), value: []byte(`"u1"`), headers: [][2]string{{runtime.ChangeHeader, "+U"}, mode}},
		v1Rec{ts: 11, key: []byte("k"), value: []byte(`"u2"`), headers: [][2]string{{"h", "1"}, {runtime.ChangeHeader, "-D"}, mode}},
	)
	var b runtime.ExchangeBatch
	b.AppendChange(time.UnixMilli(20), []byte("k"), []byte(`"u3"`), 0, runtime.ChangeUpdateAfter, true)
	b.AppendChange(time.UnixMilli(21), []byte("k"), []byte(`"u4"`), 1, runtime.ChangeDelete, true)
	b.AppendHeader("h", []byte("2"))
	v2 := b.Take(0)
	want := []string{
		`@0 "u1" ts=10 +U key=k []`,
		`@0 "u2" ts=11 -D key=k [h=1]`,
		`@1 "u3" ts=20 +U key=k []`,
		`@1 "u4" ts=21 -D key=k [h=2]`,
	}
	t.Run("upsert source", func(t *testing.T) {
		opts, produce := exchangeTopic(t)
		produce(exchangeBatchRecord(v1), exchangeBatchRecord(v2))
		got, err := runExchangeSourceWith(t, opts, []string{"0/0"}, 4, func(c *Config) { c.UpsertChangelog = true })
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("emitted\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
	for _, tc := range []struct {
		name   string
		values [][]byte
		offset int64
	}{
		{"version 1 first", [][]byte{v1, v2}, 0},
		{"version 2 after an unmarked record", [][]byte{nil, v2}, 1},
	} {
		t.Run("full changelog source, "+tc.name, func(t *testing.T) {
			opts, produce := exchangeTopic(t)
			for _, v := range tc.values {
				if v == nil {
					produce(&kgo.Record{Key: []byte("k"), Value: []byte(`"plain"`), Timestamp: time.UnixMilli(5), Headers: []kgo.RecordHeader{{Key: runtime.ChangeHeader, Value: []byte("+I")}}})
					continue
				}
				produce(exchangeBatchRecord(v))
			}
			got, err := runExchangeSource(t, opts, []string{"0/0"}, 5)
			var ue *UpsertChangelogError
			if !errors.As(err, &ue) || ue.Origin.Offset != tc.offset || ue.Origin.Topic != "rep" {
				t.Fatalf("emitted %q, err %v; want UpsertChangelogError at rep/0@%d", got, err, tc.offset)
			}
			if wantN := int(tc.offset); len(got) != wantN {
				t.Errorf("emitted %q before the error, want %d records", got, wantN)
			}
		})
	}
}
