package sdk

import (
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/internal/testkit"
	"github.com/kstreamd/kstreamd/job"
	"github.com/kstreamd/kstreamd/operators"
)

// TestWebUIDrawsAPI drives the embedded page in headless chromium against
// fixed API answers (the real JSON types: job.Status, job.ClusterStatus,
// RulesResponse, checkpointHistory) and checks what it draws, exactly: the
// vertex colours of an idle, a busy and a back-pressured vertex; the
// checkpoint table with a failed checkpoint's reason and the restored-from
// one marked; the restarts with their causes, newest first; the rules
// with their counts summed over subtasks and both stages; no controls
// until a token is entered, then Stop with savepoint asks for
// confirmation and posts {"stop":true} with the bearer token; then, once
// /api/v1/job answers as a cluster member, the member's units and every
// member with its units, and no graph, controls, checkpoints or rules
// (a member runs no single job). No console error.
func TestWebUIDrawsAPI(t *testing.T) {
	at := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	wm := at.UnixMilli()
	status := job.Status{Name: "fraud", Ready: true, RestoredFrom: "/d/fraud/chk-4", MaxParallelism: 128,
		Operators: []job.VertexStatus{
			{ID: "payments", Name: "payments", Kind: "source", Topic: "payments", Parallelism: 2, RecordsOutPerS: 1500, BackPressuredMsPerS: 900, BusyMsPerS: 50, WatermarkMs: &wm},
			{ID: "score", Name: "score", Kind: "operator", Type: "map", Parallelism: 2, RecordsInPerS: 1500, RecordsOutPerS: 1500, BusyMsPerS: 1000,
				Subtasks: []job.SubtaskStatus{{Index: 0, BusyMsPerS: 1000}, {Index: 1, BusyMsPerS: 980}}},
			{ID: "alerts", Name: "alerts", Kind: "sink", Topic: "alerts", Parallelism: 1, RecordsInPerS: 1500},
		},
		Edges: []job.EdgeStatus{{From: "payments", To: "score", Kind: "key_by"}, {From: "score", To: "alerts", Kind: "rebalance"}},
		Restarts: []job.Restart{
			{Time: at.Add(-time.Minute), Cause: "operator score: boom 1"},
			{Time: at.Add(-30 * time.Second), Cause: "operator score: boom 2"},
		},
	}
	cluster := job.ClusterStatus{Job: "fraud", Member: "m-1", Group: "kstreamd-fraud", Joined: true,
		Units: []job.UnitStatus{{UnitID: job.UnitID{Stage: 0, Unit: 1}, Running: true, LastCheckpointID: 7}},
		Members: []job.MemberUnits{
			{Member: "m-1", Host: "/127.0.0.1", Units: []job.UnitID{{Stage: 0, Unit: 1}, {Stage: 1, Unit: 1}}},
			{Member: "m-2", Host: "/127.0.0.2", Units: []job.UnitID{{Stage: 0, Unit: 0}}},
		}}
	checkpoints := checkpointHistory([]checkpoint.Info{
		{ID: 4, Dir: "/d/fraud/chk-4", State: checkpoint.StateCompleted, Time: at, Bytes: 2048},
		{ID: 6, Dir: "/d/fraud/chk-6", State: checkpoint.StateCompleted, Time: at.Add(2 * time.Second), Bytes: 3 << 20},
	}, []checkpoint.CheckpointStats{
		{ID: 5, Status: checkpoint.StatusFailed, Triggered: at.Add(time.Second), Duration: 1500 * time.Millisecond, Dir: "/d/fraud/chk-5", Failure: "declined by score[1]: disk full"},
		{ID: 6, Status: checkpoint.StatusCompleted, Triggered: at.Add(2 * time.Second), Duration: 120 * time.Millisecond, Bytes: 3 << 20, Alignment: 15 * time.Millisecond, Dir: "/d/fraud/chk-6"},
	}, "/d/fraud/chk-4")
	rules := RulesResponse{Subtasks: []job.SubtaskRules{
		{Operator: "rules.route", Subtask: 0, Rules: []operators.RuleStatus{{ID: "big", State: operators.RuleActive, Version: "0:3", RecordsMatched: 5, Errors: 1}}},
		{Operator: "rules.route", Subtask: 1, Rules: []operators.RuleStatus{{ID: "big", State: operators.RuleActive, Version: "0:3", RecordsMatched: 7}}},
		{Operator: "rules", Subtask: 0, Rules: []operators.RuleStatus{{ID: "big", State: operators.RuleActive, Version: "0:3", Alerts: 2, StateEntries: 3}}},
	}}

	var clusterMode atomic.Bool
	s := &server{reg: prometheus.NewRegistry(), logger: slog.New(slog.DiscardHandler)}
	mux := http.NewServeMux()
	s.routeUI(mux)
	mux.HandleFunc("GET /api/v1/job", func(w http.ResponseWriter, _ *http.Request) {
		if clusterMode.Load() {
			writeJSON(w, http.StatusOK, cluster)
			return
		}
		writeJSON(w, http.StatusOK, status)
	})
	mux.HandleFunc("GET /api/v1/checkpoints", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, checkpoints) })
	mux.HandleFunc("GET /api/v1/rules", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, rules) })
	var spAuth, spBody atomic.Value
	mux.HandleFunc("POST /api/v1/savepoints", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		spAuth.Store(r.Header.Get("Authorization"))
		spBody.Store(string(body))
		writeJSON(w, http.StatusOK, SavepointResponse{Path: "/sp/savepoint-9-1"})
	})
	hs := httptest.NewServer(mux)
	defer hs.Close()

	b := testkit.NewBrowser(t, 60*time.Second)
	b.Do("open the page", chromedp.Navigate(hs.URL+"/ui/?refresh=250"), chromedp.WaitVisible(chromedp.CSS(`#rules tbody tr`)))

	var fills map[string]string
	b.Eval("vertex colours", `Object.fromEntries([...document.querySelectorAll("#graph g.vertex")].map(g => [g.dataset.id, g.querySelector("rect").getAttribute("fill")]))`, &fills)
	if want := map[string]string{"payments": "hsl(0, 0%, 45%)", "score": "hsl(0, 75%, 68%)", "alerts": "hsl(210, 75%, 90%)"}; !maps.Equal(fills, want) {
		t.Errorf("vertex fills %v, want back-pressured grey, busy red, idle blue: %v", fills, want)
	}
	if got := b.Text("restored", "#restored"); got != "Restored from /d/fraud/chk-4" {
		t.Errorf("restored line %q", got)
	}
	cps := b.Rows("checkpoints", "#checkpoints")
	var ids, states, failures []string
	for _, r := range cps {
		ids, states, failures = append(ids, r[0]), append(states, r[2]), append(failures, r[7])
	}
	if want := []string{"6", "5", "4 (restored)"}; !slices.Equal(ids, want) {
		t.Errorf("checkpoint ids %q, want newest first %q", ids, want)
	}
	if want := []string{"completed", "failed", "completed"}; !slices.Equal(states, want) {
		t.Errorf("checkpoint states %q, want %q", states, want)
	}
	if len(cps) == 3 && (cps[0][4] != "120 ms" || cps[0][5] != "3.0 MiB" || cps[0][6] != "15 ms" || cps[1][4] != "1.50 s" ||
		failures[1] != "declined by score[1]: disk full" || cps[2][4] != "–" || cps[2][5] != "2.0 KiB") {
		t.Errorf("checkpoint rows %q", cps)
	}
	restarts := b.Rows("restarts", "#restarts")
	if len(restarts) != 2 || restarts[0][1] != "operator score: boom 2" || restarts[1][1] != "operator score: boom 1" {
		t.Errorf("restarts %q, want boom 2 then boom 1", restarts)
	}
	if got := b.Rows("rules", "#rules"); len(got) != 1 || strings.Join(got[0], "|") != "rules|big|active|0:3|12|2|3|1" {
		t.Errorf("rules %q, want one row rules|big|active|0:3|12|2|3|1 (matches 5+7, alerts 2, entries 3, errors 1)", got)
	}

	// Read-only until a token is given; then stop with savepoint, confirmed.
	var controlsHidden bool
	b.Eval("controls", `document.getElementById("controls").hidden`, &controlsHidden)
	if !controlsHidden {
		t.Error("the controls show without a token")
	}
	dialogs := b.AcceptDialogs()
	b.Do("stop with savepoint", chromedp.SendKeys(chromedp.CSS("#token"), "tk"), chromedp.Click(chromedp.CSS("#token-set")),
		chromedp.WaitVisible(chromedp.CSS("#stop")), chromedp.Click(chromedp.CSS("#stop")), chromedp.WaitVisible(chromedp.CSS("#control-result.ok")))
	if got := b.Text("stop answer", "#control-result"); got != "stopped; savepoint /sp/savepoint-9-1" {
		t.Errorf("stop answer %q", got)
	}
	if auth, body := spAuth.Load(), spBody.Load(); auth != "Bearer tk" || body != `{"stop":true}` {
		t.Errorf("POST /api/v1/savepoints with Authorization %q and body %q, want \"Bearer tk\" and {\"stop\":true}", auth, body)
	}
	if got := dialogs(); !slices.Equal(got, []string{"Stop the job after a savepoint?"}) {
		t.Errorf("dialogs %q, want the one confirmation", got)
	}

	clusterMode.Store(true)
	b.Do("cluster mode", chromedp.WaitVisible(chromedp.CSS(`#members tbody tr`)), chromedp.WaitNotVisible(chromedp.CSS("#graph-section")),
		chromedp.WaitNotVisible(chromedp.CSS("#checkpoints-section")), chromedp.WaitNotVisible(chromedp.CSS("#rules-section")))
	if got := b.Text("cluster summary", "#cluster-summary"); got != "member m-1 of group kstreamd-fraud (joined)" {
		t.Errorf("cluster summary %q", got)
	}
	if got := b.Rows("units", "#units"); len(got) != 1 || strings.Join(got[0], "|") != "0|1|yes|7" {
		t.Errorf("units %q, want 0|1|yes|7", got)
	}
	members := b.Rows("members", "#members")
	var lines []string
	for _, m := range members {
		lines = append(lines, strings.Join(m, "|"))
	}
	if want := "m-1|/127.0.0.1|0/1, 1/1 m-2|/127.0.0.2|0/0"; strings.Join(lines, " ") != want {
		t.Errorf("members %q, want %q", lines, want)
	}
	if p := b.Problems(); len(p) > 0 {
		t.Errorf("browser console and log:\n%s", strings.Join(p, "\n"))
	}
}
