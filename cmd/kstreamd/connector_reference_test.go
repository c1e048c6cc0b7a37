package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kstreamd/kstreamd/connector"
	"github.com/kstreamd/kstreamd/sdk"
)

// The README's source, sink and format reference lies between these
// markers.
const (
	connectorReferenceStart = "<!-- connector-reference:start -->"
	connectorReferenceEnd   = "<!-- connector-reference:end -->"
)

// TestConnectorReference: the README section between the
// connector-reference markers is exactly connector.Reference of the
// built-in registry (sdk.NewRegistry().Connectors), so it cannot drift
// from the SourceFactory, SinkFactory and FormatFactory declarations. With
// -update it rewrites the section.
func TestConnectorReference(t *testing.T) {
	path := filepath.Join("..", "..", "README.md")
	readme, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok := strings.Cut(string(readme), connectorReferenceStart+"\n")
	section, after, ok2 := strings.Cut(rest, connectorReferenceEnd)
	if !ok || !ok2 || strings.Contains(after, connectorReferenceStart) {
		t.Fatalf("%s must hold one %s line, then one %s", path, connectorReferenceStart, connectorReferenceEnd)
	}
	want := "<!-- Generated from the connector registry (connector.Reference): edit the factory declarations, then run\n" +
		"     go test ./cmd/kstreamd -run TestConnectorReference -update -->\n\n" +
		connector.Reference(sdk.NewRegistry().Connectors) + "\n"
	if section == want {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(before+connectorReferenceStart+"\n"+want+connectorReferenceEnd+after), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the connector reference in %s", path)
		return
	}
	t.Errorf("the connector reference in %s differs from connector.Reference; run go test ./cmd/kstreamd -run TestConnectorReference -update\n%s",
		path, firstDiff(section, want))
}
