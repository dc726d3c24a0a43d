package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/capstan-dev/capstan/internal/testenv"
	"github.com/capstan-dev/capstan/internal/waitfor"
)

// requestLog runs before the console's own script and keeps every fetch
// and WebSocket the page opens, with when it was opened and how the
// fetch ended ("pending", "done" or the error's name), in
// window.__requests; window.__sockets holds the WebSockets.
const requestLog = `(() => {
  window.__requests = [];
  window.__sockets = [];
  const realFetch = window.fetch;
  window.fetch = function (input, init) {
    const r = { url: String((input && input.url) || input), at: performance.now(), state: "pending" };
    window.__requests.push(r);
    const p = realFetch.apply(this, arguments);
    p.then(() => { r.state = "done"; }, (e) => { r.state = e.name; });
    return p;
  };
  const RealWebSocket = window.WebSocket;
  window.WebSocket = class extends RealWebSocket {
    constructor(url, protocols) {
      super(url, protocols);
      window.__sockets.push(this);
      window.__requests.push({ url: String(url), at: performance.now(), state: "socket" });
    }
  };
})()`

type loggedRequest struct {
	URL   string  `json:"url"`
	At    float64 `json:"at"`
	State string  `json:"state"`
}

// consoleTabWithRequestLog is a new browser tab, its requests logged
// (requestLog), logged in as the admin.
func consoleTabWithRequestLog(t *testing.T) *testenv.Tab {
	t.Helper()
	tab := testenv.NewTab(t)
	if _, err := testenv.Call(tab, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: requestLog}); err != nil {
		t.Fatal(err)
	}
	tab.Go(env.Cluster.NewConsoleLoginLink(env.Cluster.AdminToken()))
	tab.WaitText("#who", "Logged in as system:serviceaccount:kube-system:capstan-admin", 30*time.Second)
	return tab
}

// requestsTo is what the tab logged of the requests whose URL holds
// path, from ms since its page loaded.
func requestsTo(t *testing.T, tab *testenv.Tab, path string, from float64) []loggedRequest {
	t.Helper()
	raw, err := testenv.Eval[string](tab, fmt.Sprintf(`JSON.stringify(window.__requests.filter((r) => r.url.includes(%q) && r.at >= %f))`, path, from))
	if err != nil {
		t.Fatal(err)
	}
	var got []loggedRequest
	if err := json.Unmarshal([]byte(raw), &got); err != nil {
		t.Fatalf("the request log: %v: %s", err, raw)
	}
	return got
}

// The console's watches and pages under faults: a watch the network cuts
// backs off and says the page shows what it read last, leaving a page
// cancels what it still asks, and a pool's nodes are those its selector
// selects, as the API server would select them.
func TestConsoleWatchesAndPages(t *testing.T) {
	if env.Cluster.ConsoleURL == "" {
		t.Fatal("the test cluster serves no console")
	}
	ctx := context.Background()
	base := env.Cluster.ConsoleURL
	tab := consoleTabWithRequestLog(t)
	const nodesPath = "/api/kubernetes/api/v1/nodes"

	t.Run("a watch the network cuts backs off, shows what it read last, and resumes", func(t *testing.T) {
		tab := tab.For(t)
		tab.Go(base + "/#/nodes")
		node := nodeNames(t)[0]
		tab.WaitText(`tr[data-key="`+node+`"]`, "Ready", 30*time.Second)

		// The network goes down for the nodes collection (its lists
		// and its watch's WebSocket alike), and the open watch's socket
		// is closed, as a dropped connection closes it.
		offline := func(down bool) {
			t.Helper()
			rules := []*network.Conditions{}
			if down {
				rules = append(rules, &network.Conditions{URLPattern: "*://*:*" + nodesPath + "*", Offline: true, DownloadThroughput: -1, UploadThroughput: -1})
			}
			if _, err := testenv.Call(tab, emulateByRule, byRuleParams{Offline: down, MatchedNetworkConditions: rules}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := testenv.Call(tab, network.Enable, network.EnableParams{}); err != nil {
			t.Fatal(err)
		}
		offline(true)
		back := false
		t.Cleanup(func() {
			if !back {
				offline(false)
			}
		})
		cut, err := testenv.Eval[float64](tab, `window.__sockets.filter((s) => s.url.includes("/api/v1/nodes")).forEach((s) => s.close()), performance.now()`)
		if err != nil {
			t.Fatal(err)
		}

		// The page says it is reconnecting, and keeps showing the nodes
		// as it read them last.
		got := tab.WaitText("main", "Reconnecting to the API (nodes: ", 30*time.Second)
		if !strings.Contains(got, "what is shown was read at ") {
			t.Errorf("the reconnecting notice does not say when what is shown was read:\n%s", got)
		}
		if row := tab.Text(`tr[data-key="` + node + `"]`); !strings.Contains(row, "Ready") {
			t.Errorf("while reconnecting, node %s's row is gone or changed: %q", node, row)
		}

		// Its attempts back off: the waits double from 1 s, each at least
		// half of its step (jitter), so the i-th wait is at least
		// 0.5 s × 2^i, where a busy loop would try hundreds of times and
		// a fixed delay would not grow. Only lower bounds: a loaded
		// machine makes waits longer, never shorter.
		var attempts []loggedRequest
		err = waitfor.Poll(ctx, 250*time.Millisecond, time.Minute, waitfor.Simple(func(context.Context) (bool, string) {
			attempts = requestsTo(t, tab, nodesPath, cut)
			return len(attempts) >= 4, fmt.Sprintf("%d attempts", len(attempts))
		}))
		if err != nil {
			t.Fatalf("the cut watch was not tried again 4 times: %v", err)
		}
		for i := 1; i < len(attempts); i++ {
			// A timer may fire a few ms early against performance.now().
			least := 500*float64(int(1)<<(i-1)) - 15
			if gap := attempts[i].At - attempts[i-1].At; gap < least {
				t.Errorf("wait %d between attempts was %.0f ms, less than the %.0f ms of a back-off from 1 s: %+v", i, gap, least, attempts)
			}
		}

		// A change made while the network was cut shows once it is back,
		// and the notice goes.
		patch := func(unschedulable bool) {
			t.Helper()
			body := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, unschedulable)
			if _, err := env.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		patch(true)
		t.Cleanup(func() { patch(false) })
		offline(false)
		back = true
		tab.WaitText(`tr[data-key="`+node+`"]`, "SchedulingDisabled", time.Minute)
		err = waitfor.Poll(ctx, 250*time.Millisecond, 30*time.Second, waitfor.Simple(func(context.Context) (bool, string) {
			text := tab.Text("main")
			return !strings.Contains(text, "Reconnecting to the API"), text
		}))
		if err != nil {
			t.Errorf("the reconnecting notice stayed once the network was back: %v", err)
		}
	})

	t.Run("leaving a page cancels what it still asks", func(t *testing.T) {
		tab := tab.For(t)
		tab.Go(base + "/#/machines")
		tab.WaitText("main", "Scale a MachineSet", 30*time.Second)
		// The nodes page's first list is held in the network, as a
		// slow API server would hold it.
		if _, err := testenv.Call(tab, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*" + nodesPath + "*limit=*"}}}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = testenv.Call(tab, fetch.Disable, cdp.Empty{}) })
		from, err := testenv.Eval[float64](tab, `performance.now()`)
		if err != nil {
			t.Fatal(err)
		}
		tab.Go(base + "/#/nodes")
		tab.WaitText("main", "Loading", 30*time.Second)
		var held []loggedRequest
		err = waitfor.Poll(ctx, 100*time.Millisecond, 30*time.Second, waitfor.Simple(func(context.Context) (bool, string) {
			held = requestsTo(t, tab, nodesPath+"?limit=", from)
			return len(held) == 1 && held[0].State == "pending", fmt.Sprintf("%+v", held)
		}))
		if err != nil {
			t.Fatalf("the nodes page's list never went out: %v", err)
		}
		left, err := testenv.Eval[float64](tab, `performance.now()`)
		if err != nil {
			t.Fatal(err)
		}
		tab.Go(base + "/#/machines")
		tab.WaitText("main", "Scale a MachineSet", 30*time.Second)
		err = waitfor.Poll(ctx, 100*time.Millisecond, 30*time.Second, waitfor.Simple(func(context.Context) (bool, string) {
			held = requestsTo(t, tab, nodesPath+"?limit=", from)
			return held[0].State == "AbortError", held[0].State
		}))
		if err != nil {
			t.Errorf("the nodes page's list, left behind, was not cancelled: %v", err)
		}
		if after := requestsTo(t, tab, nodesPath, left+1); len(after) > 0 {
			t.Errorf("the nodes page, left, still asked: %+v", after)
		}
	})

	t.Run("a pool's nodes are those its selector selects", func(t *testing.T) {
		tab := tab.For(t)
		pools := env.Dynamic.Resource(schema.GroupVersionResource{Group: "machineconfiguration.openshift.io", Version: "v1", Resource: "machineconfigpools"})
		names := nodeNames(t)
		if len(names) < 3 {
			t.Fatalf("the test needs 3 nodes, the cluster has %v", names)
		}
		const (
			group = "console.capstan.dev/pool-test"
			tier  = "console.capstan.dev/tier"
			ssd   = "console.capstan.dev/ssd"
		)
		// Three nodes in the test's group: gold with an SSD, silver
		// without, and one of no tier with an SSD.
		nodeLabels := []map[string]any{
			{group: "yes", tier: "gold", ssd: ""},
			{group: "yes", tier: "silver"},
			{group: "yes", ssd: ""},
		}
		for i, l := range nodeLabels {
			setNodeLabels(t, names[i], l)
		}
		type expr = map[string]any
		selectors := map[string]any{
			"console-in":             map[string]any{"matchLabels": map[string]any{group: "yes"}, "matchExpressions": []any{expr{"key": tier, "operator": "In", "values": []any{"gold", "silver"}}}},
			"console-notin":          map[string]any{"matchLabels": map[string]any{group: "yes"}, "matchExpressions": []any{expr{"key": tier, "operator": "NotIn", "values": []any{"gold"}}}},
			"console-exists":         map[string]any{"matchLabels": map[string]any{group: "yes"}, "matchExpressions": []any{expr{"key": ssd, "operator": "Exists"}}},
			"console-doesnotexist":   map[string]any{"matchLabels": map[string]any{group: "yes"}, "matchExpressions": []any{expr{"key": ssd, "operator": "DoesNotExist"}}},
			"console-all-of-them":    map[string]any{"matchExpressions": []any{expr{"key": tier, "operator": "In", "values": []any{"gold", "silver"}}, expr{"key": ssd, "operator": "Exists"}}},
			"console-no-selector":    nil,
			"console-empty-selector": map[string]any{},
		}
		for name, sel := range selectors {
			spec := map[string]any{"machineConfigSelector": map[string]any{"matchLabels": map[string]any{"machineconfiguration.openshift.io/role": name}}}
			if sel != nil {
				spec["nodeSelector"] = sel
			}
			pool := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
				"metadata": map[string]any{"name": name}, "spec": spec}}
			if _, err := pools.Create(ctx, pool, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = pools.Delete(ctx, name, metav1.DeleteOptions{}) })
		}

		// What the API server selects, by the same selectors.
		all, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tab.Go(base + "/#/pools")
		for name, sel := range selectors {
			var want []string
			if sel != nil {
				var ls metav1.LabelSelector
				raw, _ := json.Marshal(sel)
				if err := json.Unmarshal(raw, &ls); err != nil {
					t.Fatal(err)
				}
				s, err := metav1.LabelSelectorAsSelector(&ls)
				if err != nil {
					t.Fatal(err)
				}
				for _, n := range all.Items {
					if s.Matches(labels.Set(n.Labels)) {
						want = append(want, n.Name)
					}
				}
			}
			slices.Sort(want)
			section := `section[aria-labelledby="pool-` + name + `"]`
			if len(want) == 0 {
				tab.WaitText(section, "Its selector selects no node.", 30*time.Second)
				continue
			}
			tab.WaitText(section, want[0], 30*time.Second)
			got, err := testenv.Eval[[]string](tab, `[...document.querySelectorAll('`+section+` tbody tr[aria-rowindex]')].map((r) => r.dataset.key)`)
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("pool %s (selector %v) shows nodes %v; the API server's selector selects %v", name, sel, got, want)
			}
		}
		tab.A11y("machine config pools")
	})
}

// setNodeLabels sets labels on a node until the test ends.
func setNodeLabels(t *testing.T, node string, set map[string]any) {
	t.Helper()
	ctx := context.Background()
	apply := func(l map[string]any) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": l}})
		if _, err := env.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	apply(set)
	t.Cleanup(func() {
		unset := map[string]any{}
		for k := range set {
			unset[k] = nil
		}
		apply(unset)
	})
}

// byRuleParams are Network.emulateNetworkConditionsByRule's parameters
// for Chromium before and after offline moved into each rule (149): the
// top-level offline, which Chromium 148 requires and applies to the
// requests the rules match, and each rule's.
type byRuleParams struct {
	Offline                  bool                  `json:"offline"`
	MatchedNetworkConditions []*network.Conditions `json:"matchedNetworkConditions"`
}

var emulateByRule = cdp.Command[byRuleParams, network.EmulateNetworkConditionsByRuleResult]{Method: network.CommandEmulateNetworkConditionsByRule}
