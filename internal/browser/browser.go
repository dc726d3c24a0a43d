// Package browser starts the headless Chromium that the console's tests
// and its benchmark drive over the DevTools protocol. It is Debian's
// Chromium (.ci/run installs it); nothing here downloads a browser.
package browser

import (
	"context"
	"os"
	"os/exec"

	"github.com/chromedp/chromedp"
)

// PathEnv names the browser to drive; by default Debian's
// /usr/bin/chromium.
const PathEnv = "CAPSTAN_CHROMIUM"

// Path is the browser to drive.
func Path() string {
	if p := os.Getenv(PathEnv); p != "" {
		return p
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	return "/usr/bin/chromium"
}

// New starts Chromium at path with its profile in dir and returns a
// context of its first tab; cancel closes it. Without the
// background-networking flags Chromium keeps dialing Google's hosts,
// which a closed network refuses.
func New(parent context.Context, path, dir string, logf func(string, ...any)) (context.Context, context.CancelFunc) {
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.UserDataDir(dir),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(parent, opts...)
	ctx, cancelCtx := chromedp.NewContext(actx, chromedp.WithErrorf(logf))
	return ctx, func() { cancelCtx(); cancelAlloc() }
}
