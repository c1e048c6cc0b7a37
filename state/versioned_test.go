package state

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// vt is epoch + n milliseconds.
func vt(n int64) time.Time { return epoch.Add(time.Duration(n) * time.Millisecond) }

// history renders a key's versions as "from=value" (from relative to
// epoch in ms, "-" for a tombstone).
func history(t testing.TB, s *VersionedValueState[string]) string {
	t.Helper()
	vs := must1(s.Versions())(t)
	var parts []string
	for _, v := range vs {
		val := v.Value
		if v.Deleted {
			val = "-"
		}
		parts = append(parts, fmt.Sprintf("%d=%s", v.From.Sub(epoch).Milliseconds(), val))
	}
	return strings.Join(parts, " ")
}

func versionedDesc(retention time.Duration) VersionedValueStateDescriptor[string] {
	return VersionedValueStateDescriptor[string]{Name: "users", Serializer: StringSerializer{}, HistoryRetention: retention}
}

func TestVersionedValueStateLookup(t *testing.T) {
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			b := open(t, testConfig(t, kind))
			s := must1(GetVersionedValueState(b, versionedDesc(time.Hour)))(t)
			b.SetCurrentKey([]byte("u1"))
			// Out of order on purpose: 100 NL, 300 DE, tombstone 500,
			// 200 BE (between NL and DE), 700 FR; a rewrite of 300.
			must(t, s.Put("NL", vt(100), vt(100)))
			must(t, s.Put("DE", vt(300), vt(300)))
			must(t, s.Delete(vt(500), vt(500)))
			must(t, s.Put("BE", vt(200), vt(500)))
			must(t, s.Put("FR", vt(700), vt(700)))
			must(t, s.Put("AT", vt(300), vt(700)))
			if got, want := history(t, s), "100=NL 200=BE 300=AT 500=- 700=FR"; got != want {
				t.Fatalf("history = %q, want %q", got, want)
			}
			for _, c := range []struct {
				at   int64
				want string // "" for none
			}{
				{99, ""}, {100, "NL"}, {199, "NL"}, {200, "BE"}, {299, "BE"}, {300, "AT"},
				{499, "AT"}, {500, ""}, {699, ""}, {700, "FR"}, {1 << 40, "FR"},
			} {
				v, ok, err := s.Get(vt(c.at))
				must(t, err)
				if got := map[bool]string{true: v, false: ""}[ok]; got != c.want || (c.want != "") != ok {
					t.Errorf("Get(%d) = %q, %v; want %q", c.at, v, ok, c.want)
				}
			}
			if v, ok := must2(s.Latest())(t); !ok || v != "FR" {
				t.Fatalf("Latest = %q, %v; want FR", v, ok)
			}
			// Another key is independent and empty.
			b.SetCurrentKey([]byte("u2"))
			if _, ok := must2(s.Get(vt(700)))(t); ok {
				t.Fatal("u2 has a value")
			}
			if _, ok := must2(s.Latest())(t); ok {
				t.Fatal("u2 has a latest value")
			}
			// A tombstone as newest version: Latest has none.
			must(t, s.Put("NL", vt(10), vt(10)))
			must(t, s.Delete(vt(20), vt(20)))
			if _, ok := must2(s.Latest())(t); ok {
				t.Fatal("u2 after its tombstone has a latest value")
			}
			if v, ok := must2(s.Get(vt(15)))(t); !ok || v != "NL" {
				t.Fatalf("u2 Get(15) = %q, %v; want NL", v, ok)
			}
		})
	}
}

func TestVersionedValueStateRetention(t *testing.T) {
	const retention = 100 * time.Millisecond
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			b := open(t, testConfig(t, kind))
			s := must1(GetVersionedValueState(b, versionedDesc(retention)))(t)
			b.SetCurrentKey([]byte("u1"))
			must(t, s.Put("A", vt(0), vt(0)))
			must(t, s.Put("B", vt(50), vt(50)))
			must(t, s.Put("C", vt(120), vt(120)))
			// cutoff 20: A is valid at 20, so it stays.
			if got, want := history(t, s), "0=A 50=B 120=C"; got != want {
				t.Fatalf("history = %q, want %q", got, want)
			}
			// At stream time 160 (cutoff 60) B is valid at the cutoff: A goes.
			next, ok := must2(s.Cleanup(vt(160)))(t)
			if got, want := history(t, s), "50=B 120=C"; got != want {
				t.Fatalf("history after Cleanup(160) = %q, want %q", got, want)
			}
			// B is superseded for good once the cutoff reaches 120.
			if !ok || !next.Equal(vt(220)) {
				t.Fatalf("next expiry = %v, %v; want 220", next.Sub(epoch), ok)
			}
			// A lookup at the cutoff is still exact; a write before it is refused.
			if v, ok := must2(s.Get(vt(60)))(t); !ok || v != "B" {
				t.Fatalf("Get(60) = %q, %v; want B", v, ok)
			}
			if err := s.Put("X", vt(59), vt(160)); !errors.Is(err, ErrTooOld) {
				t.Fatalf("Put at 59 with stream time 160: %v, want ErrTooOld", err)
			}
			if got, want := history(t, s), "50=B 120=C"; got != want {
				t.Fatalf("history after the refused put = %q, want %q", got, want)
			}
			// A tombstone valid at the cutoff leaves nothing: the key is cleared.
			must(t, s.Delete(vt(200), vt(200)))
			if _, _, err := s.Cleanup(vt(300)); err != nil {
				t.Fatal(err)
			}
			if got := history(t, s); got != "" {
				t.Fatalf("history after the tombstone expired = %q, want empty", got)
			}
			if n := storedEntries(t, b); n != 0 {
				t.Fatalf("%d entries stored after the key was cleared, want 0", n)
			}
			// One value never expires.
			must(t, s.Put("Z", vt(300), vt(300)))
			if _, ok := must2(s.Cleanup(vt(1 << 30)))(t); ok {
				t.Fatal("a single value reports an expiry")
			}
			if v, ok := must2(s.Get(vt(1 << 30)))(t); !ok || v != "Z" {
				t.Fatalf("Get = %q, %v; want Z", v, ok)
			}
		})
	}
}

// TestVersionedValueStateBounded writes a long history with a steady
// stream time and checks the kept versions never exceed one retention's
// worth plus one.
func TestVersionedValueStateBounded(t *testing.T) {
	const retention = 50 * time.Millisecond
	b := open(t, testConfig(t, KindHashmap))
	s := must1(GetVersionedValueState(b, versionedDesc(retention)))(t)
	b.SetCurrentKey([]byte("k"))
	for i := int64(0); i < 1000; i++ {
		must(t, s.Put(fmt.Sprint(i), vt(i*10), vt(i*10)))
		vs := must1(s.Versions())(t)
		if len(vs) > 6 { // versions in (now-50, now] every 10 ms, plus the one valid at the cutoff
			t.Fatalf("after %d puts %d versions kept: %s", i+1, len(vs), history(t, s))
		}
		if v, ok := must2(s.Get(vt(i*10 - 50)))(t); i >= 5 && (!ok || v != fmt.Sprint(i-5)) {
			t.Fatalf("Get(cutoff) after put %d = %q, %v; want %d", i, v, ok, i-5)
		}
	}
}

func TestVersionedValueStateRestore(t *testing.T) {
	for _, kind := range backendKinds {
		t.Run(kind, func(t *testing.T) {
			cfg := testConfig(t, kind)
			b := open(t, cfg)
			s := must1(GetVersionedValueState(b, versionedDesc(time.Hour)))(t)
			for i, k := range []string{"u1", "u2", "u3"} {
				b.SetCurrentKey([]byte(k))
				must(t, s.Put(k+"-a", vt(int64(i)), vt(0)))
				must(t, s.Delete(vt(10), vt(0)))
				must(t, s.Put(k+"-b", vt(20), vt(0)))
			}
			nb, err := reopen(t, b, cfg, nil)
			must(t, err)
			s = must1(GetVersionedValueState(nb, versionedDesc(time.Hour)))(t)
			for i, k := range []string{"u1", "u2", "u3"} {
				nb.SetCurrentKey([]byte(k))
				if got, want := history(t, s), fmt.Sprintf("%d=%s-a 10=- 20=%s-b", i, k, k); got != want {
					t.Fatalf("%s history after restore = %q, want %q", k, got, want)
				}
			}
		})
	}
}

func TestVersionedValueStateDescriptor(t *testing.T) {
	b := open(t, testConfig(t, KindHashmap))
	if _, err := GetVersionedValueState(b, VersionedValueStateDescriptor[string]{Name: "x", Serializer: StringSerializer{}}); err == nil {
		t.Fatal("retention 0 accepted")
	}
	if _, err := GetVersionedValueState(b, VersionedValueStateDescriptor[string]{Name: "x", HistoryRetention: time.Second}); err == nil {
		t.Fatal("nil serializer accepted")
	}
	// The same name as a plain value state of another type conflicts.
	must1(GetValueState(b, ValueStateDescriptor[int64]{Name: "users", Serializer: Int64Serializer{}}))(t)
	if _, err := GetVersionedValueState(b, versionedDesc(time.Hour)); !errors.Is(err, ErrStateConflict) {
		t.Fatalf("name clash: %v, want ErrStateConflict", err)
	}
}

func TestVersionsSerializer(t *testing.T) {
	ser := versionsSerializer[string]{StringSerializer{}}
	in := []Version[string]{
		{From: time.UnixMilli(-5), Value: ""},
		{From: time.UnixMilli(0), Deleted: true},
		{From: time.UnixMilli(1_700_000_000_123), Value: `{"country":"NL"}`},
	}
	b := must1(ser.Append(nil, in))(t)
	out := must1(ser.Decode(b))(t)
	if !slices.EqualFunc(in, out, func(a, b Version[string]) bool {
		return a.From.Equal(b.From) && a.Value == b.Value && a.Deleted == b.Deleted
	}) {
		t.Fatalf("round trip = %+v, want %+v", out, in)
	}
	if ser.Name() != "versions/string" {
		t.Fatalf("name %q", ser.Name())
	}
	for i := range len(b) {
		if _, err := ser.Decode(b[:i]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Decode of %d of %d bytes: %v, want ErrCorrupt", i, len(b), err)
		}
	}
	if _, err := ser.Decode(append(b, 0)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("trailing byte: %v", err)
	}
}

func FuzzVersionsSerializer(f *testing.F) {
	ser := versionsSerializer[string]{StringSerializer{}}
	seed, _ := ser.Append(nil, []Version[string]{{From: time.UnixMilli(3), Value: "a"}, {From: time.UnixMilli(9), Deleted: true}})
	f.Add(seed)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		vs, err := ser.Decode(b)
		if err != nil {
			return
		}
		again, err := ser.Append(nil, vs)
		if err != nil {
			t.Fatal(err)
		}
		vs2, err := ser.Decode(again)
		if err != nil || len(vs2) != len(vs) {
			t.Fatalf("re-decode: %v, %d vs %d versions", err, len(vs2), len(vs))
		}
	})
}
