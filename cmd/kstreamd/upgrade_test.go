package main

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/internal/testkit"
)

// upgradeBody is the operators and sinks of TestUpgradeKeepsState's job:
// the keyed count called name (uid when not empty) written to topic
// counts, and, with extra, a second keyed count "extra" by n written to
// topic extra.
func upgradeBody(name, uid string, extra bool) string {
	b := "operators:\n  - name: " + name + "\n"
	if uid != "" {
		b += "    uid: " + uid + "\n"
	}
	b += "    type: keyed_count\n    input: events\n    key_by: key\n"
	if extra {
		b += "  - name: extra\n    type: keyed_count\n    input: events\n    key_by: n\n"
	}
	b += "sinks:\n  - name: counted\n    input: " + name + "\n    topic: counts\n"
	if extra {
		b += "  - name: extra-out\n    input: extra\n    topic: extra\n"
	}
	return b
}

// countsByKey returns, per key, the counts keyed_count wrote to topic, in
// the order written.
func countsByKey(t *testing.T, broker, topic string) map[string][]int {
	t.Helper()
	out := map[string][]int{}
	for _, r := range readUncommitted(t, broker, topic) {
		var c struct {
			Key   string `json:"key"`
			Count int    `json:"count"`
		}
		if err := json.Unmarshal(r.Value, &c); err != nil {
			t.Fatalf("%s record %q: %v", topic, r.Value, err)
		}
		out[c.Key] = append(out[c.Key], c.Count)
	}
	return out
}

// TestUpgradeKeepsState is issue 26 item 5's acceptance. A keyed count
// "counts" (and a second one, "extra") counts a fixed input and stops.
// Renamed to "tally" with uid: counts, it restores the counts: its output
// goes on from them (every key's counts 1..n once each, exactly, over both
// runs), and the log names the rename. With "extra" removed the restore is
// refused (exit 1) naming "extra", its uid and the way out; with
// --allow-non-restored-state the same config starts, logs that extra's
// state is dropped, and the remaining count goes on exactly.
func TestUpgradeKeepsState(t *testing.T) {
	_, broker := startKfake(t, []string{"events", "counts", "extra"})
	dir := t.TempDir()
	cl := newClient(t, broker)
	phases := [][]string{
		{"apple", "kiwi", "apple", "fig"},
		{"kiwi", "apple", "plum"},
		{"plum", "fig", "apple"},
	}
	sent := 0
	run := func(body string, phase int, extra ...string) *daemon {
		t.Helper()
		metrics := testkit.FreeAddr(t)
		d := launchDaemon(t, dir, stateToolConfig("upgrade", dir, broker, metrics, "hashmap", body), broker, metrics, extra...)
		produce(t, cl, keyedEvents(phases[phase]...)...)
		sent += len(phases[phase])
		op := "counts"
		if strings.Contains(body, "name: tally") {
			op = "tally"
		}
		// Each run reads only the records produced since the last one.
		countedAndCheckpointed(t, d, op, len(phases[phase]))
		if code := d.stop(t); code != 0 {
			t.Fatalf("soft stop exited %d:\n%s", code, d.out.String())
		}
		return d
	}
	wantCounts := func(upTo int) map[string][]int {
		n := map[string]int{}
		out := map[string][]int{}
		for _, ph := range phases[:upTo+1] {
			for _, k := range ph {
				n[k]++
				out[k] = append(out[k], n[k])
			}
		}
		return out
	}
	check := func(what string, upTo int) {
		t.Helper()
		got, want := countsByKey(t, broker, "counts"), wantCounts(upTo)
		if len(got) != len(want) {
			t.Errorf("%s: counts of %d keys %v, want %v", what, len(got), got, want)
		}
		for k, w := range want {
			if !slices.Equal(got[k], w) {
				t.Errorf("%s: key %s counts %v, want %v", what, k, got[k], w)
			}
		}
	}

	run(upgradeBody("counts", "", true), 0)
	check("first run", 0)

	// Renamed, uid kept: the counts go on.
	d := run(upgradeBody("tally", "counts", true), 1)
	check("renamed with uid", 1)
	if logCount(d.out.String(), "restoring the state of a renamed operator by its uid", "operator=tally", "uid=counts", "recorded_as=counts") != 1 {
		t.Errorf("the rename is not logged once:\n%s", d.out.String())
	}

	// The checkpoint records the new name with the uid: state ls shows
	// both, dump --operator finds it by uid.
	chk, meta, err := checkpoint.NewStorage(filepath.Join(dir, "checkpoints"), "upgrade", 0, nil).Latest()
	if err != nil || meta.Operators["tally"].UID != "counts" {
		t.Fatalf("latest checkpoint %s: %v, tally recorded with uid %q, want counts", chk, err, meta.Operators["tally"].UID)
	}
	if code, out, errOut := stateCLI("ls", chk); code != 0 || !slices.Contains(fieldLines(out), "tally counts 2 count keyed value (hashmap) int64 false 4 "+strconv.Itoa(4*15+(5+4+3+4))) {
		t.Errorf("state ls exit %d:\n%s%s\nwant the row of tally with uid counts and its 4 keys", code, out, errOut)
	}
	if code, out, _ := stateCLI("dump", "--operator", "counts", "--key", "apple", chk); code != 0 || !strings.Contains(out, `"operator":"tally"`) || !strings.Contains(out, `"key":"apple","value":3}`) {
		t.Errorf("dump --operator counts (the uid) --key apple: exit %d %q, want tally's count 3", code, out)
	}

	// extra removed: refused, naming it.
	metrics := testkit.FreeAddr(t)
	removed := upgradeBody("tally", "counts", false)
	d = launchDaemon(t, dir, stateToolConfig("upgrade", dir, broker, metrics, "hashmap", removed), broker, metrics)
	if code := d.waitExit(t, 60*time.Second); code != 1 {
		t.Fatalf("restore without extra exited %d, want 1:\n%s", code, d.out.String())
	}
	for _, w := range []string{
		`the checkpoint holds state of \"extra\" (uid \"extra\"), which the pipeline no longer has: no source, operator or sink has that uid`,
		"to drop the state instead, run with --allow-non-restored-state (or checkpoints.allow_non_restored_state: true)",
	} {
		if logCount(d.out.String(), `msg="job failed"`, w) != 1 {
			t.Errorf("the \"job failed\" line does not say %q:\n%s", w, d.out.String())
		}
	}
	if strings.Contains(d.out.String(), "job running") || logCount(d.out.String(), "job failed; restarting") != 0 {
		t.Errorf("the refused restore ran the job or restarted it")
	}

	// Accepted with --allow-non-restored-state: extra's state dropped and
	// logged, the count goes on.
	d = run(removed, 2, "--allow-non-restored-state")
	check("extra removed", 2)
	if logCount(d.out.String(), "dropping the state of an operator the pipeline no longer has", "operator=extra", "uid=extra") != 1 {
		t.Errorf("extra's dropped state is not logged once:\n%s", d.out.String())
	}
	// extra counted the first two phases only (each n once).
	var extraN int
	for _, cs := range countsByKey(t, broker, "extra") {
		extraN += len(cs)
	}
	if want := len(phases[0]) + len(phases[1]); extraN != want || sent != 10 {
		t.Errorf("extra wrote %d counts, want %d", extraN, want)
	}
}
