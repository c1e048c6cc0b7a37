package pipeline

import (
	"testing"

	"github.com/kstreamd/kstreamd/graph"
)

// globalJoinConfig is a click stream enriched from a users table by
// global_table_join at parallelism 2 (the table's source at 1).
const globalJoinConfig = `job:
  name: enrich
  parallelism: 2
kafka:
  brokers: [localhost:9092]
sources:
  - name: clicks
    topic: clicks
  - name: users
    topic: users
    table: true
    parallelism: 1
operators:
  - name: enrich
    type: global_table_join
    input: clicks
    broadcast: users
    params:
      key: user
      join: left
      select: '{"click": left.id, "country": right == null ? null : right.country}'
sinks:
  - name: out
    input: enrich
    topic: enriched
`

// TestPlanGlobalTableJoin: a global table join reads its stream over a
// forward edge (no key-group hash edge: the stream is not re-keyed) and
// the table over a broadcast edge; the table source is marked a table and
// a broadcast source (so the stream waits for it to catch up).
func TestPlanGlobalTableJoin(t *testing.T) {
	cfg, err := Parse("enrich.yaml", []byte(globalJoinConfig), nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := cfg.Plan()
	if err != nil {
		t.Fatal(err)
	}
	want := `job enrich max_parallelism=128
source clicks topic=clicks p=2
source users topic=users p=1
operator enrich type=global_table_join p=2
sink out topic=enriched p=2
clicks -forward-> enrich
users -broadcast-> enrich[1]
enrich -forward-> out
`
	if got := g.String(); got != want {
		t.Fatalf("plan:\n%s\nwant:\n%s", got, want)
	}
	for _, e := range g.Edges {
		if e.Kind == graph.Hash {
			t.Fatalf("hash edge %s in a global table join's plan", e)
		}
	}
	users, clicks := g.Sources[1], g.Sources[0]
	if !users.Table || !users.Broadcast || clicks.Table || clicks.Broadcast {
		t.Fatalf("users table=%v broadcast=%v, clicks table=%v broadcast=%v; want users a broadcast table, clicks neither",
			users.Table, users.Broadcast, clicks.Table, clicks.Broadcast)
	}
}

// TestPlanTableJoin: table_join reads the stream and the table each over
// its own key-group hash edge (logical inputs 0 and 1), keyed by the
// click's user and the table's Kafka key.
func TestPlanTableJoin(t *testing.T) {
	cfg, err := Parse("enrich.yaml", []byte(`job:
  name: enrich
  parallelism: 2
kafka:
  brokers: [localhost:9092]
sources:
  - name: clicks
    topic: clicks
  - name: users
    topic: users
    table: true
operators:
  - name: enrich
    type: table_join
    inputs:
      left: {from: clicks, key_by: user}
      right: {from: users, key_by: key}
    params:
      mode: event_time
      join: left
      select: '{"click": left.id, "country": right == null ? null : right.country}'
sinks:
  - name: out
    input: enrich
    topic: enriched
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := cfg.Plan()
	if err != nil {
		t.Fatal(err)
	}
	want := `job enrich max_parallelism=128
source clicks topic=clicks p=2
source users topic=users p=2
operator enrich type=table_join p=2
sink out topic=enriched p=2
clicks -hash(user)-> enrich
users -hash(key)-> enrich[1]
enrich -forward-> out
`
	if got := g.String(); got != want {
		t.Fatalf("plan:\n%s\nwant:\n%s", got, want)
	}
	if !g.Sources[1].Table || g.Sources[1].Broadcast {
		t.Fatalf("users: table=%v broadcast=%v, want a table that is not broadcast", g.Sources[1].Table, g.Sources[1].Broadcast)
	}
}
