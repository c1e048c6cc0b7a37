package pipeline

import (
	"maps"
	"testing"
)

// TestPlanUIDs: the uids of testdata/uid.good.yaml reach the graph
// (graph.Graph.UIDs, only where they differ from the name; UID falls back
// to the name) and checkpoints.allow_non_restored_state the job settings.
func TestPlanUIDs(t *testing.T) {
	cfg, err := Load("testdata/uid.good.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := cfg.Plan()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"events": "events-v1", "tally": "counts", "out": "counted"}
	if !maps.Equal(g.UIDs, want) {
		t.Errorf("UIDs = %v, want %v", g.UIDs, want)
	}
	if g.UID("tally") != "counts" || g.UID("events.dead-letter") != "events.dead-letter" {
		t.Errorf("UID(tally) = %q, UID of a non-vertex = %q", g.UID("tally"), g.UID("events.dead-letter"))
	}
	// An exactly-once Kafka sink's default transactional id prefix
	// follows its uid: renamed with the uid kept, its recovery fences the
	// transactions the run before left open.
	if got, want := g.Sinks[0].TransactionalIDPrefix, "kstreamd-"+g.Job+"-counted"; got != want {
		t.Errorf("sink out (uid counted): transactional id prefix %q, want %q", got, want)
	}
	if !cfg.Settings().AllowNonRestoredState {
		t.Errorf("checkpoints.allow_non_restored_state: true did not reach the settings")
	}
}
