package main

import (
	"bytes"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// uiConfig is a two-stage job on the embedded broker: source events
// (parallelism 2), keyed_count counts keyed by key, sink counted; a
// checkpoint every 500 ms, savepoints under dir/savepoints and the API
// behind the bearer token in $KSTREAMD_UI_TOKEN.
func uiConfig(dir, broker, metrics string) string {
	cfg := jobHead("ui", 2, dir, embeddedKafka(broker), metrics, "info") + `checkpoints:
  interval: 500ms
  savepoint_dir: ` + filepath.Join(dir, "savepoints") + `
sources:
  - name: events
    topic: events
operators:
  - name: counts
    type: keyed_count
    input: events
    key_by: key
sinks:
  - name: counted
    input: counts
    topic: counts
`
	return strings.Replace(cfg, "metrics:\n  address: "+metrics+"\n", "metrics:\n  address: "+metrics+"\n  bearer_token_env: KSTREAMD_UI_TOKEN\n", 1)
}

// drawnVertex is a vertex of the graph as the page drew it (its SVG
// group's data attributes).
type drawnVertex struct {
	ID   string  `json:"id"`
	Kind string  `json:"kind"`
	In   float64 `json:"in"`
	Out  float64 `json:"out"`
	Fill string  `json:"fill"`
}

// listedCheckpoint is an entry of GET /api/v1/checkpoints.
type listedCheckpoint struct {
	ID         int64
	State, Dir string
	Savepoint  bool
	DurationMS *int64 `json:"duration_ms"`
}

// TestWebUI is the web UI's acceptance in a real headless browser
// (Debian's chromium driven over the DevTools protocol by chromedp): a
// two-stage job runs on the embedded broker with records produced all the
// while. Without the token the page says the API needs one and shows no
// controls (read-only). With it, the graph shows every vertex the API
// lists, with its edges, records in/out per second above zero where
// records flow (the source's out, the operator's in and out, the sink's
// in), and a vertex's subtasks table has one row per subtask. A savepoint
// taken with the page's button is answered with its path and listed in
// the checkpoint history as a completed savepoint, also in
// /api/v1/checkpoints. No console error, no uncaught exception and no log
// error other than the 401s of the token-less phase. With -update the
// test writes the README's screenshot, docs/ui.png.
func TestWebUI(t *testing.T) {
	const token = "ui-t0ken"
	t.Setenv("KSTREAMD_UI_TOKEN", token)
	dir := t.TempDir()
	broker, metrics := testkit.FreeAddr(t), testkit.FreeAddr(t)
	d := startDaemon(t, dir, uiConfig(dir, broker, metrics), broker, metrics)
	cl := newClient(t, broker)
	producePaced(t, cl, 1<<30, 20, 10*time.Millisecond, func(i, j int) []*kgo.Record {
		recs := make([]*kgo.Record, 0, j-i)
		for n := i; n < j; n++ {
			k := fmt.Sprintf("k%02d", n%40)
			recs = append(recs, &kgo.Record{Topic: "events", Key: []byte(k), Value: fmt.Appendf(nil, `{"key":%q,"n":%d}`, k, n)})
		}
		return recs
	})

	b := testkit.NewBrowser(t, 90*time.Second)
	// The 401s of the token-less phase are expected.
	b.Allow(func(m chromedp.ConsoleMessage) bool { return m.Source == "network" && strings.Contains(m.Text, "401") })
	b.Do("open the page", chromedp.Navigate("http://"+metrics+"/ui/?refresh=300"))

	// Read-only without the token: the page asks for it.
	b.Do("token-less page", chromedp.WaitVisible(chromedp.CSS("#error")))
	var controlsHidden bool
	errText := b.Text("token-less error", "#error")
	b.Eval("controls", `document.getElementById("controls").hidden`, &controlsHidden)
	if errText != "The API needs a bearer token: enter it above." || !controlsHidden {
		t.Fatalf("without the token: error %q, controls hidden %v; want the token request and no controls", errText, controlsHidden)
	}

	b.Do("enter the token", chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.Click(chromedp.CSS("#token-set")),
		chromedp.WaitVisible(chromedp.CSS("#controls")), chromedp.WaitNotVisible(chromedp.CSS("#error")))
	b.Allow(nil)

	// Every vertex of the API's graph drawn, records flowing.
	var api struct {
		Operators []struct {
			ID, Name, Kind string
			Parallelism    int
		}
		Edges []struct{ From, To, Kind string }
	}
	if code := apiGet(t, d, "/api/v1/job", token, &api); code != 200 {
		t.Fatalf("GET /api/v1/job = %d", code)
	}
	var wantIDs []string
	for _, o := range api.Operators {
		wantIDs = append(wantIDs, o.Kind+":"+o.ID)
	}
	if got := strings.Join(wantIDs, " "); got != "source:events operator:counts sink:counted" {
		t.Fatalf("the API's vertices %q, want the source, the keyed count and the sink by uid", got)
	}
	var drawn []drawnVertex
	flowing := func(vs []drawnVertex) bool {
		if len(vs) != len(wantIDs) {
			return false
		}
		for _, v := range vs {
			if v.Kind != "sink" && v.Out <= 0 || v.Kind != "source" && v.In <= 0 {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(40 * time.Second)
	for {
		b.Eval("read the graph", `[...document.querySelectorAll("#graph g.vertex")].map(g => ({
			id: g.dataset.id, kind: g.dataset.kind, in: Number(g.dataset.in), out: Number(g.dataset.out),
			fill: g.querySelector("rect").getAttribute("fill")}))`, &drawn)
		if flowing(drawn) || time.Now().After(deadline) {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	var gotIDs []string
	for _, v := range drawn {
		gotIDs = append(gotIDs, v.Kind+":"+v.ID)
		if !strings.HasPrefix(v.Fill, "hsl(") {
			t.Errorf("vertex %s filled %q, want a busy/backpressure colour", v.ID, v.Fill)
		}
	}
	if !slices.Equal(gotIDs, wantIDs) || !flowing(drawn) {
		t.Fatalf("drawn vertices %+v; want %v each with records in (but the source) and out (but the sink) per second above 0", drawn, wantIDs)
	}
	var edges []string
	b.Eval("read the edges", `[...document.querySelectorAll("#graph g.edge")].map(g => g.dataset.from + ">" + g.dataset.to + ":" + g.dataset.kind)`, &edges)
	var wantEdges []string
	for _, e := range api.Edges {
		wantEdges = append(wantEdges, e.From+">"+e.To+":"+e.Kind)
	}
	if len(wantEdges) < 2 || !slices.Equal(edges, wantEdges) {
		t.Errorf("drawn edges %q, want the API's %q (at least events>counts and counts>counted)", edges, wantEdges)
	}

	// A vertex's subtasks.
	var subtaskRows int
	b.Do("open the subtasks of counts", chromedp.Click(chromedp.CSS(`#graph g.vertex[data-id="counts"]`)),
		chromedp.WaitVisible(chromedp.CSS("#subtask-table")))
	b.Eval("count the subtasks", `document.querySelectorAll("#subtask-table tbody tr").length`, &subtaskRows)
	if subtaskRows != 2 {
		t.Errorf("subtasks table of counts has %d rows, want 2", subtaskRows)
	}

	// A savepoint from the page, then in the history.
	b.Do("take a savepoint", chromedp.Click(chromedp.CSS("#savepoint")), chromedp.WaitVisible(chromedp.CSS("#control-result.ok")))
	result := b.Text("savepoint answer", "#control-result")
	m := regexp.MustCompile(`^savepoint (/\S+/savepoint-(\d+)-\d+)$`).FindStringSubmatch(result)
	if m == nil || filepath.Dir(m[1]) != filepath.Join(dir, "savepoints") {
		t.Fatalf("savepoint answer %q, want \"savepoint <dir>/savepoints/savepoint-<id>-<unix>\"", result)
	}
	id, _ := strconv.ParseInt(m[2], 10, 64)
	var row []string
	sel := fmt.Sprintf(`#checkpoints tr[data-id="%d"]`, id)
	b.Do("find the savepoint in the history", chromedp.WaitVisible(chromedp.CSS(sel)))
	b.Eval("read its row", `[...document.querySelector('`+sel+`').cells].map(c => c.textContent)`, &row)
	if len(row) != 8 || row[0] != m[2] || row[1] != "savepoint" || row[2] != "completed" || row[7] != m[1] || row[4] == "–" {
		t.Errorf("history row of savepoint %d: %q; want id, savepoint, completed, a duration and its directory", id, row)
	}
	var list []listedCheckpoint
	apiGet(t, d, "/api/v1/checkpoints", token, &list)
	if i := slices.IndexFunc(list, func(c listedCheckpoint) bool { return c.ID == id }); i < 0 ||
		!list[i].Savepoint || list[i].State != "completed" || list[i].Dir != m[1] || list[i].DurationMS == nil {
		t.Errorf("/api/v1/checkpoints %+v, want savepoint %d completed in %s with a duration", list, id, m[1])
	}

	if *update {
		time.Sleep(time.Second) // a refresh with the rates of a steady second
		if err := writeSmallPNG(filepath.Join("..", "..", "docs", "ui.png"), b.Screenshot()); err != nil {
			t.Fatal(err)
		}
	}
	if p := b.Problems(); len(p) > 0 {
		t.Errorf("browser console and log:\n%s", strings.Join(p, "\n"))
	}
}

// writeSmallPNG writes the PNG screenshot shot to path re-encoded with the
// best compression (the README's image; chromium's PNGs compress fast,
// not small).
func writeSmallPNG(path string, shot []byte) error {
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&buf, img); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}
