package testkit

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// ChromiumPath returns Debian's chromium (scripts/test installs it), or
// $CHROMIUM; it fails the test without one: the browser is part of the
// test setup, not optional.
func ChromiumPath(t testing.TB) string {
	t.Helper()
	for _, name := range []string{os.Getenv("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium on PATH: scripts/test installs it (apt-get install chromium), or set CHROMIUM")
	return ""
}

// Browser is one tab of a headless chromium driven over the DevTools
// protocol (chromedp) for a test, with what the page wrote to its console.
type Browser struct {
	t   testing.TB
	ctx context.Context

	mu       sync.Mutex
	problems []string                             // console errors and warnings, exceptions, browser log errors and warnings
	allow    func(m chromedp.ConsoleMessage) bool // a message the test expects; nil: none
	done     chan struct{}
}

// NewBrowser starts headless chromium (1100x900, no sandbox: tests run as
// root in CI) with one tab whose actions time out after limit; at cleanup
// the browser is stopped.
func NewBrowser(t testing.TB, limit time.Duration) *Browser {
	t.Helper()
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]), chromedp.ExecPath(ChromiumPath(t)), chromedp.NoSandbox,
		chromedp.WindowSize(1100, 900), chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	ctx, cancel := context.WithTimeout(bctx, limit)
	b := &Browser{t: t, ctx: ctx, done: make(chan struct{})}
	messages := chromedp.Console(ctx)
	go func() {
		defer close(b.done)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type != chromedp.ConsoleError && m.Type != chromedp.ConsoleWarning && !m.IsException() {
				continue
			}
			b.mu.Lock()
			if b.allow == nil || !b.allow(m) {
				b.problems = append(b.problems, fmt.Sprintf("%s (%s %s:%d)", m, m.Source, m.URL, m.Line))
			}
			b.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-b.done
		cancelBrowser()
		cancelAlloc()
	})
	return b
}

// Allow makes the console messages allow reports true for expected (nil:
// none is); it applies to the messages that arrive from now on.
func (b *Browser) Allow(allow func(m chromedp.ConsoleMessage) bool) {
	b.mu.Lock()
	b.allow = allow
	b.mu.Unlock()
}

// AcceptDialogs accepts every JavaScript dialog (confirm, alert) the
// page opens from now on and returns a function that lists their
// messages so far.
func (b *Browser) AcceptDialogs() func() []string {
	var mu sync.Mutex
	var msgs []string
	dialogs := chromedp.Events(b.ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			mu.Lock()
			msgs = append(msgs, ev.Message)
			mu.Unlock()
			if _, err := chromedp.Call(b.ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true}); err != nil {
				return
			}
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(msgs)
	}
}

// Problems returns the console errors and warnings, uncaught exceptions
// and browser log errors and warnings so far, but the allowed ones.
func (b *Browser) Problems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.problems)
}

// Do runs actions in the tab, failing the test with what on an error.
func (b *Browser) Do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// Eval evaluates the JavaScript expression js in the page and decodes its
// JSON value into v.
func (b *Browser) Eval(what, js string, v any) {
	b.t.Helper()
	got, err := chromedp.Run(b.ctx, chromedp.Evaluate[json.RawMessage](js))
	if err == nil {
		err = json.Unmarshal(got, v)
	}
	if err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// Text returns the visible text of the first element sel (a CSS
// selector) matches.
func (b *Browser) Text(what, sel string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
	return strings.TrimSpace(s)
}

// Rows returns the text of each cell of each body row of the table sel
// matches.
func (b *Browser) Rows(what, sel string) [][]string {
	b.t.Helper()
	var rows [][]string
	b.Eval(what, `[...document.querySelectorAll(`+jsString(sel+" tbody tr")+`)].map(r => [...r.cells].map(c => c.textContent))`, &rows)
	return rows
}

// Screenshot returns a PNG of the whole page.
func (b *Browser) Screenshot() []byte {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	return png
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	q, _ := json.Marshal(s)
	return string(q)
}
