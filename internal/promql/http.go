package promql

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Samples turns what the gatherers have now into samples: counters,
// gauges and untyped metrics by name; summaries and histograms as their
// _sum, _count and _bucket{le} (or quantile) series.
func Samples(g prometheus.Gatherer) ([]Sample, error) {
	families, err := g.Gather()
	var out []Sample
	for _, f := range families {
		name := f.GetName()
		for _, m := range f.GetMetric() {
			base := Labels{}
			for _, lp := range m.GetLabel() {
				base[lp.GetName()] = lp.GetValue()
			}
			add := func(n string, v float64, extra ...string) {
				l := copyLabels(base)
				l["__name__"] = n
				for i := 0; i+1 < len(extra); i += 2 {
					l[extra[i]] = extra[i+1]
				}
				out = append(out, Sample{Labels: l, Value: v})
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				add(name, m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				add(name, m.GetGauge().GetValue())
			case dto.MetricType_UNTYPED:
				add(name, m.GetUntyped().GetValue())
			case dto.MetricType_SUMMARY:
				s := m.GetSummary()
				add(name+"_sum", s.GetSampleSum())
				add(name+"_count", float64(s.GetSampleCount()))
				for _, q := range s.GetQuantile() {
					add(name, q.GetValue(), "quantile", strconv.FormatFloat(q.GetQuantile(), 'g', -1, 64))
				}
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				add(name+"_sum", h.GetSampleSum())
				add(name+"_count", float64(h.GetSampleCount()))
				for _, b := range h.GetBucket() {
					add(name+"_bucket", float64(b.GetCumulativeCount()), "le", strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64))
				}
				add(name+"_bucket", float64(h.GetSampleCount()), "le", "+Inf")
			}
		}
	}
	return out, err
}

type apiResponse struct {
	Status    string `json:"status"`
	Data      any    `json:"data,omitempty"`
	ErrorType string `json:"errorType,omitempty"`
	Error     string `json:"error,omitempty"`
}

type vectorSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

func formatValue(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// Handler serves Prometheus's instant query API (GET or POST
// /api/v1/query?query=...) over what the gatherer has when asked.
func Handler(g prometheus.Gatherer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reply := func(status int, resp apiResponse) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(resp)
		}
		if r.Method != http.MethodGet && r.Method != http.MethodPost {
			reply(http.StatusMethodNotAllowed, apiResponse{Status: "error", ErrorType: "bad_data", Error: "only GET and POST are served"})
			return
		}
		if err := r.ParseForm(); err != nil {
			reply(http.StatusBadRequest, apiResponse{Status: "error", ErrorType: "bad_data", Error: err.Error()})
			return
		}
		q := r.Form.Get("query")
		if q == "" {
			reply(http.StatusBadRequest, apiResponse{Status: "error", ErrorType: "bad_data", Error: "query is required"})
			return
		}
		at := float64(time.Now().UnixMilli()) / 1000
		if t := r.Form.Get("time"); t != "" {
			v, err := strconv.ParseFloat(t, 64)
			if err != nil {
				reply(http.StatusBadRequest, apiResponse{Status: "error", ErrorType: "bad_data", Error: "invalid time " + strconv.Quote(t)})
				return
			}
			at = v
		}
		n, err := Parse(q)
		if err != nil {
			reply(http.StatusBadRequest, apiResponse{Status: "error", ErrorType: "bad_data", Error: err.Error()})
			return
		}
		samples, err := Samples(g)
		if err != nil && len(samples) == 0 {
			reply(http.StatusServiceUnavailable, apiResponse{Status: "error", ErrorType: "unavailable", Error: err.Error()})
			return
		}
		v, err := Eval(n, samples)
		if err != nil {
			reply(http.StatusUnprocessableEntity, apiResponse{Status: "error", ErrorType: "execution", Error: err.Error()})
			return
		}
		if v.IsScalar {
			reply(http.StatusOK, apiResponse{Status: "success", Data: map[string]any{"resultType": "scalar", "result": [2]any{at, formatValue(v.Scalar)}}})
			return
		}
		result := make([]vectorSample, 0, len(v.Vector))
		for _, s := range v.Vector {
			result = append(result, vectorSample{Metric: s.Labels, Value: [2]any{at, formatValue(s.Value)}})
		}
		reply(http.StatusOK, apiResponse{Status: "success", Data: map[string]any{"resultType": "vector", "result": result}})
	})
}
