package testenv

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/capstan-dev/capstan/internal/browser"
	"github.com/capstan-dev/capstan/internal/waitfor"
)

// ChromiumEnv names the browser the tests drive; by default Debian's
// /usr/bin/chromium, which .ci/run installs.
const ChromiumEnv = browser.PathEnv

// ChromiumPath is the browser the tests drive.
func ChromiumPath() string { return browser.Path() }

// Browser starts a headless Chromium with an empty profile, driven over
// the DevTools protocol, and returns a context of its first tab. It is
// closed when the test ends.
func Browser(t testing.TB) context.Context {
	t.Helper()
	path := ChromiumPath()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no Chromium at %s (apt-get install chromium, or set %s): %v", path, ChromiumEnv, err)
	}
	ctx, cancel := browser.New(context.Background(), path, t.TempDir(), t.Logf)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	return ctx
}

// Tab drives one browser tab in a test.
type Tab struct {
	t   testing.TB
	ctx context.Context
}

// NewTab starts a browser (see Browser) and returns its tab. An exception
// the page's scripts leave uncaught fails the test.
func NewTab(t testing.TB) *Tab {
	t.Helper()
	b := &Tab{t: t, ctx: Browser(t)}
	var mu sync.Mutex
	var thrown []string
	err := chromedp.Listen(b.ctx, func(ev any) {
		if e, ok := ev.(*runtime.EventExceptionThrown); ok && e.ExceptionDetails != nil {
			d := e.ExceptionDetails
			msg := d.Text
			if d.Exception != nil && d.Exception.Description != "" {
				msg += " " + d.Exception.Description
			}
			mu.Lock()
			thrown = append(thrown, fmt.Sprintf("%s (%s:%d)", msg, d.URL, d.LineNumber+1))
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range thrown {
			t.Errorf("the page threw: %s", e)
		}
	})
	return b
}

// For is the same tab reporting to t (a subtest).
func (b *Tab) For(t testing.TB) *Tab { return &Tab{t: t, ctx: b.ctx} }

// Go opens a URL and waits for its load.
func (b *Tab) Go(url string) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, chromedp.Navigate(url)); err != nil {
		b.t.Fatalf("opening %s: %v", url, err)
	}
}

// Call sends one DevTools protocol command to the tab, for what the Tab
// has no method for: blocking or pausing requests, scripts run before a
// page's own.
func Call[P, R any](b *Tab, cmd cdp.Command[P, R], params P) (R, error) {
	return chromedp.Call(b.ctx, cmd, params)
}

// Eval evaluates a JavaScript expression in the page.
func Eval[T any](b *Tab, expr string) (T, error) {
	return chromedp.Run(b.ctx, chromedp.Evaluate[T](expr))
}

// EvalAwait is Eval of an expression whose value is a promise: the value
// it resolves to.
func EvalAwait[T any](b *Tab, expr string) (T, error) {
	return chromedp.Run(b.ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
}

// WaitText waits until the first element matching the CSS selector holds
// text, and returns its whole text.
func (b *Tab) WaitText(selector, text string, timeout time.Duration) string {
	b.t.Helper()
	js := fmt.Sprintf(`(() => { const e = document.querySelector(%q); return e ? [true, e.innerText] : [false, ""]; })()`, selector)
	last := "(no element matches)"
	err := waitfor.Poll(context.Background(), 250*time.Millisecond, timeout, waitfor.Simple(func(context.Context) (bool, string) {
		got, err := Eval[[2]any](b, js)
		if err != nil {
			return false, err.Error()
		}
		found, _ := got[0].(bool)
		if !found {
			return false, ""
		}
		last, _ = got[1].(string)
		return strings.Contains(last, text), ""
	}))
	if err != nil {
		page, _ := Eval[string](b, `document.body.innerText.slice(0, 4000)`)
		b.t.Fatalf("%s never showed %q (%v); it shows:\n%s\nThe page shows:\n%s", selector, text, err, last, page)
	}
	return last
}

// Text is the text of the first element matching the CSS selector, ""
// when none does.
func (b *Tab) Text(selector string) string {
	b.t.Helper()
	got, err := Eval[string](b, fmt.Sprintf(`(() => { const e = document.querySelector(%q); return e ? e.innerText : ""; })()`, selector))
	if err != nil {
		b.t.Fatal(err)
	}
	return got
}

// Click clicks the first element matching the CSS selector, once it is
// visible. If the page redraws the element between finding and clicking
// it, the click goes to the element now matching, as a person's would.
func (b *Tab) Click(selector string) {
	b.t.Helper()
	var err error
	for range 5 {
		err = chromedp.Do(b.ctx, chromedp.Click(chromedp.CSS(selector)))
		if err == nil || !nodeGone(err) {
			break
		}
	}
	if err != nil {
		b.t.Fatalf("clicking %s: %v", selector, err)
	}
}

// nodeGone tells whether the DevTools protocol refused an action
// because the node it found has since left the document.
func nodeGone(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "Could not find node with given id") ||
		strings.Contains(msg, "No node with given id") || strings.Contains(msg, "Node is detached")
}

// Fill sets the value of an input, textarea or select and fires its
// input and change events, as typing or choosing would.
func (b *Tab) Fill(selector, value string) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, chromedp.WaitVisible(chromedp.CSS(selector))); err != nil {
		b.t.Fatalf("waiting for %s: %v", selector, err)
	}
	js := fmt.Sprintf(`(() => { const e = document.querySelector(%q); e.focus(); e.value = %q;
		e.dispatchEvent(new Event("input", {bubbles: true})); e.dispatchEvent(new Event("change", {bubbles: true})); return e.value; })()`, selector, value)
	got, err := Eval[string](b, js)
	if err != nil || got != value {
		html, _ := Eval[string](b, fmt.Sprintf(`document.querySelector(%q).outerHTML`, selector))
		b.t.Fatalf("filling %s with %q: got %q, %v\n%s", selector, value, got, err, html)
	}
}

// Upload chooses files in a file input, as picking them in its dialog
// would.
func (b *Tab) Upload(selector string, files ...string) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, chromedp.SetUploadFiles(chromedp.CSS(selector), files)); err != nil {
		b.t.Fatalf("choosing %v in %s: %v", files, selector, err)
	}
}

// Press types keys (chromedp/kb names the special ones: kb.Tab,
// kb.Enter) into whatever has the focus.
func (b *Tab) Press(keys string) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, chromedp.KeyEvent(keys)); err != nil {
		b.t.Fatalf("pressing %q: %v", keys, err)
	}
}

// Focused describes the element that has the focus: its tag and text.
func (b *Tab) Focused() string {
	b.t.Helper()
	got, err := Eval[string](b, `(() => { const e = document.activeElement; return e ? e.tagName + " " + (e.getAttribute("aria-label") || e.innerText || "").trim().split("\n")[0] : ""; })()`)
	if err != nil {
		b.t.Fatal(err)
	}
	return got
}

// ScreenshotsEnv names a directory the console tests write a PNG of each
// page to (docs/console to refresh the documentation's).
const ScreenshotsEnv = "CAPSTAN_SCREENSHOTS"

// Screenshot writes the whole page as NAME.png into $CAPSTAN_SCREENSHOTS,
// when it is set.
func (b *Tab) Screenshot(name string) {
	b.t.Helper()
	dir := os.Getenv(ScreenshotsEnv)
	if dir == "" {
		return
	}
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

//go:embed axe/axe.min.js
var axeSource string

// A11y runs axe-core's WCAG 2.x A and AA rules on the page as it is and
// fails the test with every violation.
func (b *Tab) A11y(page string) {
	b.t.Helper()
	if _, err := Eval[bool](b, `typeof axe !== "undefined" || (() => { `+axeSource+`; return true; })()`); err != nil {
		b.t.Fatalf("loading axe-core: %v", err)
	}
	type node struct {
		Target  []any  `json:"target"`
		Summary string `json:"failureSummary"`
	}
	type violation struct {
		ID    string `json:"id"`
		Help  string `json:"help"`
		Nodes []node `json:"nodes"`
	}
	type result struct {
		Violations []violation `json:"violations"`
		Passes     int         `json:"passes"`
	}
	res, err := chromedp.Run(b.ctx, chromedp.Evaluate[result](
		`axe.run(document, {runOnly: {type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]}}).then(r => ({violations: r.violations, passes: r.passes.length}))`,
		func(p *runtime.EvaluateParams) { await := true; p.AwaitPromise = &await }))
	if err != nil {
		b.t.Fatalf("running axe-core on %s: %v", page, err)
	}
	if res.Passes == 0 {
		b.t.Errorf("axe-core checked nothing on the %s page", page)
	}
	for _, v := range res.Violations {
		var where []string
		for _, n := range v.Nodes {
			where = append(where, fmt.Sprint(n.Target)+": "+strings.ReplaceAll(n.Summary, "\n", " "))
		}
		b.t.Errorf("accessibility, %s page: %s (%s)\n  %s", page, v.ID, v.Help, strings.Join(where, "\n  "))
	}
}
