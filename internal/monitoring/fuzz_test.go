package monitoring

import (
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	configv1 "github.com/openshift/api/config/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/promql"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/capstan-dev/capstan/internal/cvo"
)

// FuzzRiskQuery feeds PromQL risk expressions, as an update graph would
// carry them, through the cluster version operator's evaluator to the
// embedded engine: every answer is a match, no match, or an error the
// Recommended condition reports; nothing panics, and what the engine
// accepts as a 0 or 1 the evaluator decides the same way.
func FuzzRiskQuery(f *testing.F) {
	entries, err := os.ReadDir("testdata/risks")
	if err != nil || len(entries) == 0 {
		f.Fatalf("seed risks: %v", err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	for _, n := range names {
		raw, err := os.ReadFile(filepath.Join("testdata/risks", n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(strings.TrimSpace(string(raw)))
	}
	reg := prometheus.NewRegistry()
	infra := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cluster_infrastructure_provider", Help: "h"}, []string{"type", "region"})
	infra.WithLabelValues("None", "").Set(1)
	nodes := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kube_node_info", Help: "h"}, []string{"node"})
	for _, n := range []string{"master-0", "worker-0", "worker-1"} {
		nodes.WithLabelValues(n).Set(1)
	}
	reg.MustRegister(infra, nodes)
	m, err := New(Options{Dir: f.TempDir(), ScrapeInterval: time.Second, EvaluationInterval: time.Hour}, []Target{{Job: "cluster-version-operator", Gatherer: reg}})
	if err != nil {
		f.Fatal(err)
	}
	if err := m.Run(context.Background()); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = m.Stop() })
	if err := m.WaitScraped(context.Background(), "cluster-version-operator"); err != nil {
		f.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	f.Cleanup(srv.Close)

	f.Fuzz(func(t *testing.T, query string) {
		// A fresh evaluator each time: no cache, no throttle between
		// inputs.
		at := time.Now().Truncate(time.Second)
		eval := &cvo.Evaluator{PromQLURL: srv.URL, Clock: clocktesting.NewFakeClock(at)}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		match, err := eval.Match(ctx, []configv1.ClusterCondition{{Type: "PromQL", PromQL: &configv1.PromQLClusterCondition{PromQL: query}}})
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				t.Skip("the query ran out of time")
			}
			if err.Error() == "" {
				t.Fatal("an evaluation error without a message")
			}
			return
		}
		// The evaluator decided: the engine answered exactly one sample,
		// 0 or 1, and match says which.
		q, qerr := m.engine.NewInstantQuery(ctx, m.db, nil, query, at)
		if qerr != nil {
			t.Fatalf("the evaluator decided %v on a query the engine refuses: %v", match, qerr)
		}
		defer q.Close()
		res := q.Exec(ctx)
		if res.Err != nil {
			return
		}
		if v, ok := res.Value.(promql.Vector); !ok || len(v) != 1 || v[0].F != map[bool]float64{true: 1, false: 0}[match] {
			t.Fatalf("decided %v, but the engine answers %v", match, res.Value)
		}
	})
}
