package cvo

import (
	"context"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	configv1 "github.com/openshift/api/config/v1"
	promconfig "github.com/prometheus/common/config"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/capstan-dev/capstan/internal/updateservice/demo"
)

// graphServer serves the chapter's demo graph through the real update
// service.
func graphServer(t *testing.T) (*httptest.Server, []demo.Built) {
	t.Helper()
	svc, built, err := demo.Service(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc)
	t.Cleanup(srv.Close)
	return srv, built
}

// promServer answers instant queries as Prometheus's HTTP API does, with
// the sample value given (or an error status), counting the queries.
func promServer(t *testing.T, value string, status int, queries *atomic.Int32) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		queries.Add(1)
		if r.URL.Path != "/api/v1/query" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if status != http.StatusOK {
			w.WriteHeader(status)
			fmt.Fprint(w, `{"status":"error","errorType":"execution","error":"query failed"}`)
			return
		}
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"type":"None"},"value":[1658000000,%q]}]}}`, value)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func clusterVersion(channel, version string) *configv1.ClusterVersion {
	return &configv1.ClusterVersion{
		ObjectMeta: metav1.ObjectMeta{Name: "version"},
		Spec:       configv1.ClusterVersionSpec{ClusterID: "3d3c5a0e-33b1-4d27-9d1b-1d2d8d6b3f4c", Channel: channel},
		Status:     configv1.ClusterVersionStatus{Desired: configv1.Release{Version: version}},
	}
}

func versions(rs []configv1.Release) string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Version)
	}
	return strings.Join(out, ",")
}

func TestChapterRecommendations(t *testing.T) {
	graph, built := graphServer(t)
	upstream := graph.URL + "/api/upgrades_info/v1/graph"
	clock := clocktesting.NewFakeClock(time.Date(2022, 7, 20, 0, 0, 0, 0, time.UTC))
	for _, tc := range []struct {
		name              string
		value             string
		status            int
		recommended       string
		cond              metav1.ConditionStatus
		reason, message   string
		with4110Available bool
	}{
		{"the cluster is exposed", "1", 200, "4.10.26,4.10.25,4.10.24,4.10.23", metav1.ConditionFalse, "RPMOSTreeTimeout",
			"Nodes with substantial numbers of containers and CPU contention may not reconcile machine configuration https://bugzilla.redhat.com/show_bug.cgi?id=2111817#c22", false},
		{"the cluster is not exposed", "0", 200, "4.11.0,4.10.26,4.10.25,4.10.24,4.10.23", metav1.ConditionTrue, ReasonNotExposedToRisks,
			"The update is recommended, because none of the conditional update risks apply to this cluster.", true},
		{"the query fails", "", 422, "4.10.26,4.10.25,4.10.24,4.10.23", metav1.ConditionUnknown, ReasonEvaluationFailed,
			"Could not evaluate exposure to update risk RPMOSTreeTimeout (executing the PromQL query: execution: query failed)\n  RPMOSTreeTimeout description: Nodes with substantial numbers of containers and CPU contention may not reconcile machine configuration\n  RPMOSTreeTimeout URL: https://bugzilla.redhat.com/show_bug.cgi?id=2111817#c22", false},
		{"the answer is not 0 or 1", "2", 200, "4.10.26,4.10.25,4.10.24,4.10.23", metav1.ConditionUnknown, ReasonEvaluationFailed,
			"Could not evaluate exposure to update risk RPMOSTreeTimeout (invalid PromQL result (must be 0 or 1): 2)", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var queries atomic.Int32
			eval := &Evaluator{PromQLURL: promServer(t, tc.value, tc.status, &queries), Clock: clock}
			cv := clusterVersion("fast-4.11", "4.10.22")
			r := Recommend(context.Background(), httpClient(), cv, upstream, "amd64", eval)
			if r.Condition.Status != configv1.ConditionTrue {
				t.Fatalf("RetrievedUpdates %s %s: %s", r.Condition.Status, r.Condition.Reason, r.Condition.Message)
			}
			if got := versions(r.Available); got != tc.recommended {
				t.Errorf("available updates %s, want %s", got, tc.recommended)
			}
			if len(r.Conditional) != 1 || r.Conditional[0].Release.Version != "4.11.0" {
				t.Fatalf("conditional updates: %+v", r.Conditional)
			}
			c := meta.FindStatusCondition(r.Conditional[0].Conditions, RecommendedCondition)
			if c == nil || c.Status != tc.cond || c.Reason != tc.reason || !strings.HasPrefix(c.Message, tc.message) {
				t.Errorf("Recommended = %+v, want %s %s %q", c, tc.cond, tc.reason, tc.message)
			}
			if r.Conditional[0].Release.Image != built[5].Ref.String()[:strings.LastIndex(built[5].Ref.String(), ":")]+"@"+built[5].Digest.String() {
				t.Errorf("4.11.0 image %s", r.Conditional[0].Release.Image)
			}
			r.Apply(cv, metav1.NewTime(clock.Now()))
			if got := strings.Join(cv.Status.Desired.Channels, ", "); got != "candidate-4.10, candidate-4.11, eus-4.10, fast-4.10, fast-4.11, stable-4.10" {
				t.Errorf("available channels: %s", got)
			}
			// The result is cached: asking again does not query again.
			Recommend(context.Background(), httpClient(), cv, upstream, "amd64", eval)
			if n := queries.Load(); n != 1 {
				t.Errorf("%d queries for one risk asked twice within the hour, want 1", n)
			}
		})
	}
}

func TestRetrievedUpdatesFailures(t *testing.T) {
	graph, _ := graphServer(t)
	eval := &Evaluator{Clock: clocktesting.NewFakeClock(time.Now())}
	for _, tc := range []struct {
		name, upstream, channel, version, id string
		reason, message                      string
	}{
		{"no channel", graph.URL + "/graph", "", "4.10.22", "", ReasonNoChannel, "The update channel has not been configured."},
		{"a channel without the version", graph.URL + "/graph", "stable-4.12", "4.10.22", "", "VersionNotFound",
			`Unable to retrieve available updates: currently reconciling cluster version 4.10.22 not found in the "stable-4.12" channel`},
		{"a version outside the graph", graph.URL + "/graph", "fast-4.11", "4.9.0", "", "VersionNotFound",
			`Unable to retrieve available updates: currently reconciling cluster version 4.9.0 not found in the "fast-4.11" channel`},
		{"an unreachable upstream", "http://127.0.0.1:1/graph", "fast-4.11", "4.10.22", "", "RemoteFailed", "Unable to retrieve available updates: Get \"http://127.0.0.1:1/graph?"},
		{"a path that is not the graph", graph.URL + "/nope", "fast-4.11", "4.10.22", "", "ResponseFailed", "Unable to retrieve available updates: unexpected HTTP status: 404 Not Found"},
		{"no upstream", "", "fast-4.11", "4.10.22", "", ReasonNoUpstream, "No updateService server has been set to retrieve updates."},
		{"a bad cluster ID", graph.URL + "/graph", "fast-4.11", "4.10.22", "not-a-uuid", ReasonInvalidID, "invalid cluster ID: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cv := clusterVersion(tc.channel, tc.version)
			if tc.id != "" {
				cv.Spec.ClusterID = configv1.ClusterID(tc.id)
			}
			r := Recommend(context.Background(), httpClient(), cv, tc.upstream, "amd64", eval)
			c := r.Condition
			if c.Status != configv1.ConditionFalse || c.Reason != tc.reason || !strings.HasPrefix(c.Message, tc.message) {
				t.Errorf("RetrievedUpdates %s %s %q, want False %s %q", c.Status, c.Reason, c.Message, tc.reason, tc.message)
			}
		})
	}
}

func TestPromQLEvaluationIsThrottled(t *testing.T) {
	var queries atomic.Int32
	clock := clocktesting.NewFakeClock(time.Date(2022, 7, 20, 10, 0, 0, 0, time.UTC))
	eval := &Evaluator{PromQLURL: promServer(t, "1", 200, &queries), Clock: clock}
	rule := func(q string) []configv1.ClusterCondition {
		return []configv1.ClusterCondition{{Type: "PromQL", PromQL: &configv1.PromQLClusterCondition{PromQL: q}}}
	}
	if m, err := eval.Match(context.Background(), rule("a")); !m || err != nil {
		t.Fatalf("first query: %v %v", m, err)
	}
	// A second query within a second waits its turn...
	_, err := eval.Match(context.Background(), rule("b"))
	if err == nil || err.Error() != "evaluation is throttled until 10:00:01Z" {
		t.Fatalf("second query at once: %v", err)
	}
	// ...and an Always rule after it decides meanwhile.
	if m, err := eval.Match(context.Background(), append(rule("b"), configv1.ClusterCondition{Type: "Always"})); !m || err != nil {
		t.Fatalf("PromQL then Always: %v %v", m, err)
	}
	clock.Step(time.Second)
	if m, err := eval.Match(context.Background(), rule("b")); !m || err != nil {
		t.Fatalf("second query a second later: %v %v", m, err)
	}
	// Cached for an hour, asked again after it.
	clock.Step(59 * time.Minute)
	eval.Match(context.Background(), rule("a"))
	if n := queries.Load(); n != 2 {
		t.Fatalf("%d queries, want 2", n)
	}
	clock.Step(2 * time.Minute)
	eval.Match(context.Background(), rule("a"))
	if n := queries.Load(); n != 3 {
		t.Fatalf("%d queries after the hour, want 3", n)
	}
}

func TestRecommendedReasons(t *testing.T) {
	eval := &Evaluator{Clock: clocktesting.NewFakeClock(time.Now())}
	always := []configv1.ClusterCondition{{Type: "Always"}}
	failing := []configv1.ClusterCondition{{Type: "PromQL", PromQL: &configv1.PromQLClusterCondition{PromQL: "up"}}}
	a := configv1.ConditionalUpdateRisk{Name: "RiskA", URL: "https://a", Message: "A applies.", MatchingRules: always}
	b := configv1.ConditionalUpdateRisk{Name: "RiskB", URL: "https://b", Message: "B applies.", MatchingRules: always}
	f := configv1.ConditionalUpdateRisk{Name: "RiskF", URL: "https://f", Message: "F cannot be told.", MatchingRules: failing}
	odd := configv1.ConditionalUpdateRisk{Name: "not a reason!", URL: "https://o", Message: "Odd name.", MatchingRules: always}
	for _, tc := range []struct {
		name    string
		risks   []configv1.ConditionalUpdateRisk
		status  metav1.ConditionStatus
		reason  string
		message string
	}{
		{"one risk applies", []configv1.ConditionalUpdateRisk{a}, metav1.ConditionFalse, "RiskA", "A applies. https://a"},
		{"two apply", []configv1.ConditionalUpdateRisk{a, b}, metav1.ConditionFalse, ReasonMultipleReasons, "A applies. https://a\n\nB applies. https://b"},
		{"one applies, one cannot be evaluated", []configv1.ConditionalUpdateRisk{a, f}, metav1.ConditionFalse, ReasonMultipleReasons,
			"A applies. https://a\n\nCould not evaluate exposure to update risk RiskF (no PromQL query endpoint is configured)\n  RiskF description: F cannot be told.\n  RiskF URL: https://f"},
		{"only one that cannot be evaluated", []configv1.ConditionalUpdateRisk{f}, metav1.ConditionUnknown, ReasonEvaluationFailed,
			"Could not evaluate exposure to update risk RiskF (no PromQL query endpoint is configured)\n  RiskF description: F cannot be told.\n  RiskF URL: https://f"},
		{"a name that is not a reason", []configv1.ConditionalUpdateRisk{odd}, metav1.ConditionFalse, ReasonExposedToRisks, "Odd name. https://o"},
		{"none", nil, metav1.ConditionTrue, ReasonNotExposedToRisks, "The update is recommended, because none of the conditional update risks apply to this cluster."},
	} {
		c := eval.Recommended(context.Background(), tc.risks)
		if c.Type != RecommendedCondition || c.Status != tc.status || c.Reason != tc.reason || c.Message != tc.message {
			t.Errorf("%s: %s %s %q, want %s %s %q", tc.name, c.Status, c.Reason, c.Message, tc.status, tc.reason, tc.message)
		}
	}
}

// A thanos-querier-like endpoint: TLS with a CA of its own, and a bearer
// token asked for. The evaluator reaches it with --promql-ca-file and
// --promql-bearer-token-file; without them the risk cannot be evaluated.
func TestPromQLOverTLSWithABearerToken(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1658000000,"1"]}]}}`)
	}))
	defer srv.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rules := []configv1.ClusterCondition{{Type: "PromQL", PromQL: &configv1.PromQLClusterCondition{PromQL: "vector(1)"}}}
	ask := func(hc promconfig.HTTPClientConfig) (bool, error) {
		e := &Evaluator{PromQLURL: srv.URL, HTTP: hc, Clock: clocktesting.NewFakeClock(time.Now())}
		return e.Match(context.Background(), rules)
	}
	cfg := promconfig.HTTPClientConfig{BearerTokenFile: token, TLSConfig: promconfig.TLSConfig{CAFile: ca}}
	if match, err := ask(cfg); err != nil || !match {
		t.Errorf("with the CA and token: %v %v", match, err)
	}
	if _, err := ask(promconfig.HTTPClientConfig{BearerTokenFile: token}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without the CA: %v", err)
	}
	if _, err := ask(promconfig.HTTPClientConfig{TLSConfig: promconfig.TLSConfig{CAFile: ca}}); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("without the token: %v", err)
	}
}
