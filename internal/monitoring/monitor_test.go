package monitoring

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/model"

	"github.com/capstan-dev/capstan/internal/waitfor"
)

// apiAnswer is a decoded answer of the HTTP API.
type apiAnswer struct {
	Status    string          `json:"status"`
	Data      json.RawMessage `json:"data"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
}

func get(t *testing.T, base, path string, params url.Values) (int, apiAnswer) {
	t.Helper()
	resp, err := http.Get(base + path + "?" + params.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a apiAnswer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return resp.StatusCode, a
}

// testMonitor runs a monitor scraping every second over a registry with
// one gauge, as the job cluster-version-operator, whose health the test
// switches.
func testMonitor(t *testing.T, extra Options) (*Monitor, string, *prometheus.GaugeVec, *atomic.Bool) {
	t.Helper()
	reg := prometheus.NewRegistry()
	up := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cluster_operator_up", Help: "1 if a cluster operator is Available=True."}, []string{"name", "reason", "version"})
	reg.MustRegister(up)
	down := &atomic.Bool{}
	opts := extra
	opts.Dir = t.TempDir()
	opts.ScrapeInterval, opts.EvaluationInterval = time.Second, time.Second
	m, err := New(opts, []Target{{
		Job: "cluster-version-operator", Gatherer: reg,
		Labels: map[string]string{"namespace": "openshift-cluster-version", "endpoint": "metrics"},
		Healthy: func() error {
			if down.Load() {
				return errors.New("stopped")
			}
			return nil
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := m.Run(ctx); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(func() {
		srv.Close()
		cancel()
		if err := m.Stop(); err != nil {
			t.Error(err)
		}
	})
	return m, srv.URL, up, down
}

// waitQuery waits until an instant query answers a vector of want
// samples.
func waitQuery(t *testing.T, base, q string, want int) []map[string]any {
	t.Helper()
	var got []map[string]any
	err := waitfor.Poll(context.Background(), 100*time.Millisecond, time.Minute, waitfor.Simple(func(context.Context) (bool, string) {
		code, a := get(t, base, "/api/v1/query", url.Values{"query": {q}})
		if code != 200 {
			return false, fmt.Sprintf("%d %s", code, a.Error)
		}
		var d struct {
			Result []map[string]any `json:"result"`
		}
		if err := json.Unmarshal(a.Data, &d); err != nil {
			return false, err.Error()
		}
		got = d.Result
		return len(got) == want, fmt.Sprintf("%d samples, want %d: %v", len(got), want, got)
	}))
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return got
}

func TestScrapedSeriesAreQueriedWithThePrometheusEngine(t *testing.T) {
	_, base, up, _ := testMonitor(t, Options{})
	up.WithLabelValues("etcd", "AsExpected", "4.16.0").Set(1)
	up.WithLabelValues("machine-api", "NoMachines", "4.16.0").Set(0)

	// The target's labels and the job are on every series; up is 1.
	got := waitQuery(t, base, `up{job="cluster-version-operator",namespace="openshift-cluster-version",endpoint="metrics"} == 1`, 1)
	if got[0]["metric"].(map[string]any)["instance"] == "" {
		t.Errorf("no instance label: %v", got)
	}
	// What upstream's update risks and alerts are written with:
	// aggregations by label, label_replace, topk, absent, or, ranges.
	waitQuery(t, base, `cluster_operator_up == 0`, 1)
	for q, want := range map[string]int{
		`group by (name) (cluster_operator_up)`:                                                      2,
		`topk(1, cluster_operator_up)`:                                                               1,
		`label_replace(cluster_operator_up{name="etcd"}, "component", "$1", "name", "(.*)")`:         1,
		`absent(cluster_operator_up{name="console"})`:                                                1,
		`cluster_operator_up{name="console"} or on () vector(0)`:                                     1,
		`max_over_time(cluster_operator_up[1h])`:                                                     2,
		`count by (reason) (cluster_operator_up{reason=~"As.*|No.*"})`:                               2,
		`0 * group(cluster_operator_up{name="etcd"}) or 0 * group(cluster_operator_up{name="none"})`: 1,
	} {
		waitQuery(t, base, q, want)
	}

	// A range query over the same series.
	now := time.Now()
	code, a := get(t, base, "/api/v1/query_range", url.Values{"query": {"cluster_operator_up"},
		"start": {fmt.Sprint(now.Add(-time.Minute).Unix())}, "end": {fmt.Sprint(now.Unix())}, "step": {"15s"}})
	if code != 200 || !strings.Contains(string(a.Data), `"resultType":"matrix"`) {
		t.Errorf("query_range: %d %s %s", code, a.Error, a.Data)
	}
	// Nothing matched: an empty list, as Prometheus answers, not null.
	for _, path := range []string{"/api/v1/query", "/api/v1/query_range"} {
		code, a = get(t, base, path, url.Values{"query": {"no_such_metric"},
			"start": {fmt.Sprint(now.Add(-time.Minute).Unix())}, "end": {fmt.Sprint(now.Unix())}, "step": {"15s"}})
		if code != 200 || !strings.Contains(string(a.Data), `"result":[]`) {
			t.Errorf("%s of nothing: %d %s %s", path, code, a.Error, a.Data)
		}
	}
	// series, labels, label values.
	code, a = get(t, base, "/api/v1/series", url.Values{"match[]": {`cluster_operator_up{name="etcd"}`}})
	if code != 200 || !strings.Contains(string(a.Data), `"reason":"AsExpected"`) {
		t.Errorf("series: %d %s %s", code, a.Error, a.Data)
	}
	code, a = get(t, base, "/api/v1/labels", nil)
	if code != 200 || !strings.Contains(string(a.Data), `"reason"`) || !strings.Contains(string(a.Data), `"job"`) {
		t.Errorf("labels: %d %s %s", code, a.Error, a.Data)
	}
	code, a = get(t, base, "/api/v1/label/name/values", url.Values{"match[]": {"cluster_operator_up"}})
	if code != 200 || string(a.Data) != `["etcd","machine-api"]` {
		t.Errorf("label values: %d %s %s", code, a.Error, a.Data)
	}
	code, a = get(t, base, "/api/v1/targets", nil)
	if code != 200 || !strings.Contains(string(a.Data), `"health":"up"`) {
		t.Errorf("targets: %d %s %s", code, a.Error, a.Data)
	}
}

func TestBadRequestsAreRefusedAsPrometheusRefusesThem(t *testing.T) {
	_, base, _, _ := testMonitor(t, Options{})
	for _, tc := range []struct {
		path   string
		params url.Values
		status int
		typ    string
		msg    string
	}{
		{"/api/v1/query", nil, 400, "bad_data", "no expression found in input"},
		{"/api/v1/query", url.Values{"query": {"sum(("}}, 400, "bad_data", "invalid parameter \"query\""},
		{"/api/v1/query", url.Values{"query": {"up"}, "time": {"yesterday"}}, 400, "bad_data", "invalid parameter \"time\""},
		{"/api/v1/query", url.Values{"query": {"up"}, "timeout": {"soon"}}, 400, "bad_data", "invalid parameter \"timeout\""},
		{"/api/v1/query", url.Values{"query": {`label_replace(up, "x", "$1", "job", "(")`}}, 422, "execution", "invalid regular expression"},
		{"/api/v1/query_range", url.Values{"query": {"up"}, "start": {"10"}, "end": {"20"}}, 400, "bad_data", `invalid parameter "step"`},
		{"/api/v1/query_range", url.Values{"query": {"up"}, "start": {"20"}, "end": {"10"}, "step": {"1"}}, 400, "bad_data", "end timestamp must not be before start"},
		{"/api/v1/query_range", url.Values{"query": {"up"}, "start": {"0"}, "end": {"1000000"}, "step": {"1"}}, 400, "bad_data", "exceeded maximum resolution"},
		{"/api/v1/query_range", url.Values{"query": {"up"}, "start": {"0"}, "end": {"10"}, "step": {"-1"}}, 400, "bad_data", "zero or negative"},
		{"/api/v1/series", nil, 400, "bad_data", "no match[] parameter provided"},
		{"/api/v1/series", url.Values{"match[]": {"{"}}, 400, "bad_data", "invalid parameter \"match[]\""},
		{"/api/v1/rules", url.Values{"type": {"recording"}}, 400, "bad_data", "not supported value"},
	} {
		code, a := get(t, base, tc.path, tc.params)
		if code != tc.status || a.Status != "error" || a.ErrorType != tc.typ || !strings.Contains(a.Error, tc.msg) {
			t.Errorf("%s %v: got %d %s %q, want %d %s %q", tc.path, tc.params, code, a.ErrorType, a.Error, tc.status, tc.typ, tc.msg)
		}
	}
	resp, err := http.Post(base+"/api/v1/alerts", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /api/v1/alerts: %d", resp.StatusCode)
	}
}

// apiAlert is an alert's state and value in /api/v1/alerts.
type apiAlert struct{ State, Value string }

// alertsNamed returns the alerts of that name in /api/v1/alerts.
func alertsNamed(t *testing.T, base, name string) []apiAlert {
	t.Helper()
	code, a := get(t, base, "/api/v1/alerts", nil)
	if code != 200 {
		t.Fatalf("alerts: %d %s", code, a.Error)
	}
	var d struct {
		Alerts []struct {
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
			State       string            `json:"state"`
			Value       string            `json:"value"`
		} `json:"alerts"`
	}
	if err := json.Unmarshal(a.Data, &d); err != nil {
		t.Fatal(err)
	}
	var out []apiAlert
	for _, al := range d.Alerts {
		if al.Labels["alertname"] == name {
			out = append(out, apiAlert{State: al.State, Value: al.Value})
		}
	}
	return out
}

func TestOpenShiftsAlertsFireAndResolve(t *testing.T) {
	// The CVO's own alert: its target down for `for` (shortened to 2s).
	_, base, up, down := testMonitor(t, Options{MaxAlertFor: 2 * time.Second})
	up.WithLabelValues("etcd", "AsExpected", "4.16.0").Set(1)
	waitQuery(t, base, `up{job="cluster-version-operator"} == 1`, 1)
	// Before the first scrape up was absent: pending, then gone.
	waitAlert(t, base, "ClusterVersionOperatorDown", "")
	down.Store(true)
	waitAlert(t, base, "ClusterVersionOperatorDown", "firing")
	down.Store(false)
	waitAlert(t, base, "ClusterVersionOperatorDown", "")

	// ClusterOperatorDown on the operator's series.
	up.WithLabelValues("etcd", "AsExpected", "4.16.0").Set(0)
	waitAlert(t, base, "ClusterOperatorDown", "firing")
	up.WithLabelValues("etcd", "AsExpected", "4.16.0").Set(1)
	waitAlert(t, base, "ClusterOperatorDown", "")

	// /api/v1/rules lists the embedded groups with their files.
	code, a := get(t, base, "/api/v1/rules", url.Values{"type": {"alert"}})
	if code != 200 || !strings.Contains(string(a.Data), `"file":"capstan:rules/cluster-version-operator.yaml"`) || !strings.Contains(string(a.Data), `"name":"etcdNoLeader"`) {
		t.Errorf("rules: %d %s", code, a.Data)
	}
}

// waitAlert waits until the alert is in state ("" for none).
func waitAlert(t *testing.T, base, name, state string) {
	t.Helper()
	err := waitfor.Poll(context.Background(), 100*time.Millisecond, time.Minute, waitfor.Simple(func(context.Context) (bool, string) {
		got := alertsNamed(t, base, name)
		if state == "" {
			return len(got) == 0, fmt.Sprintf("%v", got)
		}
		return len(got) > 0 && got[0].State == state, fmt.Sprintf("%v", got)
	}))
	if err != nil {
		t.Fatalf("%s %q: %v", name, state, err)
	}
}

func TestTheTSDBKeepsSeriesAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "kept", Help: "kept"})
	g.Set(42)
	reg.MustRegister(g)
	run := func() (string, func()) { return runMonitor(t, dir, Target{Job: "x", Gatherer: reg}) }
	base, stop := run()
	waitQuery(t, base, "kept == 42", 1)
	stop()
	if _, err := os.Stat(filepath.Join(dir, "wal")); err != nil {
		t.Fatalf("no write-ahead log in the data dir: %v", err)
	}
	reg.Unregister(g)
	base, stop = run()
	defer stop()
	// The sample written before the restart is still there.
	waitQuery(t, base, "max_over_time(kept[10m]) == 42", 1)
}

func TestOptionsAndTargetsAreChecked(t *testing.T) {
	reg := prometheus.NewRegistry()
	cfg := filepath.Join(t.TempDir(), "prometheus.yaml")
	if err := os.WriteFile(cfg, []byte("scrape_configs:\n- job_name: x\n  static_configs:\n  - targets: [\"127.0.0.1:1\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("scrape_configs:\n- job_name: y\n  scrape_interval: often\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		opts    Options
		targets []Target
		msg     string
	}{
		{Options{}, nil, "no data directory"},
		{Options{Dir: t.TempDir(), Retention: -time.Hour}, nil, "--metrics-retention -1h0m0s: must not be negative"},
		{Options{Dir: t.TempDir(), MaxAlertFor: -time.Second}, nil, "--alert-for-max"},
		{Options{Dir: t.TempDir()}, []Target{{Job: "a b", Gatherer: reg}}, `target job "a b"`},
		{Options{Dir: t.TempDir()}, []Target{{Job: "a", Gatherer: reg}, {Job: "a", Gatherer: reg}}, `"a" named twice`},
		{Options{Dir: t.TempDir()}, []Target{{Job: "a"}}, "want either a gatherer or URLs"},
		{Options{Dir: t.TempDir()}, []Target{{Job: "a", URLs: []string{"ftp://h/metrics"}}}, `URL "ftp://h/metrics" is not http(s)`},
		{Options{Dir: t.TempDir(), ConfigFile: cfg}, []Target{{Job: "x", Gatherer: reg}}, `job "x" is one of capstan's own`},
		{Options{Dir: t.TempDir(), ConfigFile: bad}, nil, "--prometheus-config " + bad},
		{Options{Dir: t.TempDir(), ConfigFile: filepath.Join(t.TempDir(), "missing.yaml")}, nil, "no such file"},
	} {
		m, err := New(tc.opts, tc.targets)
		if err == nil {
			m.Stop()
			t.Errorf("%+v %v: no error, want %q", tc.opts, tc.targets, tc.msg)
			continue
		}
		if !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%+v: %v, want %q", tc.opts, err, tc.msg)
		}
	}
}

func TestEveryEmbeddedRuleFileLoads(t *testing.T) {
	l := &groupLoader{parser: defaultParser, maxFor: time.Minute}
	names := ruleFileNames()
	if len(names) < 6 {
		t.Fatalf("embedded rule files: %v", names)
	}
	alerts := map[string]bool{}
	for _, n := range names {
		groups, errs := l.Load(n, false, model.UTF8Validation)
		if len(errs) > 0 {
			t.Fatalf("%s: %v", n, errs)
		}
		for _, g := range groups.Groups {
			for _, r := range g.Rules {
				alerts[r.Alert] = true
				if time.Duration(r.For) > time.Minute {
					t.Errorf("%s: for %s not shortened", r.Alert, time.Duration(r.For))
				}
				if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
					t.Errorf("%s: no severity or summary", r.Alert)
				}
			}
		}
	}
	for _, want := range []string{"ClusterOperatorDown", "ClusterOperatorDegraded", "ClusterVersionOperatorDown", "CannotRetrieveUpdates",
		"UpdateAvailable", "KubeNodeNotReady", "KubeNodeUnreachable", "MachineWithNoRunningPhase", "MachineNotYetDeleted",
		"MCCDrainError", "MCDRebootError", "MCDPivotError", "ClusterAutoscalerUnschedulablePods", "ClusterAutoscalerNodeCountNearLimit",
		"etcdMembersDown", "etcdNoLeader", "etcdInsufficientMembers"} {
		if !alerts[want] {
			t.Errorf("no alert %s", want)
		}
	}
	if _, errs := l.Load(filepath.Join(t.TempDir(), "none.yaml"), false, model.UTF8Validation); len(errs) == 0 {
		t.Error("a missing rule file loaded")
	}
}

func TestAConfigFileAddsTargetsAndRules(t *testing.T) {
	ext := gaugeServer(t, "external_queue_depth", 7)
	dir := t.TempDir()
	rules := filepath.Join(dir, "extra-rules.yaml")
	if err := os.WriteFile(rules, []byte(`groups:
- name: extra
  rules:
  - alert: ExternalQueueDeep
    expr: external_queue_depth > 5
    labels:
      severity: warning
    annotations:
      summary: The external queue is deep.
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "prometheus.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`rule_files: [%q]
scrape_configs:
- job_name: external
  scrape_interval: 1s
  static_configs:
  - targets: [%q]
    labels:
      team: storage
`, filepath.Join(dir, "extra-*.yaml"), strings.TrimPrefix(ext.URL, "http://"))), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CheckConfigFile(cfg); err != nil {
		t.Fatal(err)
	}
	_, base, _, _ := testMonitor(t, Options{ConfigFile: cfg})
	waitQuery(t, base, `external_queue_depth{job="external",team="storage"} == 7`, 1)
	waitAlert(t, base, "ExternalQueueDeep", "firing")

	// A rule file that does not parse is refused by the check, before
	// anything starts.
	if err := os.WriteFile(filepath.Join(dir, "extra-bad.yaml"), []byte("groups:\n- name: bad\n  rules:\n  - alert: Broken\n    expr: sum((\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CheckConfigFile(cfg); err == nil || !strings.Contains(err.Error(), "extra-bad.yaml") {
		t.Errorf("a rule file that does not parse: %v", err)
	}
}

func TestDiscoveredTargetsComeAndGo(t *testing.T) {
	member := gaugeServer(t, "member_metric", 3)
	var urls atomic.Pointer[[]string]
	urls.Store(&[]string{})
	m, err := New(Options{Dir: t.TempDir(), ScrapeInterval: time.Second, EvaluationInterval: time.Second},
		[]Target{{Job: "members", Discover: func() []string { return *urls.Load() }}, {Job: "self", Gatherer: prometheus.NewRegistry()}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	// No member yet: no target, so no up series at all (not a down one),
	// once the other job was scraped.
	if err := m.WaitScraped(context.Background(), "self"); err != nil {
		t.Fatal(err)
	}
	waitQuery(t, srv.URL, `up{job="self"}`, 1)
	if code, a := get(t, srv.URL, "/api/v1/query", url.Values{"query": {`up{job="members"}`}}); code != 200 || string(a.Data) != `{"resultType":"vector","result":[]}` {
		t.Errorf("up of a job without targets: %d %s", code, a.Data)
	}
	urls.Store(&[]string{member.URL + "/metrics"})
	waitQuery(t, srv.URL, `member_metric{job="members"} == 3`, 1)
}

// A target gone while the monitor was down is stale once the monitor is
// back, as if the monitor had seen it go: its last sample is not
// returned for the five minutes of the lookback.
func TestTargetsGoneAcrossARestartAreStale(t *testing.T) {
	dir := t.TempDir()
	members := []string{gaugeServer(t, "member_metric", 1).URL + "/metrics", gaugeServer(t, "member_metric", 1).URL + "/metrics"}
	run := func(urls []string) (string, func()) {
		return runMonitor(t, dir, Target{Job: "members", Discover: func() []string { return urls }}, Target{Job: "self", Gatherer: prometheus.NewRegistry()})
	}
	base, stop := run(members)
	waitQuery(t, base, `up{job="members"} == 1`, 2)
	waitQuery(t, base, `member_metric`, 2)
	before := time.Now()
	stop()

	base, stop = run(members[:1])
	defer stop()
	waitQuery(t, base, `up{job="members"} == 1`, 1)
	waitQuery(t, base, `member_metric`, 1)
	waitQuery(t, base, `up`, 2) // the member left and the monitor itself
	// The history is kept: before the restart, both were up.
	code, a := get(t, base, "/api/v1/query", url.Values{"query": {`count(up{job="members"} == 1)`}, "time": {fmt.Sprintf("%.3f", float64(before.UnixMilli())/1000)}})
	if code != 200 || !strings.Contains(string(a.Data), `"2"]`) {
		t.Errorf("up of both members before the restart: %d %s", code, a.Data)
	}
}

// gaugeServer serves /metrics with one gauge of that name and value,
// closed when the test ends.
func gaugeServer(t *testing.T, name string, v float64) *httptest.Server {
	t.Helper()
	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "h"})
	g.Set(v)
	reg.MustRegister(g)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	return srv
}

// runMonitor runs a monitor on dir scraping the targets every second and
// serves its API; stop stops both.
func runMonitor(t *testing.T, dir string, targets ...Target) (base string, stop func()) {
	t.Helper()
	m, err := New(Options{Dir: dir, ScrapeInterval: time.Second, EvaluationInterval: time.Second}, targets)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	return srv.URL, func() {
		srv.Close()
		if err := m.Stop(); err != nil {
			t.Error(err)
		}
	}
}

// A subquery without a step ([5m:]) steps at the evaluation interval, in
// a rule file and through the API, as in Prometheus: without the engine's
// NoStepSubqueryIntervalFn it panics, which in a rule group kills
// capstan.
func TestASubqueryWithoutAStepIsEvaluated(t *testing.T) {
	dir := t.TempDir()
	rules := filepath.Join(dir, "subquery-rules.yaml")
	if err := os.WriteFile(rules, []byte(`groups:
- name: subquery
  rules:
  - record: job:up:max5m
    expr: max by (job) (max_over_time(up[5m:]))
  - alert: SubqueryWithoutStep
    expr: max_over_time(up{job="cluster-version-operator"}[1h:]) == 1
    labels:
      severity: info
    annotations:
      summary: A subquery without a step evaluated.
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "prometheus.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("rule_files: [%q]\n", rules)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, base, _, _ := testMonitor(t, Options{ConfigFile: cfg})
	waitAlert(t, base, "SubqueryWithoutStep", "firing")
	waitQuery(t, base, `job:up:max5m{job="cluster-version-operator"} == 1`, 1)
	waitQuery(t, base, `max_over_time(up{job="cluster-version-operator"}[5m:])`, 1)
}

// A flood of queries is refused with 503 once MaxConcurrentQueries are
// evaluating and a slot does not come free within QueryQueueWait; what
// does not read the TSDB still answers, and the next query after the
// flood does too.
func TestAFloodOfQueriesIsRefused(t *testing.T) {
	m, base, _, _ := testMonitor(t, Options{})
	waitQuery(t, base, `up{job="cluster-version-operator"}`, 1)

	// Every slot taken: refused, with Retry-After.
	for range cap(m.queries) {
		m.queries <- struct{}{}
	}
	resp, err := http.Get(base + "/api/v1/query?query=up")
	if err != nil {
		t.Fatal(err)
	}
	var a apiAnswer
	_ = json.NewDecoder(resp.Body).Decode(&a)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || a.ErrorType != "unavailable" || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a query with every slot taken: %d %q %q (Retry-After %q), want 503 unavailable with Retry-After",
			resp.StatusCode, a.ErrorType, a.Error, resp.Header.Get("Retry-After"))
	}
	if code, a := get(t, base, "/api/v1/alerts", nil); code != 200 {
		t.Errorf("alerts with every query slot taken: %d %s", code, a.Error)
	}
	for range cap(m.queries) {
		<-m.queries
	}

	// A real flood: slow range queries (a subquery of 3,600 points at
	// each of 11,000 steps), four times as many as there are slots.
	end := time.Now()
	flood := url.Values{"query": {"sum_over_time(vector(1)[1h:1s])"}, "start": {fmt.Sprint(end.Add(-11000 * time.Second).Unix())},
		"end": {fmt.Sprint(end.Unix())}, "step": {"1s"}}
	codes := make(chan int, 4*MaxConcurrentQueries)
	var wg sync.WaitGroup
	for range cap(codes) {
		wg.Go(func() {
			resp, err := http.PostForm(base+"/api/v1/query_range", flood)
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		})
	}
	wg.Wait()
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	if count[http.StatusServiceUnavailable] == 0 || count[http.StatusOK] == 0 || count[http.StatusOK]+count[http.StatusServiceUnavailable] != 4*MaxConcurrentQueries {
		t.Errorf("the flood's answers by status: %v, want some 200 and some 503, nothing else", count)
	}
	t.Logf("the flood's answers by status: %v", count)
	waitQuery(t, base, `up{job="cluster-version-operator"}`, 1)
}

// Blocks are compacted up to a tenth of the retention, as Prometheus
// does when not told, within 2h and 31 days.
func TestMaxBlockDuration(t *testing.T) {
	for _, tc := range []struct{ retention, want time.Duration }{
		{15 * 24 * time.Hour, 36 * time.Hour},
		{time.Hour, 2 * time.Hour},
		{3650 * 24 * time.Hour, 31 * 24 * time.Hour},
	} {
		if got := maxBlockDuration(tc.retention); got != tc.want {
			t.Errorf("retention %s: %s, want %s", tc.retention, got, tc.want)
		}
	}
}

// The API is Prometheus's own: its build information names the embedded
// release, its status pages, limits and rule filters answer, and before
// Run it is unavailable as a starting Prometheus is.
func TestTheAPIIsPrometheuss(t *testing.T) {
	running, base, up, _ := testMonitor(t, Options{})
	up.WithLabelValues("etcd", "AsExpected", "4.16.0").Set(1)
	waitQuery(t, base, `cluster_operator_up`, 1)
	check := func(path string, params url.Values, want ...string) {
		t.Helper()
		code, a := get(t, base, path, params)
		if code != 200 || a.Status != "success" {
			t.Errorf("%s %v: %d %s %s", path, params, code, a.ErrorType, a.Error)
			return
		}
		for _, w := range want {
			if !strings.Contains(string(a.Data), w) {
				t.Errorf("%s %v: no %s in %s", path, params, w, a.Data)
			}
		}
	}
	check("/api/v1/status/buildinfo", nil, `"version":"3.16.0"`)
	check("/api/v1/status/flags", nil, `"storage.tsdb.retention.time":"360h0m0s"`)
	check("/api/v1/status/runtimeinfo", nil, `"storageRetention":"360h0m0s"`)
	check("/api/v1/status/tsdb", nil, `"headStats"`)
	check("/api/v1/status/config", nil, `job_name: cluster-version-operator`)
	check("/api/v1/targets", url.Values{"state": {"active"}}, `"scrapePool":"cluster-version-operator"`, `"droppedTargets":[]`)
	check("/api/v1/rules", url.Values{"rule_name[]": {"ClusterOperatorDown"}}, `"name":"ClusterOperatorDown"`)
	code, a := get(t, base, "/api/v1/rules", url.Values{"rule_name[]": {"ClusterOperatorDown"}})
	if code != 200 || strings.Contains(string(a.Data), `"name":"ClusterVersionOperatorDown"`) {
		t.Errorf("rule_name[] did not filter: %s", a.Data)
	}
	code, a = get(t, base, "/api/v1/labels", url.Values{"limit": {"1"}})
	var names []string
	if err := json.Unmarshal(a.Data, &names); code != 200 || err != nil || len(names) != 1 {
		t.Errorf("labels limit=1: %d %v %s", code, err, a.Data)
	}
	check("/api/v1/format_query", url.Values{"query": {"sum(up)by(job)"}}, `sum by (job) (up)`)
	// L2: the admin API stays off, and remote read answers 404 at once
	// rather than holding the request.
	quick := &http.Client{Timeout: 10 * time.Second}
	for _, path := range []string{"/api/v1/admin/tsdb/delete_series?match[]=up", "/api/v1/admin/tsdb/snapshot", "/api/v1/admin/tsdb/clean_tombstones"} {
		resp, err := quick.Post(base+path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), "admin APIs disabled") {
			t.Errorf("POST %s: %d %s, want the admin API off", path, resp.StatusCode, body)
		}
	}
	resp, err := quick.Post(base+"/api/v1/read", "application/x-protobuf", strings.NewReader("x"))
	if err != nil {
		t.Fatalf("remote read: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("remote read: %d, want 404", resp.StatusCode)
	}
	resp, err = http.Get(base + "/-/ready")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/-/ready: %d", resp.StatusCode)
	}

	m, err := New(Options{Dir: t.TempDir()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop() })
	// Served by two listeners (the metrics address and the
	// thanos-querier's), the API is made once.
	first, second := m.Handler(), m.Handler()
	if reflect.ValueOf(first).Pointer() != reflect.ValueOf(second).Pointer() {
		t.Error("a second Handler made a second API")
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err = http.Get(srv.URL + "/api/v1/query?query=up")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a query before Run: %d, want 503", resp.StatusCode)
	}
	// Stopped, it answers 503 again, its TSDB closed.
	if err := running.Stop(); err != nil {
		t.Fatal(err)
	}
	resp, err = http.Get(base + "/api/v1/query?query=up")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || strings.Contains(string(body), "too many queries") {
		t.Errorf("a query after Stop: %d %s, want 503 unavailable", resp.StatusCode, body)
	}
}

// The build information names the Prometheus module go.mod requires.
func TestPrometheusModuleIsGoMods(t *testing.T) {
	raw, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	want := "\tgithub.com/prometheus/prometheus " + PrometheusModule + "\n"
	if !strings.Contains(string(raw), want) {
		t.Errorf("go.mod does not require %q: update PrometheusModule", strings.TrimSpace(want))
	}
}
