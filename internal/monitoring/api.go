package monitoring

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/annotations"
)

// Prometheus's API error types and their HTTP statuses.
const (
	errBadData   = "bad_data"
	errExec      = "execution"
	errTimeout   = "timeout"
	errCanceled  = "canceled"
	errInternal  = "internal"
	errNotFound  = "not_found"
	errUnavail   = "unavailable"
	maxRangeStep = 11000 // points per series in a range query, as Prometheus
)

type apiError struct {
	typ string
	err error
}

func (e *apiError) Error() string { return e.err.Error() }

func badData(format string, a ...any) *apiError {
	return &apiError{typ: errBadData, err: fmt.Errorf(format, a...)}
}

type response struct {
	Status    string   `json:"status"`
	Data      any      `json:"data,omitempty"`
	ErrorType string   `json:"errorType,omitempty"`
	Error     string   `json:"error,omitempty"`
	Warnings  []string `json:"warnings,omitempty"`
	Infos     []string `json:"infos,omitempty"`
}

// Handler serves Prometheus's HTTP API under /api/v1/: query,
// query_range, series, labels, label/NAME/values, alerts, rules, targets
// and status/buildinfo.
func (m *Monitor) Handler() http.Handler {
	mux := http.NewServeMux()
	type endpoint func(r *http.Request) (any, annotations.Annotations, *apiError)
	handle := func(path string, methods []string, fn endpoint) {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			if readsTSDB[path] {
				release, ok := m.admitQuery(r.Context())
				if !ok {
					w.Header().Set("Retry-After", "1")
					writeJSON(w, http.StatusServiceUnavailable, response{Status: "error", ErrorType: errUnavail,
						Error: fmt.Sprintf("too many queries: %d are evaluating; try again", cap(m.queries))})
					return
				}
				defer release()
			}
			allowed := false
			for _, meth := range methods {
				allowed = allowed || r.Method == meth
			}
			if !allowed {
				w.Header().Set("Allow", strings.Join(methods, ", "))
				writeJSON(w, http.StatusMethodNotAllowed, response{Status: "error", ErrorType: errBadData, Error: "method " + r.Method + " is not allowed; use " + strings.Join(methods, " or ")})
				return
			}
			if err := r.ParseForm(); err != nil {
				writeJSON(w, http.StatusBadRequest, response{Status: "error", ErrorType: errBadData, Error: err.Error()})
				return
			}
			data, warnings, apiErr := fn(r)
			if apiErr != nil {
				writeJSON(w, errStatus(apiErr.typ), response{Status: "error", ErrorType: apiErr.typ, Error: apiErr.err.Error(), Data: data})
				return
			}
			warns, infos := warnings.AsStrings("", 10, 10)
			writeJSON(w, http.StatusOK, response{Status: "success", Data: data, Warnings: warns, Infos: infos})
		})
	}
	getPost := []string{http.MethodGet, http.MethodPost}
	handle("/api/v1/query", getPost, m.query)
	handle("/api/v1/query_range", getPost, m.queryRange)
	handle("/api/v1/series", getPost, m.series)
	handle("/api/v1/labels", getPost, m.labelNames)
	handle("/api/v1/label/{name}/values", []string{http.MethodGet}, m.labelValues)
	handle("/api/v1/alerts", []string{http.MethodGet}, m.alerts)
	handle("/api/v1/rules", []string{http.MethodGet}, m.rulesAPI)
	handle("/api/v1/targets", []string{http.MethodGet}, m.targetsAPI)
	handle("/api/v1/metadata", []string{http.MethodGet}, m.metadata)
	handle("/api/v1/status/buildinfo", []string{http.MethodGet}, func(*http.Request) (any, annotations.Annotations, *apiError) {
		return map[string]string{"version": "3.0.0", "revision": "capstan", "branch": "", "goVersion": ""}, nil, nil
	})
	return mux
}

// readsTSDB are the endpoints that evaluate or read the TSDB, each
// holding a query slot while it does.
var readsTSDB = map[string]bool{
	"/api/v1/query": true, "/api/v1/query_range": true, "/api/v1/series": true,
	"/api/v1/labels": true, "/api/v1/label/{name}/values": true,
}

// admitQuery takes a query slot, waiting QueryQueueWait at most; ok is
// false when none came free.
func (m *Monitor) admitQuery(ctx context.Context) (release func(), ok bool) {
	release = func() { <-m.queries }
	select {
	case m.queries <- struct{}{}:
		return release, true
	default:
	}
	t := time.NewTimer(QueryQueueWait)
	defer t.Stop()
	select {
	case m.queries <- struct{}{}:
		return release, true
	case <-t.C:
	case <-ctx.Done():
	}
	return nil, false
}

func errStatus(typ string) int {
	switch typ {
	case errBadData:
		return http.StatusBadRequest
	case errExec:
		return http.StatusUnprocessableEntity
	case errCanceled, errTimeout, errUnavail:
		return http.StatusServiceUnavailable
	case errNotFound:
		return http.StatusNotFound
	}
	return http.StatusInternalServerError
}

func writeJSON(w http.ResponseWriter, status int, resp response) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(resp)
}

// parseTime reads a time as Prometheus's API does: Unix seconds with a
// fraction, or RFC 3339.
func parseTime(s string) (time.Time, error) {
	if t, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(t) || math.IsInf(t, 0) {
			return time.Time{}, fmt.Errorf("cannot parse %q to a valid timestamp", s)
		}
		sec, frac := math.Modf(t)
		return time.Unix(int64(sec), int64(math.Round(frac*1000))*int64(time.Millisecond)).UTC(), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("cannot parse %q to a valid timestamp", s)
}

func parseTimeParam(r *http.Request, name string, def time.Time) (time.Time, *apiError) {
	v := r.Form.Get(name)
	if v == "" {
		return def, nil
	}
	t, err := parseTime(v)
	if err != nil {
		return time.Time{}, badData("invalid parameter %q: %v", name, err)
	}
	return t, nil
}

// parseDuration reads a duration as Prometheus's API does: seconds, or a
// Prometheus duration (5m, 1h30m).
func parseDuration(s string) (time.Duration, error) {
	if d, err := strconv.ParseFloat(s, 64); err == nil {
		ts := d * float64(time.Second)
		if ts > float64(math.MaxInt64) || ts < float64(math.MinInt64) || math.IsNaN(ts) {
			return 0, fmt.Errorf("cannot parse %q to a valid duration: it overflows int64", s)
		}
		return time.Duration(ts), nil
	}
	if d, err := model.ParseDuration(s); err == nil {
		return time.Duration(d), nil
	}
	return 0, fmt.Errorf("cannot parse %q to a valid duration", s)
}

// queryContext applies the request's timeout parameter.
func queryContext(r *http.Request) (context.Context, context.CancelFunc, *apiError) {
	if to := r.Form.Get("timeout"); to != "" {
		d, err := parseDuration(to)
		if err != nil {
			return nil, nil, badData("invalid parameter \"timeout\": %v", err)
		}
		ctx, cancel := context.WithTimeout(r.Context(), d)
		return ctx, cancel, nil
	}
	ctx, cancel := context.WithCancel(r.Context())
	return ctx, cancel, nil
}

type queryData struct {
	ResultType parser.ValueType `json:"resultType"`
	Result     parser.Value     `json:"result"`
}

// emptyAsList makes an empty vector or matrix a JSON [], as Prometheus
// answers, not null.
func emptyAsList(v parser.Value) parser.Value {
	switch x := v.(type) {
	case promql.Vector:
		if x == nil {
			return promql.Vector{}
		}
	case promql.Matrix:
		if x == nil {
			return promql.Matrix{}
		}
	}
	return v
}

func execError(err error) *apiError {
	var (
		canceled promql.ErrQueryCanceled
		timeout  promql.ErrQueryTimeout
		storage  promql.ErrStorage
	)
	switch {
	case errors.As(err, &canceled):
		return &apiError{typ: errCanceled, err: err}
	case errors.As(err, &timeout):
		return &apiError{typ: errTimeout, err: err}
	case errors.As(err, &storage):
		return &apiError{typ: errInternal, err: err}
	case errors.Is(err, context.Canceled):
		return &apiError{typ: errCanceled, err: err}
	case errors.Is(err, context.DeadlineExceeded):
		return &apiError{typ: errTimeout, err: err}
	}
	return &apiError{typ: errExec, err: err}
}

func (m *Monitor) query(r *http.Request) (any, annotations.Annotations, *apiError) {
	qs := r.Form.Get("query")
	if strings.TrimSpace(qs) == "" {
		return nil, nil, badData("invalid parameter \"query\": query is required")
	}
	ts, apiErr := parseTimeParam(r, "time", time.Now())
	if apiErr != nil {
		return nil, nil, apiErr
	}
	ctx, cancel, apiErr := queryContext(r)
	if apiErr != nil {
		return nil, nil, apiErr
	}
	defer cancel()
	q, err := m.engine.NewInstantQuery(ctx, m.db, nil, qs, ts)
	if err != nil {
		return nil, nil, badData("invalid parameter \"query\": %v", err)
	}
	defer q.Close()
	res := q.Exec(ctx)
	if res.Err != nil {
		return nil, res.Warnings, execError(res.Err)
	}
	return queryData{ResultType: res.Value.Type(), Result: emptyAsList(res.Value)}, res.Warnings, nil
}

func (m *Monitor) queryRange(r *http.Request) (any, annotations.Annotations, *apiError) {
	qs := r.Form.Get("query")
	if strings.TrimSpace(qs) == "" {
		return nil, nil, badData("invalid parameter \"query\": query is required")
	}
	for _, p := range []string{"start", "end", "step"} {
		if r.Form.Get(p) == "" {
			return nil, nil, badData("invalid parameter %q: %s is required", p, p)
		}
	}
	start, apiErr := parseTimeParam(r, "start", time.Time{})
	if apiErr != nil {
		return nil, nil, apiErr
	}
	end, apiErr := parseTimeParam(r, "end", time.Time{})
	if apiErr != nil {
		return nil, nil, apiErr
	}
	if end.Before(start) {
		return nil, nil, badData("invalid parameter \"end\": end timestamp must not be before start time")
	}
	step, err := parseDuration(r.Form.Get("step"))
	if err != nil {
		return nil, nil, badData("invalid parameter \"step\": %v", err)
	}
	if step <= 0 {
		return nil, nil, badData("invalid parameter \"step\": zero or negative query resolution step widths are not accepted. Try a positive integer")
	}
	if end.Sub(start)/step > maxRangeStep {
		return nil, nil, badData("exceeded maximum resolution of %d points per timeseries. Try decreasing the query resolution (?step=XX)", maxRangeStep)
	}
	ctx, cancel, apiErr := queryContext(r)
	if apiErr != nil {
		return nil, nil, apiErr
	}
	defer cancel()
	q, err := m.engine.NewRangeQuery(ctx, m.db, nil, qs, start, end, step)
	if err != nil {
		return nil, nil, badData("invalid parameter \"query\": %v", err)
	}
	defer q.Close()
	res := q.Exec(ctx)
	if res.Err != nil {
		return nil, res.Warnings, execError(res.Err)
	}
	return queryData{ResultType: res.Value.Type(), Result: emptyAsList(res.Value)}, res.Warnings, nil
}

// matchers reads match[] selectors; required says whether one is needed.
func matchers(r *http.Request, required bool) ([][]*labels.Matcher, *apiError) {
	raw := r.Form["match[]"]
	if required && len(raw) == 0 {
		return nil, badData("no match[] parameter provided")
	}
	var out [][]*labels.Matcher
	for _, s := range raw {
		ms, err := defaultParser.ParseMetricSelector(s)
		if err != nil {
			return nil, badData("invalid parameter \"match[]\": %v", err)
		}
		out = append(out, ms)
	}
	return out, nil
}

// timeRange reads start and end, defaulting to all of time.
func timeRange(r *http.Request) (int64, int64, *apiError) {
	start, apiErr := parseTimeParam(r, "start", time.UnixMilli(math.MinInt64/2))
	if apiErr != nil {
		return 0, 0, apiErr
	}
	end, apiErr := parseTimeParam(r, "end", time.UnixMilli(math.MaxInt64/2))
	if apiErr != nil {
		return 0, 0, apiErr
	}
	if end.Before(start) {
		return 0, 0, badData("invalid parameter \"end\": end timestamp must not be before start time")
	}
	return start.UnixMilli(), end.UnixMilli(), nil
}

func (m *Monitor) series(r *http.Request) (any, annotations.Annotations, *apiError) {
	sets, apiErr := matchers(r, true)
	if apiErr != nil {
		return nil, nil, apiErr
	}
	mint, maxt, apiErr := timeRange(r)
	if apiErr != nil {
		return nil, nil, apiErr
	}
	q, err := m.db.Querier(mint, maxt)
	if err != nil {
		return nil, nil, &apiError{typ: errInternal, err: err}
	}
	defer q.Close()
	hints := &storage.SelectHints{Start: mint, End: maxt, Func: "series"}
	var sss []storage.SeriesSet
	for _, ms := range sets {
		sss = append(sss, q.Select(r.Context(), len(sets) > 1, hints, ms...))
	}
	set := storage.NewMergeSeriesSet(sss, 0, storage.ChainedSeriesMerge)
	out := []labels.Labels{}
	for set.Next() {
		out = append(out, set.At().Labels())
	}
	if err := set.Err(); err != nil {
		return nil, set.Warnings(), &apiError{typ: errExec, err: err}
	}
	return out, set.Warnings(), nil
}

func (m *Monitor) labelNames(r *http.Request) (any, annotations.Annotations, *apiError) {
	return m.labelStrings(r, func(ctx context.Context, q storage.Querier, ms []*labels.Matcher) ([]string, annotations.Annotations, error) {
		return q.LabelNames(ctx, nil, ms...)
	})
}

func (m *Monitor) labelValues(r *http.Request) (any, annotations.Annotations, *apiError) {
	name := r.PathValue("name")
	if !model.UTF8Validation.IsValidLabelName(name) {
		return nil, nil, badData("invalid label name: %q", name)
	}
	return m.labelStrings(r, func(ctx context.Context, q storage.Querier, ms []*labels.Matcher) ([]string, annotations.Annotations, error) {
		return q.LabelValues(ctx, name, nil, ms...)
	})
}

// labelStrings answers labels and label values: what list finds for each
// match[] selector (or for every series without one) in start..end,
// merged and sorted.
func (m *Monitor) labelStrings(r *http.Request, list func(context.Context, storage.Querier, []*labels.Matcher) ([]string, annotations.Annotations, error)) (any, annotations.Annotations, *apiError) {
	sets, apiErr := matchers(r, false)
	if apiErr != nil {
		return nil, nil, apiErr
	}
	mint, maxt, apiErr := timeRange(r)
	if apiErr != nil {
		return nil, nil, apiErr
	}
	q, err := m.db.Querier(mint, maxt)
	if err != nil {
		return nil, nil, &apiError{typ: errInternal, err: err}
	}
	defer q.Close()
	if len(sets) == 0 {
		sets = [][]*labels.Matcher{nil}
	}
	found := map[string]bool{}
	var warns annotations.Annotations
	for _, ms := range sets {
		vals, w, err := list(r.Context(), q, ms)
		if err != nil {
			return nil, nil, &apiError{typ: errExec, err: err}
		}
		warns.Merge(w)
		for _, v := range vals {
			found[v] = true
		}
	}
	return sortedKeys(found), warns, nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Alert is an alert as /api/v1/alerts answers it.
type Alert struct {
	Labels          labels.Labels `json:"labels"`
	Annotations     labels.Labels `json:"annotations"`
	State           string        `json:"state"`
	ActiveAt        *time.Time    `json:"activeAt,omitempty"`
	KeepFiringSince *time.Time    `json:"keepFiringSince,omitempty"`
	Value           string        `json:"value"`
}

func apiAlerts(in []*rules.Alert) []*Alert {
	out := make([]*Alert, 0, len(in))
	for _, a := range in {
		al := &Alert{Labels: a.Labels, Annotations: a.Annotations, State: a.State.String(),
			ActiveAt: &a.ActiveAt, Value: strconv.FormatFloat(a.Value, 'e', -1, 64)}
		if !a.KeepFiringSince.IsZero() {
			al.KeepFiringSince = &a.KeepFiringSince
		}
		out = append(out, al)
	}
	return out
}

// Alerts are the pending and firing alerts now.
func (m *Monitor) Alerts() []*Alert {
	var all []*rules.Alert
	for _, r := range m.rules.AlertingRules() {
		all = append(all, r.ActiveAlerts()...)
	}
	out := apiAlerts(all)
	sort.SliceStable(out, func(i, j int) bool { return labels.Compare(out[i].Labels, out[j].Labels) < 0 })
	return out
}

func (m *Monitor) alerts(*http.Request) (any, annotations.Annotations, *apiError) {
	return map[string]any{"alerts": m.Alerts()}, nil, nil
}

type ruleGroup struct {
	Name           string    `json:"name"`
	File           string    `json:"file"`
	Rules          []any     `json:"rules"`
	Interval       float64   `json:"interval"`
	Limit          int       `json:"limit"`
	EvaluationTime float64   `json:"evaluationTime"`
	LastEvaluation time.Time `json:"lastEvaluation"`
}

type alertingRule struct {
	State          string        `json:"state"`
	Name           string        `json:"name"`
	Query          string        `json:"query"`
	Duration       float64       `json:"duration"`
	KeepFiringFor  float64       `json:"keepFiringFor"`
	Labels         labels.Labels `json:"labels"`
	Annotations    labels.Labels `json:"annotations"`
	Alerts         []*Alert      `json:"alerts"`
	Health         string        `json:"health"`
	LastError      string        `json:"lastError,omitempty"`
	EvaluationTime float64       `json:"evaluationTime"`
	LastEvaluation time.Time     `json:"lastEvaluation"`
	Type           string        `json:"type"`
}

type recordingRule struct {
	Name           string        `json:"name"`
	Query          string        `json:"query"`
	Labels         labels.Labels `json:"labels,omitempty"`
	Health         string        `json:"health"`
	LastError      string        `json:"lastError,omitempty"`
	EvaluationTime float64       `json:"evaluationTime"`
	LastEvaluation time.Time     `json:"lastEvaluation"`
	Type           string        `json:"type"`
}

func (m *Monitor) rulesAPI(r *http.Request) (any, annotations.Annotations, *apiError) {
	typ := strings.ToLower(r.Form.Get("type"))
	if typ != "" && typ != "alert" && typ != "record" {
		return nil, nil, badData("invalid parameter \"type\": not supported value %q", typ)
	}
	groups := []ruleGroup{}
	for _, g := range m.rules.RuleGroups() {
		rg := ruleGroup{Name: g.Name(), File: strings.TrimPrefix(g.File(), embeddedPrefix), Rules: []any{},
			Interval: g.Interval().Seconds(), Limit: g.Limit(),
			EvaluationTime: g.GetEvaluationTime().Seconds(), LastEvaluation: g.GetLastEvaluation()}
		for _, rule := range g.Rules() {
			lastErr := ""
			if err := rule.LastError(); err != nil {
				lastErr = err.Error()
			}
			switch rule := rule.(type) {
			case *rules.AlertingRule:
				if typ == "record" {
					continue
				}
				rg.Rules = append(rg.Rules, alertingRule{State: rule.State().String(), Name: rule.Name(),
					Query: rule.Query().String(), Duration: rule.HoldDuration().Seconds(), KeepFiringFor: rule.KeepFiringFor().Seconds(),
					Labels: rule.Labels(), Annotations: rule.Annotations(), Alerts: apiAlerts(rule.ActiveAlerts()),
					Health: string(rule.Health()), LastError: lastErr, EvaluationTime: rule.GetEvaluationDuration().Seconds(),
					LastEvaluation: rule.GetEvaluationTimestamp(), Type: "alerting"})
			case *rules.RecordingRule:
				if typ == "alert" {
					continue
				}
				rg.Rules = append(rg.Rules, recordingRule{Name: rule.Name(), Query: rule.Query().String(), Labels: rule.Labels(),
					Health: string(rule.Health()), LastError: lastErr, EvaluationTime: rule.GetEvaluationDuration().Seconds(),
					LastEvaluation: rule.GetEvaluationTimestamp(), Type: "recording"})
			}
		}
		if typ == "" || len(rg.Rules) > 0 {
			groups = append(groups, rg)
		}
	}
	return map[string]any{"groups": groups}, nil, nil
}

type target struct {
	DiscoveredLabels   map[string]string `json:"discoveredLabels"`
	Labels             map[string]string `json:"labels"`
	ScrapePool         string            `json:"scrapePool"`
	ScrapeURL          string            `json:"scrapeUrl"`
	LastError          string            `json:"lastError"`
	LastScrape         time.Time         `json:"lastScrape"`
	LastScrapeDuration float64           `json:"lastScrapeDuration"`
	Health             string            `json:"health"`
}

func (m *Monitor) targetsAPI(*http.Request) (any, annotations.Annotations, *apiError) {
	active := []target{}
	pools := m.scrape.TargetsActive()
	names := make([]string, 0, len(pools))
	for n := range pools {
		names = append(names, n)
	}
	sort.Strings(names)
	lb := labels.NewBuilder(labels.EmptyLabels())
	for _, pool := range names {
		for _, t := range pools[pool] {
			lastErr := ""
			if err := t.LastError(); err != nil {
				lastErr = err.Error()
			}
			active = append(active, target{DiscoveredLabels: t.DiscoveredLabels(lb).Map(), Labels: t.Labels(lb).Map(),
				ScrapePool: pool, ScrapeURL: t.URL().String(), LastError: lastErr, LastScrape: t.LastScrape(),
				LastScrapeDuration: t.LastScrapeDuration().Seconds(), Health: string(t.Health())})
		}
	}
	return map[string]any{"activeTargets": active, "droppedTargets": []target{}}, nil, nil
}

type metadataEntry struct {
	Type string `json:"type"`
	Help string `json:"help"`
	Unit string `json:"unit"`
}

// metadata answers /api/v1/metadata: each metric family's type, help and
// unit as the targets exposed them (metric= names one, limit= caps).
func (m *Monitor) metadata(r *http.Request) (any, annotations.Annotations, *apiError) {
	limit := -1
	if s := r.Form.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			return nil, nil, badData("invalid parameter \"limit\": %v", err)
		}
		limit = n
	}
	name := r.Form.Get("metric")
	out := map[string][]metadataEntry{}
	for _, ts := range m.scrape.TargetsActive() {
		for _, t := range ts {
			for _, md := range t.ListMetadata() {
				if name != "" && md.MetricFamily != name {
					continue
				}
				e := metadataEntry{Type: string(md.Type), Help: md.Help, Unit: md.Unit}
				known := false
				for _, have := range out[md.MetricFamily] {
					known = known || have == e
				}
				if !known {
					out[md.MetricFamily] = append(out[md.MetricFamily], e)
				}
			}
		}
	}
	if limit >= 0 && len(out) > limit {
		names := make([]string, 0, len(out))
		for n := range out {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names[limit:] {
			delete(out, n)
		}
	}
	return out, nil, nil
}
