package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/heapprofiler"
	"github.com/chromedp/cdproto/performance"
	"github.com/chromedp/chromedp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/capstan-dev/capstan/internal/browser"
)

// ConsoleOptions configure `capstan bench console`.
type ConsoleOptions struct {
	Nodes       int
	Parallelism int
	// Churn is how many node updates a second the cluster sees while the
	// Nodes page's main thread is measured: 5,000 kubelets that post
	// their status every five minutes make 17.
	Churn float64
	// Edits is how many single edits are timed, from the PATCH to the
	// row that shows it.
	Edits int
	// Images is how many images each node's status lists, as a kubelet
	// reports them (at most 50 by default): most of a real Node's size.
	Images      int
	Chromium    string
	EtcdNoFsync bool
	Timeout     time.Duration
}

// ConsoleResult is what the console's pages cost in Chromium over a
// cluster of Nodes nodes.
type ConsoleResult struct {
	Nodes int
	// NodeJSON is the mean size of one Node object as the API serves it.
	NodeJSON int
	// NodesFirstRows is from opening the Nodes page to its first rows;
	// NodesAll to the table counting every node.
	NodesFirstRows, NodesAll time.Duration
	// EditShown are the single edits, from the PATCH sent to the edited
	// row showing it.
	EditShown []time.Duration
	// Drawn is how many rows of nodes the page drew of Nodes;
	// ScrolledToEnd from the scroll to the last node's row drawn;
	// Filtered from typing a node's name in the filter to the table
	// counting the nodes that match.
	Drawn                   int
	ScrolledToEnd, Filtered time.Duration
	// Busy is the share of the page's main thread spent working while
	// the cluster makes Churn node updates a second.
	Busy float64
	// NodesHeap and NodesDOM are the page's JavaScript heap (after a
	// garbage collection) and its DOM nodes, on the Nodes page.
	NodesHeap, NodesDOM int64
	// OverviewShown is from opening the Overview to its node count
	// showing every node; OverviewRead to its readiness line counting
	// every node's; OverviewHeap its heap then.
	OverviewShown, OverviewRead time.Duration
	OverviewHeap                int64
}

// pageProbe is installed in the console's page: rows() is how many nodes
// the page's table counts (its aria-rowcount, for a windowed table, or
// its rows), and until() resolves when cond() holds, with the epoch
// milliseconds it held at, checking at every animation frame. A probe is
// armed (kept in pending) before what it waits for is done, and awaited
// after.
const pageProbe = `window.capstanBench = {
  pending: {},
  rows() {
    const t = document.querySelector("main table");
    if (!t) return -1;
    const rc = t.getAttribute("aria-rowcount");
    return rc ? Number(rc) - 1 : t.tBodies[0].rows.length;
  },
  until(cond, ms) {
    return new Promise((resolve, reject) => {
      const start = performance.now();
      const tick = () => {
        let ok = false;
        try { ok = cond(); } catch { ok = false; }
        if (ok) resolve(performance.timeOrigin + performance.now());
        else if (performance.now() - start > ms) reject(new Error("timed out after " + ms + " ms: " + cond));
        else requestAnimationFrame(tick);
      };
      tick();
    });
  },
}; true`

// Console starts a cluster of o.Nodes simulated nodes and its console,
// and measures the console's pages over it in a headless Chromium.
func Console(ctx context.Context, o ConsoleOptions, log io.Writer) (*ConsoleResult, error) {
	if o.Nodes <= 0 || o.Parallelism <= 0 || o.Edits <= 0 || o.Churn <= 0 {
		return nil, fmt.Errorf("--nodes, --parallelism, --edits and --churn must be positive")
	}
	if o.Chromium == "" {
		o.Chromium = browser.Path()
	}
	if _, err := os.Stat(o.Chromium); err != nil {
		return nil, fmt.Errorf("no Chromium at %s (apt-get install chromium, or set %s): %w", o.Chromium, browser.PathEnv, err)
	}
	dir, err := os.MkdirTemp("", "capstan-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	opts := clusterOptions(dir, o.EtcdNoFsync)
	opts.WithoutMachineAPI()
	opts.Releases, opts.ResourceMetrics, opts.MachineConfig = nil, nil, nil
	opts.ConsoleAddress = "127.0.0.1:0"
	cl, err := startCluster(ctx, opts, dir, log)
	if err != nil {
		return nil, err
	}
	defer cl.Stop()
	if cl.ConsoleLoginLink == "" {
		return nil, fmt.Errorf("the console did not start: %s", strings.Join(cl.Warnings, "; "))
	}
	if _, err := launchNodes(ctx, cl, o.Nodes, o.Parallelism, o.Timeout, log); err != nil {
		return nil, err
	}
	if o.Images > 0 {
		fmt.Fprintf(log, "Listing %d images in each node's status ...\n", o.Images)
		images := nodeImages(o.Images)
		err := parallel(ctx, o.Nodes, o.Parallelism, func(i int) error {
			_, err := cl.Client.CoreV1().Nodes().Patch(ctx, fmt.Sprintf("bench-%04d", i), types.MergePatchType, images, metav1.PatchOptions{}, "status")
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	res := &ConsoleResult{Nodes: o.Nodes}
	raw, err := cl.Client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	res.NodeJSON = len(raw) / o.Nodes

	bctx, closeBrowser := browser.New(ctx, o.Chromium, dir+"/chromium", func(string, ...any) {})
	defer closeBrowser()
	b := &tab{ctx: bctx, timeout: o.Timeout}
	if err := chromedp.Do(bctx, chromedp.Navigate(cl.ConsoleLoginLink)); err != nil {
		return nil, fmt.Errorf("opening the console: %w", err)
	}
	if _, err := chromedp.Call(bctx, performance.Enable, performance.EnableParams{}); err != nil {
		return nil, err
	}
	if err := b.eval(pageProbe, nil); err != nil {
		return nil, err
	}
	if _, err := b.until(`document.getElementById("who").textContent.startsWith("Logged in as")`, nil); err != nil {
		return nil, fmt.Errorf("logging in: %w", err)
	}

	// Each page is opened from another one, as a person would.
	fmt.Fprintf(log, "Opening the Overview ...\n")
	if err := b.away(); err != nil {
		return nil, err
	}
	if err := b.arm("read", `/^(All ready|\d+ not ready)$/.test((document.querySelector("#ov-nodes ~ p:not(.big)") || {}).textContent)`); err != nil {
		return nil, err
	}
	start := time.Now()
	if res.OverviewShown, err = b.until(fmt.Sprintf(`(document.querySelector("#ov-nodes + p.big") || {}).textContent === "%d"`, o.Nodes), b.hash("overview")); err != nil {
		return nil, fmt.Errorf("the Overview: %w", err)
	}
	if res.OverviewRead, err = b.await("read", start); err != nil {
		return nil, fmt.Errorf("the Overview's readiness: %w", err)
	}
	if res.OverviewHeap, _, err = b.memory(); err != nil {
		return nil, err
	}

	fmt.Fprintf(log, "Opening the Nodes page ...\n")
	if err := b.away(); err != nil {
		return nil, err
	}
	if err := b.arm("first", `capstanBench.rows() > 0`); err != nil {
		return nil, err
	}
	if err := b.arm("all", fmt.Sprintf(`capstanBench.rows() === %d`, o.Nodes)); err != nil {
		return nil, err
	}
	start = time.Now()
	if err := b.hash("nodes")(); err != nil {
		return nil, err
	}
	if res.NodesFirstRows, err = b.await("first", start); err != nil {
		return nil, fmt.Errorf("the Nodes page's first rows: %w", err)
	}
	if res.NodesAll, err = b.await("all", start); err != nil {
		return nil, fmt.Errorf("the Nodes page listing %d nodes: %w", o.Nodes, err)
	}
	if res.NodesHeap, res.NodesDOM, err = b.memory(); err != nil {
		return nil, err
	}

	if err := b.eval(`document.querySelectorAll("main tr[data-key^='bench-']").length`, &res.Drawn); err != nil {
		return nil, err
	}
	// Rows out of view are not drawn: a page over more nodes than a
	// screen and its margins hold (about 40 rows) that drew them all is
	// not windowed.
	if o.Nodes > 50 && res.Drawn >= o.Nodes {
		return nil, fmt.Errorf("the Nodes page drew all %d rows of %d nodes: its table is not windowed", res.Drawn, o.Nodes)
	}
	last := fmt.Sprintf("bench-%04d", o.Nodes-1)
	if res.ScrolledToEnd, err = b.until(fmt.Sprintf(`!!document.querySelector('main tr[data-key=%q]')`, last), func() error {
		return b.eval(`(() => { const box = document.querySelector("main .window") || document.scrollingElement; box.scrollTop = box.scrollHeight; return true })()`, nil)
	}); err != nil {
		return nil, fmt.Errorf("scrolling to %s: %w", last, err)
	}
	// The filter: the name of the node in the middle, which matches it
	// alone.
	middle := fmt.Sprintf("bench-%04d", o.Nodes/2)
	if res.Filtered, err = b.until(`capstanBench.rows() === 1`, func() error {
		return b.eval(fmt.Sprintf(`(() => { const f = document.getElementById("node-filter"); f.value = %q; f.dispatchEvent(new Event("input")); return true })()`, middle), nil)
	}); err != nil {
		return nil, fmt.Errorf("filtering for %s: %w", middle, err)
	}
	if _, err := b.until(fmt.Sprintf(`capstanBench.rows() === %d`, o.Nodes), func() error {
		return b.eval(`(() => { const f = document.getElementById("node-filter"); f.value = ""; f.dispatchEvent(new Event("input")); return true })()`, nil)
	}); err != nil {
		return nil, fmt.Errorf("clearing the filter: %w", err)
	}

	// Edits to the first node in name order, the one a Nodes page shows
	// first: each gives it a role of its own, which its row shows.
	nodes := cl.Client.CoreV1().Nodes()
	for i := range o.Edits {
		role := fmt.Sprintf("bench-edit-%d", i)
		d, err := b.until(fmt.Sprintf(`(document.querySelector('main tr[data-key="bench-0000"]') || {}).textContent.includes(%q)`, role), func() error {
			patch := fmt.Sprintf(`{"metadata":{"labels":{"node-role.kubernetes.io/%s":""}}}`, role)
			_, err := nodes.Patch(ctx, "bench-0000", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("edit %d: %w", i, err)
		}
		res.EditShown = append(res.EditShown, d)
	}
	slices.Sort(res.EditShown)

	// The main thread under churn: random nodes get an annotation of the
	// time, at o.Churn a second, for ten seconds.
	fmt.Fprintf(log, "Measuring the Nodes page under %.0f node updates a second ...\n", o.Churn)
	before, err := b.metrics()
	if err != nil {
		return nil, err
	}
	churnStart := time.Now()
	tick := time.NewTicker(time.Duration(float64(time.Second) / o.Churn))
	for time.Since(churnStart) < 10*time.Second {
		select {
		case <-ctx.Done():
			tick.Stop()
			return nil, ctx.Err()
		case <-tick.C:
		}
		name := fmt.Sprintf("bench-%04d", rand.IntN(o.Nodes))
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"bench.capstan.dev/beat":%q}}}`, time.Now().Format(time.RFC3339Nano))
		if _, err := nodes.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			tick.Stop()
			return nil, err
		}
	}
	tick.Stop()
	after, err := b.metrics()
	if err != nil {
		return nil, err
	}
	res.Busy = (after["TaskDuration"] - before["TaskDuration"]) / time.Since(churnStart).Seconds()
	return res, nil
}

// nodeImages is a status patch that lists n images of a release, each
// by digest and by tag, as a kubelet lists what it pulled.
func nodeImages(n int) []byte {
	type image struct {
		Names     []string `json:"names"`
		SizeBytes int64    `json:"sizeBytes"`
	}
	list := make([]image, n)
	for i := range list {
		digest := fmt.Sprintf("%064x", uint64(i)*0x9e3779b97f4a7c15)
		list[i] = image{Names: []string{
			"quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:" + digest,
			fmt.Sprintf("quay.io/openshift-release-dev/ocp-v4.0-art-dev:component-%02d", i),
		}, SizeBytes: int64(200+i*7) << 20}
	}
	raw, _ := json.Marshal(map[string]any{"status": map[string]any{"images": list}})
	return raw
}

// tab drives the benchmark's browser tab.
type tab struct {
	ctx     context.Context
	timeout time.Duration
}

func (b *tab) eval(expr string, out any) error {
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[json.RawMessage](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		return err
	}
	if out != nil {
		return json.Unmarshal(v, out)
	}
	return nil
}

// arm starts waiting in the page, as name, until cond holds.
func (b *tab) arm(name, cond string) error {
	return b.eval(fmt.Sprintf(`capstanBench.pending[%q] = capstanBench.until(() => %s, %d); true`, name, cond, b.timeout.Milliseconds()), nil)
}

// await is how long after start the probe armed as name saw its
// condition hold.
func (b *tab) await(name string, start time.Time) (time.Duration, error) {
	var ms float64
	if err := b.eval(fmt.Sprintf(`capstanBench.pending[%q]`, name), &ms); err != nil {
		return 0, err
	}
	return max(time.UnixMicro(int64(ms*1000)).Sub(start), 0), nil
}

// until does what (if anything) and times it until cond holds in the
// page.
func (b *tab) until(cond string, what func() error) (time.Duration, error) {
	if err := b.arm("until", cond); err != nil {
		return 0, err
	}
	start := time.Now()
	if what != nil {
		if err := what(); err != nil {
			return 0, err
		}
	}
	return b.await("until", start)
}

// away opens the Machines page and waits until it is drawn: a page is
// opened (and timed) from another one, and a probe armed before the
// hash change took effect would see the page before.
func (b *tab) away() error {
	_, err := b.until(`document.title.startsWith("Machines") && !!document.querySelector("main h1")`, b.hash("machines"))
	return err
}

// hash opens a page of the console.
func (b *tab) hash(page string) func() error {
	return func() error { return b.eval(fmt.Sprintf(`location.hash = "#/%s"; true`, page), nil) }
}

func (b *tab) metrics() (map[string]float64, error) {
	res, err := chromedp.Call(b.ctx, performance.GetMetrics, cdp.Empty{})
	if err != nil {
		return nil, err
	}
	m := map[string]float64{}
	for _, x := range res.Metrics {
		m[x.Name] = x.Value
	}
	return m, nil
}

// memory is the page's JavaScript heap after a garbage collection, and
// its DOM nodes.
func (b *tab) memory() (heap, dom int64, err error) {
	if _, err := chromedp.Call(b.ctx, heapprofiler.CollectGarbage, cdp.Empty{}); err != nil {
		return 0, 0, err
	}
	m, err := b.metrics()
	if err != nil {
		return 0, 0, err
	}
	return int64(m["JSHeapUsedSize"]), int64(m["Nodes"]), nil
}
