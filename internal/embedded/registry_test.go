package embedded

import (
	"context"
	"net/http"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
)

// TestSchemaRegistryPersists: a schema registered through the embedded
// registry's REST API keeps its subject, version and id across a restart
// on the same data dir; without a data dir nothing is written.
func TestSchemaRegistryPersists(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	r, err := StartSchemaRegistry(nil, "127.0.0.1:0", dir)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := sr.NewClient(sr.URLs(r.URL()))
	if err != nil {
		t.Fatal(err)
	}
	const a = `{"type":"record","name":"A","fields":[{"name":"x","type":"int"}]}`
	const b = `{"type":"record","name":"B","fields":[{"name":"y","type":"string"}]}`
	sa, err := cl.CreateSchema(ctx, "a-value", sr.Schema{Schema: a})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := cl.CreateSchema(ctx, "b-value", sr.Schema{Schema: b})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r2, err := StartSchemaRegistry(nil, "127.0.0.1:0", dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	cl2, _ := sr.NewClient(sr.URLs(r2.URL()))
	for _, want := range []sr.SubjectSchema{sa, sb} {
		got, err := cl2.SchemaByID(ctx, want.ID)
		if err != nil || got.Schema != want.Schema.Schema {
			t.Fatalf("id %d after restart: %+v %v", want.ID, got, err)
		}
		ss, err := cl2.SchemaByVersion(ctx, want.Subject, want.Version)
		if err != nil || ss.ID != want.ID {
			t.Fatalf("%s v%d after restart: %+v %v", want.Subject, want.Version, ss, err)
		}
	}
	// a new schema after the restart gets a new id, not a reused one
	sc, err := cl2.CreateSchema(ctx, "c-value", sr.Schema{Schema: `"string"`})
	if err != nil || sc.ID == sa.ID || sc.ID == sb.ID {
		t.Fatalf("new id %d (old %d %d) %v", sc.ID, sa.ID, sb.ID, err)
	}
	resp, err := http.Get(r2.URL() + "/subjects")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /subjects: %v %v", resp, err)
	}
	resp.Body.Close()
}
