package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/waitfor"
)

// Alert is an alert as the cluster's Prometheus reports it.
type Alert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
	Value       string            `json:"value"`
}

// Prometheus is a cluster's Prometheus API, at URL (URL/api/v1/...).
type Prometheus struct{ URL string }

// Alerts asks the cluster's Prometheus for its pending and firing alerts.
func (e *Env) Alerts(ctx context.Context) ([]Alert, error) { return e.prom().Alerts(ctx) }

// Query runs an instant query at the cluster's Prometheus (see
// Prometheus.Query).
func (e *Env) Query(ctx context.Context, q string, at time.Time) ([]map[string]string, []string, error) {
	return e.prom().Query(ctx, q, at)
}

// WaitAlertFiring waits until the cluster's Prometheus fires the alert
// (see Prometheus.WaitAlertFiring).
func (e *Env) WaitAlertFiring(t *testing.T, name string, labels map[string]string, timeout time.Duration) Alert {
	t.Helper()
	return e.prom().WaitAlertFiring(t, name, labels, timeout)
}

// WaitAlertResolved waits until the alert is gone from the cluster's
// Prometheus (see Prometheus.WaitAlertResolved).
func (e *Env) WaitAlertResolved(t *testing.T, name string, labels map[string]string, timeout time.Duration) {
	t.Helper()
	e.prom().WaitAlertResolved(t, name, labels, timeout)
}

func (e *Env) prom() *Prometheus { return &Prometheus{URL: e.Cluster.PrometheusURL} }

// Alerts asks for the pending and firing alerts.
func (e *Prometheus) Alerts(ctx context.Context) ([]Alert, error) {
	var body struct {
		Status string `json:"status"`
		Data   struct {
			Alerts []Alert `json:"alerts"`
		} `json:"data"`
		Error string `json:"error"`
	}
	if err := e.promGet(ctx, "/api/v1/alerts", nil, &body); err != nil {
		return nil, err
	}
	return body.Data.Alerts, nil
}

// Query runs an instant query (at time at, or now when zero) and returns
// the samples' labels and values.
func (e *Prometheus) Query(ctx context.Context, q string, at time.Time) ([]map[string]string, []string, error) {
	params := url.Values{"query": {q}}
	if !at.IsZero() {
		params.Set("time", fmt.Sprintf("%.3f", float64(at.UnixMilli())/1000))
	}
	var body struct {
		Status string `json:"status"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
		Error string `json:"error"`
	}
	if err := e.promGet(ctx, "/api/v1/query", params, &body); err != nil {
		return nil, nil, err
	}
	if body.Status != "success" {
		return nil, nil, fmt.Errorf("%s: %s", q, body.Error)
	}
	var ls []map[string]string
	var vs []string
	for _, r := range body.Data.Result {
		ls = append(ls, r.Metric)
		vs = append(vs, fmt.Sprint(r.Value[1]))
	}
	return ls, vs, nil
}

func (e *Prometheus) promGet(ctx context.Context, path string, params url.Values, into any) error {
	if e.URL == "" {
		return fmt.Errorf("the cluster runs no Prometheus")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.URL+path+"?"+params.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(into)
}

// matches says whether the alert has every label in want.
func matches(a Alert, name string, want map[string]string) bool {
	if a.Labels["alertname"] != name {
		return false
	}
	for k, v := range want {
		if a.Labels[k] != v {
			return false
		}
	}
	return true
}

// WaitAlertFiring waits until an alert of that name with those labels
// fires, and returns it.
func (e *Prometheus) WaitAlertFiring(t *testing.T, name string, labels map[string]string, timeout time.Duration) Alert {
	t.Helper()
	var found Alert
	err := waitfor.Poll(context.Background(), 500*time.Millisecond, timeout, waitfor.Simple(func(ctx context.Context) (bool, string) {
		alerts, err := e.Alerts(ctx)
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, a := range alerts {
			if matches(a, name, labels) && a.State == "firing" {
				found = a
				return true, ""
			}
			seen = append(seen, a.Labels["alertname"]+"("+a.State+")")
		}
		return false, "alerts: " + strings.Join(seen, ", ")
	}))
	if err != nil {
		t.Fatalf("%s %v never fired: %v", name, labels, err)
	}
	return found
}

// WaitAlertResolved waits until no alert of that name with those labels
// is pending or firing.
func (e *Prometheus) WaitAlertResolved(t *testing.T, name string, labels map[string]string, timeout time.Duration) {
	t.Helper()
	err := waitfor.Poll(context.Background(), 500*time.Millisecond, timeout, waitfor.Simple(func(ctx context.Context) (bool, string) {
		alerts, err := e.Alerts(ctx)
		if err != nil {
			return false, err.Error()
		}
		for _, a := range alerts {
			if matches(a, name, labels) {
				return false, fmt.Sprintf("still %s: %v", a.State, a.Labels)
			}
		}
		return true, ""
	}))
	if err != nil {
		t.Fatalf("%s %v never resolved: %v", name, labels, err)
	}
}

// MetricTypes returns the types the targets gave a metric family, as
// /api/v1/metadata reports them.
func (e *Prometheus) MetricTypes(ctx context.Context, family string) ([]string, error) {
	var body struct {
		Status string                         `json:"status"`
		Data   map[string][]map[string]string `json:"data"`
		Error  string                         `json:"error"`
	}
	if err := e.promGet(ctx, "/api/v1/metadata", url.Values{"metric": {family}}, &body); err != nil {
		return nil, err
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("metadata of %s: %s", family, body.Error)
	}
	var types []string
	for _, md := range body.Data[family] {
		types = append(types, md["type"])
	}
	return types, nil
}

// Prom is the cluster's Prometheus.
func (e *Env) Prom() *Prometheus { return e.prom() }

// TargetsDump describes a job's active targets, for a failure's message.
func (e *Prometheus) TargetsDump(ctx context.Context, job string) string {
	var body struct {
		Data struct {
			ActiveTargets []struct {
				Labels    map[string]string `json:"labels"`
				ScrapeURL string            `json:"scrapeUrl"`
				Health    string            `json:"health"`
				LastError string            `json:"lastError"`
			} `json:"activeTargets"`
		} `json:"data"`
	}
	if err := e.promGet(ctx, "/api/v1/targets", nil, &body); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, t := range body.Data.ActiveTargets {
		if t.Labels["job"] == job {
			fmt.Fprintf(&b, "\n  %s %s %s", t.ScrapeURL, t.Health, t.LastError)
		}
	}
	return b.String()
}
