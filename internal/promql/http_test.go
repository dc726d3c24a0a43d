package promql

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
)

// The Prometheus client the CVO uses talks to the handler as to Prometheus.
func TestHandlerAnswersThePrometheusClient(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cluster_infrastructure_provider"}, []string{"type"})
	g.WithLabelValues("None").Set(1)
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "loop_seconds", Buckets: []float64{1, 10}})
	h.Observe(0.5)
	h.Observe(5)
	reg.MustRegister(g, h)
	srv := httptest.NewServer(Handler(reg))
	defer srv.Close()
	client, err := promapi.NewClient(promapi.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	api := promv1.NewAPI(client)
	ctx := context.Background()
	for q, want := range map[string]string{
		`group by (type) (cluster_infrastructure_provider{_id="",type="None"}) or 0 * group by (type) (cluster_infrastructure_provider{_id=""})`: `{type="None"} => 1`,
		`loop_seconds_bucket{le="1"}`: `loop_seconds_bucket{le="1"} => 1`,
		`loop_seconds_count`:          `loop_seconds_count => 2`,
	} {
		v, _, err := api.Query(ctx, q, time.Now())
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		vec, ok := v.(model.Vector)
		if !ok || len(vec) != 1 || !strings.HasPrefix(vec[0].String(), want) {
			t.Errorf("%s = %v, want %s", q, v, want)
		}
	}
	if v, _, err := api.Query(ctx, "1 + 1", time.Now()); err != nil || v.Type() != model.ValScalar || v.String() != "scalar: 2 @["+v.(*model.Scalar).Timestamp.String()+"]" {
		t.Errorf("1 + 1 = %v, %v", v, err)
	}
	if _, _, err := api.Query(ctx, "rate(x[5m])", time.Now()); err == nil || !strings.Contains(err.Error(), `bad_data: function "rate" is not supported`) {
		t.Errorf("an unsupported query: %v", err)
	}
	if _, _, err := api.Query(ctx, "1 > 2", time.Now()); err == nil || !strings.Contains(err.Error(), "execution: comparisons between scalars") {
		t.Errorf("a query that fails: %v", err)
	}
}
