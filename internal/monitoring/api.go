package monitoring

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/grafana/regexp"
	"github.com/prometheus/common/route"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/util/notifications"
	v1 "github.com/prometheus/prometheus/web/api/v1"
)

// Handler serves Prometheus's HTTP API under /api/v1/, as Prometheus's
// own web/api/v1 does (it is that code): queries, series, labels and
// their values, exemplars, metadata, targets (active and dropped),
// scrape pools, rules and alerts with their filters, the status pages
// (config, flags, runtime information, build information, TSDB, WAL
// replay), format_query and parse_query. The admin endpoints, remote
// read and write, OTLP and Alertmanager discovery are off, as they are in
// a Prometheus started without them. /-/healthy and /-/ready answer as
// Prometheus's do.
//
// Before Run the API answers 503, as a Prometheus still starting does.
// The endpoints that evaluate or read the TSDB each hold a query slot
// while they do: MaxConcurrentQueries at once, a query waiting
// QueryQueueWait for one at most.
func (m *Monitor) Handler() http.Handler {
	// One API, however many listeners serve it: it registers metrics of
	// its own.
	m.apiOnce.Do(func() { m.api = m.newAPI() })
	return m.api
}

func (m *Monitor) newAPI() http.Handler {
	api := v1.NewAPI(m.engine, m.db, nil, m.db,
		func(context.Context) v1.ScrapePoolsRetriever { return m.scrape },
		func(context.Context) v1.TargetRetriever { return m.scrape },
		func(context.Context) v1.AlertmanagerRetriever { return noAlertmanagers{} },
		func() config.Config { return *m.cfg },
		m.flags(),
		v1.GlobalURLOptions{ListenAddress: m.local.Addr().String(), Host: m.local.Addr().String(), Scheme: "http"},
		m.ready,
		adminStats{m.db, m.dbStats},
		m.opts.Dir,
		false,    // admin API
		false, 0, // search
		m.opts.Logger,
		func(context.Context) v1.RulesRetriever { return m.rules },
		0, 0, 0, // remote read
		false, // agent
		regexp.MustCompile(`^$`),
		m.runtimeInfo,
		buildInfo(),
		func() []notifications.Notification { return nil },
		func() (<-chan notifications.Notification, func(), bool) { return nil, func() {}, false },
		m.reg, m.reg,
		nil,        // stats renderer
		false, nil, // remote write receiver
		false, false, false, // OTLP
		0,            // the engine's lookback delta
		false, false, // type and unit labels, metadata
		nil, // error codes
		nil, // feature registry
		v1.OpenAPIOptions{},
		defaultParser,
		false,
		queryTimeout,
	)
	router := route.New()
	api.Register(router.WithPrefix("/api/v1"))
	router.Get("/-/healthy", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "Prometheus Server is Healthy.")
	})
	router.Get("/-/ready", m.ready(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "Prometheus Server is Ready.")
	}))
	return m.admit(noRemoteRead(router))
}

// noRemoteRead answers remote read 404: with no read slots the API would
// hold each such request until its client left, a goroutine and a
// connection pinned on both listeners per request.
func noRemoteRead(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/read" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintln(w, `{"status":"error","errorType":"not_found","error":"remote read is not served"}`)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// queryTimeout is how long a query may evaluate, as Prometheus's
// --query.timeout default.
const queryTimeout = 2 * time.Minute

// readsTSDB are the API paths that evaluate or read the TSDB.
var readsTSDB = []string{"/api/v1/query", "/api/v1/query_range", "/api/v1/query_exemplars", "/api/v1/series", "/api/v1/labels", "/api/v1/label/"}

// admit makes each request to an endpoint that reads the TSDB hold a
// query slot while it is served, and answers 503 when none comes free.
func (m *Monitor) admit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !m.running.Load() {
			// Not started, or stopped: the API answers 503 itself.
			next.ServeHTTP(w, r)
			return
		}
		for _, p := range readsTSDB {
			if r.URL.Path == p || (strings.HasSuffix(p, "/") && strings.HasPrefix(r.URL.Path, p)) {
				release, ok := m.admitQuery(r.Context())
				if !ok {
					w.Header().Set("Retry-After", "1")
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusServiceUnavailable)
					_ = json.NewEncoder(w).Encode(map[string]string{"status": "error", "errorType": "unavailable",
						"error": fmt.Sprintf("too many queries: %d are evaluating; try again", cap(m.queries))})
					return
				}
				defer release()
				break
			}
		}
		next.ServeHTTP(w, r)
	})
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

// ready answers 503 until the monitor runs, as Prometheus's API does
// until its storage and managers are up.
func (m *Monitor) ready(f http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !m.running.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "Service Unavailable")
			return
		}
		f(w, r)
	}
}

// flags are what /api/v1/status/flags reports: the settings capstan runs
// its Prometheus with, under Prometheus's flag names.
func (m *Monitor) flags() map[string]string {
	return map[string]string{
		"storage.tsdb.path":                m.opts.Dir,
		"storage.tsdb.retention.time":      m.opts.Retention.String(),
		"storage.tsdb.retention.size":      fmt.Sprint(m.opts.RetentionSize),
		"storage.tsdb.wal-compression":     "true",
		"query.timeout":                    queryTimeout.String(),
		"query.max-samples":                fmt.Sprint(MaxQuerySamples),
		"query.max-concurrency":            fmt.Sprint(MaxConcurrentQueries),
		"rules.alert.for-outage-tolerance": "1h",
		"rules.alert.for-grace-period":     "10m",
		"web.enable-admin-api":             "false",
	}
}

// runtimeInfo is /api/v1/status/runtimeinfo's answer.
func (m *Monitor) runtimeInfo() (v1.RuntimeInfo, error) {
	cwd, _ := os.Getwd()
	return v1.RuntimeInfo{
		StartTime:           m.started,
		CWD:                 cwd,
		GoroutineCount:      runtime.NumGoroutine(),
		GOMAXPROCS:          runtime.GOMAXPROCS(0),
		GOMEMLIMIT:          debug.SetMemoryLimit(-1),
		GOGC:                os.Getenv("GOGC"),
		GODEBUG:             os.Getenv("GODEBUG"),
		StorageRetention:    m.opts.Retention.String(),
		ReloadConfigSuccess: true,
	}, nil
}

// PrometheusModule is the version of the Prometheus Go module capstan
// embeds (go.mod's; a test holds them equal).
const PrometheusModule = "v0.316.0"

// buildInfo is the Prometheus capstan embeds, as
// /api/v1/status/buildinfo reports a Prometheus's own.
func buildInfo() *v1.PrometheusVersion {
	return &v1.PrometheusVersion{Version: prometheusVersion(PrometheusModule), Revision: PrometheusModule, Branch: "", GoVersion: runtime.Version()}
}

// prometheusVersion maps the Go module's version to Prometheus's:
// v0.MNN.P is M.NN.P.
func prometheusVersion(module string) string {
	var minor, patch int
	if _, err := fmt.Sscanf(module, "v0.%d.%d", &minor, &patch); err != nil || minor < 100 {
		return strings.TrimPrefix(module, "v")
	}
	return fmt.Sprintf("%d.%d.%d", minor/100, minor%100, patch)
}

// noAlertmanagers: capstan sends its alerts nowhere.
type noAlertmanagers struct{}

func (noAlertmanagers) Alertmanagers() []*url.URL        { return nil }
func (noAlertmanagers) DroppedAlertmanagers() []*url.URL { return nil }

// adminStats gives the API the TSDB's statistics as Prometheus's
// storage does (the admin endpoints that change it are off).
type adminStats struct {
	db    *tsdb.DB
	stats *tsdb.DBStats
}

func (a adminStats) CleanTombstones() error { return a.db.CleanTombstones() }
func (a adminStats) Delete(ctx context.Context, mint, maxt int64, ms ...*labels.Matcher) error {
	return a.db.Delete(ctx, mint, maxt, ms...)
}
func (a adminStats) Snapshot(dir string, withHead bool) error { return a.db.Snapshot(dir, withHead) }
func (a adminStats) Stats(statsByLabelName string, limit int) (*tsdb.Stats, error) {
	return a.db.Head().Stats(statsByLabelName, limit), nil
}
func (a adminStats) WALReplayStatus() (tsdb.WALReplayStatus, error) {
	return a.stats.Head.WALReplayStatus.GetWALReplayStatus(), nil
}
func (a adminStats) BlockMetas() ([]tsdb.BlockMeta, error) { return a.db.BlockMetas(), nil }
