package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/operators"
)

var update = flag.Bool("update", false, "rewrite the README's operator reference from the registry")

// The README's operator reference lies between these markers.
const (
	referenceStart = "<!-- operator-reference:start -->"
	referenceEnd   = "<!-- operator-reference:end -->"
)

// TestOperatorReference is issue 9's acceptance test of the operator
// reference: the README section between the operator-reference markers is
// exactly operators.Reference of the built-in registry, so it cannot drift
// from the Factory declarations. With -update it rewrites the section.
func TestOperatorReference(t *testing.T) {
	path := filepath.Join("..", "..", "README.md")
	readme, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	before, rest, ok := strings.Cut(text, referenceStart+"\n")
	section, after, ok2 := strings.Cut(rest, referenceEnd)
	if !ok || !ok2 || strings.Contains(after, referenceStart) {
		t.Fatalf("%s must hold one %s line, then one %s", path, referenceStart, referenceEnd)
	}
	want := "<!-- Generated from the operator registry (operators.Reference): edit the Factory declarations, then run\n" +
		"     go test ./cmd/kstreamd -run TestOperatorReference -update -->\n\n" +
		operators.Reference(operators.NewBuiltinRegistry()) + "\n"
	if section == want {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(before+referenceStart+"\n"+want+referenceEnd+after), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the operator reference in %s", path)
		return
	}
	t.Errorf("the operator reference in %s differs from operators.Reference; run go test ./cmd/kstreamd -run TestOperatorReference -update\n%s",
		path, firstDiff(section, want))
}

// firstDiff describes the first line where got and want differ.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d of the section:\n got: %s\nwant: %s", i+1, gl, wl)
		}
	}
	return ""
}
