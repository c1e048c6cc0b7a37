package operators

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/runtime"
	"github.com/kstreamd/kstreamd/state"
)

// changeLines renders records as "key kind value" lines.
func changeLines(recs []runtime.Record) string {
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "%s %s %s\n", r.Key, r.Change, r.Value)
	}
	return b.String()
}

// TestChangelogNormalize feeds a table's upsert changelog (+U per upsert,
// -D per tombstone, as a table source emits it) through the normalizer on
// both backends, with a snapshot and restore half-way, and checks the
// exact full changelog: +I for a new key, -U old/+U new for a change,
// nothing for a repeat, a -U or the delete of an absent key, -D with the
// old row for a delete; a deleted key comes back as +I.
func TestChangelogNormalize(t *testing.T) {
	for _, kind := range []string{state.KindHashmap, state.KindPebble} {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, kind, t.TempDir(), nil, &ChangelogNormalize{}, 64)
			h.process(user("u1", "NL", 1), user("u2", "BE", 2), user("u1", "NL", 3), user("u1", "DE", 4),
				runtime.Record{Key: []byte("u2"), Value: []byte(`{"country":"XX"}`), Change: runtime.ChangeUpdateBefore})
			got := changeLines(h.emitted())
			r := snapshotRestore(t, h)
			h = newHarness(t, kind, t.TempDir(), r, &ChangelogNormalize{}, 64)
			h.process(user("u1", "", 5), user("u3", "", 6), user("u2", "FR", 7), user("u1", "AT", 8))
			got += changeLines(h.emitted())
			want := `u1 +I {"country":"NL"}
u2 +I {"country":"BE"}
u1 -U {"country":"NL"}
u1 +U {"country":"DE"}
u1 -D {"country":"DE"}
u2 -U {"country":"BE"}
u2 +U {"country":"FR"}
u1 +I {"country":"AT"}
`
			if got != want {
				t.Fatalf("changelog:\n%s\nwant:\n%s", got, want)
			}
			h.finish()
		})
	}
}
