// Package monitoring is capstan's Prometheus: the Prometheus project's own
// TSDB, scrape manager, PromQL engine and rules manager, embedded. It
// scrapes every component capstan runs (and whatever a Prometheus
// configuration file names), keeps the series in the data dir, evaluates
// OpenShift's alerting rules, and serves the Prometheus HTTP API the
// cluster version operator, `oc adm upgrade status` and Grafana read.
package monitoring

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/discovery"
	_ "github.com/prometheus/prometheus/discovery/file" // file_sd_configs in a scrape config file
	"github.com/prometheus/prometheus/discovery/targetgroup"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/scrape"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/util/compression"
	"go.yaml.in/yaml/v2"
)

// Defaults, as Prometheus's and OpenShift's.
const (
	// DefaultRetention is how long Prometheus keeps samples unless told.
	DefaultRetention = 15 * 24 * time.Hour
	// DefaultScrapeInterval is how often capstan scrapes its components.
	DefaultScrapeInterval = 15 * time.Second
	// DefaultEvaluationInterval is how often the rules are evaluated.
	DefaultEvaluationInterval = 15 * time.Second

	// MaxConcurrentQueries is how many API queries evaluate at once
	// (Prometheus's --query.max-concurrency default). One more waits up
	// to QueryQueueWait for a slot, then is refused with 503: the
	// Prometheus shares its process with the control plane, which a
	// flood of queries must not starve.
	MaxConcurrentQueries = 20
	QueryQueueWait       = time.Second
	// MaxQuerySamples is how many samples one query may hold in memory
	// at once (a tenth of Prometheus's default, for the same reason).
	MaxQuerySamples = 5_000_000
)

// Options configure the monitor.
type Options struct {
	// Dir holds the TSDB (blocks and write-ahead log).
	Dir string
	// Retention is how long samples are kept (--metrics-retention).
	Retention time.Duration
	// RetentionSize bounds the bytes of the TSDB's blocks, the oldest
	// going first (--metrics-retention-size); 0: no bound.
	RetentionSize int64
	// ScrapeInterval and EvaluationInterval: how often targets are
	// scraped and rules evaluated.
	ScrapeInterval     time.Duration
	EvaluationInterval time.Duration
	// ConfigFile is a Prometheus configuration file: its scrape_configs
	// are scraped beside capstan's own targets, its rule_files evaluated
	// beside capstan's rules.
	ConfigFile string
	// MaxAlertFor, when set, shortens every alerting rule's `for` to at
	// most this: a demo or a test sees an alert fire in seconds, with
	// the expression OpenShift evaluates. Zero keeps the rules as written.
	MaxAlertFor time.Duration
	// Logger logs Prometheus's own messages; nil discards them.
	Logger *slog.Logger
}

// Target is a component to scrape.
type Target struct {
	// Job is the job label, as OpenShift's ServiceMonitors give it
	// (cluster-version-operator, kube-state-metrics, etcd, ...).
	Job string
	// Labels are added to every series of the target (namespace,
	// service, endpoint, as service discovery would give them).
	Labels map[string]string
	// Gatherer is an in-process component's registry, served on the
	// monitor's loopback listener at /targets/JOB/metrics and scraped
	// there like any endpoint.
	Gatherer prometheus.Gatherer
	// Healthy, when set, says whether the component runs: while it
	// returns an error its endpoint answers 503 and up is 0.
	Healthy func() error
	// URLs are endpoints to scrape instead of a Gatherer: one instance
	// each, all with the same scheme, path and TLS settings.
	URLs []string
	// Discover, when set, gives the URLs instead, asked again every
	// scrape interval (members that come and go).
	Discover func() []string
	// TLS configures the client for https URLs.
	TLS *TLSFiles
}

// TLSFiles are the files of a scrape's TLS client.
type TLSFiles struct {
	CA, Cert, Key string
}

// Monitor is a running Prometheus.
type Monitor struct {
	opts    Options
	db      *tsdb.DB
	engine  *promql.Engine
	scrape  *scrape.Manager
	disc    *discovery.Manager
	rules   *rules.Manager
	reg     *prometheus.Registry
	cfg     *config.Config
	targets []Target

	local    net.Listener
	localSrv *http.Server

	// queries holds a token for each API query evaluating now.
	queries chan struct{}

	// dbStats are the TSDB's statistics (its WAL replay's, for the API).
	dbStats *tsdb.DBStats
	// running is set once Run has started every manager: the API
	// answers 503 before.
	running atomic.Bool
	// api is the HTTP API, made once (see Handler).
	apiOnce sync.Once
	api     http.Handler

	cancel  context.CancelFunc
	wg      sync.WaitGroup
	stopped sync.Once
	started time.Time
}

// Validate refuses options Prometheus would refuse, naming the flag.
func (o *Options) Validate() error {
	var errs []error
	if o.Dir == "" {
		errs = append(errs, errors.New("monitoring: no data directory"))
	}
	if o.Retention < 0 {
		errs = append(errs, fmt.Errorf("--metrics-retention %s: must not be negative", o.Retention))
	}
	if o.RetentionSize < 0 {
		errs = append(errs, fmt.Errorf("--metrics-retention-size %d: must not be negative", o.RetentionSize))
	}
	if o.ScrapeInterval < 0 || o.EvaluationInterval < 0 {
		errs = append(errs, fmt.Errorf("scrape interval %s and evaluation interval %s must not be negative", o.ScrapeInterval, o.EvaluationInterval))
	}
	if o.MaxAlertFor < 0 {
		errs = append(errs, fmt.Errorf("--alert-for-max %s: must not be negative", o.MaxAlertFor))
	}
	return errors.Join(errs...)
}

// CheckConfigFile reads a Prometheus configuration file as New would, and
// every rule file it names as the rules manager would, so that a bad one
// is refused before anything starts.
func CheckConfigFile(path string) error {
	cfg, err := config.LoadFile(path, false, slog.New(slog.DiscardHandler))
	if err == nil {
		_, err = cfg.GetScrapeConfigs()
	}
	if err != nil {
		return fmt.Errorf("monitoring: --prometheus-config %s: %w", path, err)
	}
	var errs []error
	for _, pattern := range cfg.RuleFiles {
		files, err := filepath.Glob(pattern)
		if err != nil {
			errs = append(errs, fmt.Errorf("rule_files %q: %w", pattern, err))
			continue
		}
		for _, f := range files {
			if _, ferrs := rulefmt.ParseFile(f, false, model.UTF8Validation, defaultParser, slog.New(slog.DiscardHandler)); len(ferrs) > 0 {
				errs = append(errs, ferrs...)
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("monitoring: --prometheus-config %s: %w", path, errors.Join(errs...))
	}
	return nil
}

func (o *Options) defaults() {
	if o.Retention == 0 {
		o.Retention = DefaultRetention
	}
	if o.ScrapeInterval == 0 {
		o.ScrapeInterval = DefaultScrapeInterval
	}
	if o.EvaluationInterval == 0 {
		o.EvaluationInterval = DefaultEvaluationInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// New opens the TSDB in opts.Dir and prepares scraping and rules; Run
// starts them.
func New(opts Options, targets []Target) (*Monitor, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.defaults()
	if err := validTargets(targets); err != nil {
		return nil, err
	}
	m := &Monitor{opts: opts, reg: prometheus.NewRegistry(), targets: targets}
	// No go_* or process_* here: the process is the API server's too,
	// whose job exports them once (a sum over two jobs would count the
	// process twice).

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("monitoring: loopback listener for in-process targets: %w", err)
	}
	m.local = l
	cfg, err := m.config()
	if err != nil {
		l.Close()
		return nil, err
	}
	m.cfg = cfg

	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		l.Close()
		return nil, fmt.Errorf("monitoring: %w", err)
	}
	dbOpts := tsdb.DefaultOptions()
	dbOpts.RetentionDuration = opts.Retention.Milliseconds()
	dbOpts.MaxBytes = opts.RetentionSize
	dbOpts.MaxBlockDuration = maxBlockDuration(opts.Retention).Milliseconds()
	// Prometheus's default: a WAL compressed with snappy.
	dbOpts.WALCompression = compression.Snappy
	m.dbStats = tsdb.NewDBStats()
	db, err := tsdb.Open(opts.Dir, opts.Logger, m.reg, dbOpts, m.dbStats)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("monitoring: opening the TSDB in %s: %w", opts.Dir, err)
	}
	m.db = db
	evalInterval := opts.EvaluationInterval.Milliseconds()
	m.engine = promql.NewEngine(promql.EngineOpts{
		Logger:        opts.Logger,
		Reg:           m.reg,
		MaxSamples:    MaxQuerySamples,
		Timeout:       2 * time.Minute,
		LookbackDelta: 5 * time.Minute,
		// A subquery without a step ([1h:]) steps at the evaluation
		// interval, as Prometheus's own server sets it; the engine calls
		// this unguarded, so without it such a query panics.
		NoStepSubqueryIntervalFn: func(int64) int64 { return evalInterval },
		EnableAtModifier:         true,
		EnableNegativeOffset:     true,
	})
	m.queries = make(chan struct{}, MaxConcurrentQueries)
	return m, nil
}

// validTargets refuses targets that cannot be scraped.
func validTargets(targets []Target) error {
	seen := map[string]bool{}
	var errs []error
	for _, t := range targets {
		switch {
		case t.Job == "" || strings.ContainsAny(t.Job, "/ "):
			errs = append(errs, fmt.Errorf("monitoring: target job %q: want a name without spaces or slashes", t.Job))
		case seen[t.Job]:
			errs = append(errs, fmt.Errorf("monitoring: target job %q named twice", t.Job))
		case (t.Gatherer == nil) == (len(t.URLs) == 0 && t.Discover == nil):
			errs = append(errs, fmt.Errorf("monitoring: target job %q: want either a gatherer or URLs", t.Job))
		}
		for _, u := range t.URLs {
			if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
				errs = append(errs, fmt.Errorf("monitoring: target job %q: URL %q is not http(s)://HOST[:PORT]/PATH", t.Job, u))
			}
		}
		seen[t.Job] = true
	}
	return errors.Join(errs...)
}

// scrapeConfig is the YAML of one scrape_configs entry capstan writes for
// a target; Prometheus's own loader fills in defaults and checks it.
type scrapeConfig struct {
	JobName        string         `yaml:"job_name"`
	ScrapeInterval string         `yaml:"scrape_interval"`
	ScrapeTimeout  string         `yaml:"scrape_timeout"`
	MetricsPath    string         `yaml:"metrics_path"`
	Scheme         string         `yaml:"scheme"`
	HonorLabels    bool           `yaml:"honor_labels,omitempty"`
	TLSConfig      map[string]any `yaml:"tls_config,omitempty"`
	StaticConfigs  []staticConfig `yaml:"static_configs"`
}

type staticConfig struct {
	Targets []string          `yaml:"targets"`
	Labels  map[string]string `yaml:"labels,omitempty"`
}

// config is the Prometheus configuration: capstan's targets, then those
// and the rule files of opts.ConfigFile.
func (m *Monitor) config() (*config.Config, error) {
	interval := model.Duration(m.opts.ScrapeInterval).String()
	timeout := model.Duration(min(m.opts.ScrapeInterval, 10*time.Second)).String()
	var scs []scrapeConfig
	for _, t := range m.targets {
		sc := scrapeConfig{JobName: t.Job, ScrapeInterval: interval, ScrapeTimeout: timeout}
		if t.Gatherer != nil {
			// In-process components' labels are their own (a pod's
			// namespace is not the target's), as OpenShift's
			// kube-state-metrics ServiceMonitor honors them.
			sc.HonorLabels = true
			sc.Scheme, sc.MetricsPath = "http", "/targets/"+t.Job+"/metrics"
			// The loopback port changes with every start; the instance
			// stays the job's, so series continue across restarts.
			labels := map[string]string{"instance": t.Job}
			for k, v := range t.Labels {
				labels[k] = v
			}
			sc.StaticConfigs = []staticConfig{{Targets: []string{m.local.Addr().String()}, Labels: labels}}
			scs = append(scs, sc)
			continue
		}
		urls := t.URLs
		if t.Discover != nil {
			urls = t.Discover()
		}
		placeholder := len(urls) == 0
		if placeholder {
			// Nothing yet: the job takes its scheme and path from a URL
			// of the same shape, without targets; they come as
			// discovered.
			urls = []string{"https://127.0.0.1:1/metrics"}
		}
		byScheme := map[string]*scrapeConfig{}
		for _, raw := range urls {
			u, _ := url.Parse(raw)
			c := byScheme[u.Scheme+u.Path]
			if c == nil {
				c = &scrapeConfig{JobName: t.Job, ScrapeInterval: interval, ScrapeTimeout: timeout, Scheme: u.Scheme, MetricsPath: u.Path}
				if c.MetricsPath == "" {
					c.MetricsPath = "/metrics"
				}
				if t.TLS != nil {
					c.TLSConfig = map[string]any{"ca_file": t.TLS.CA, "cert_file": t.TLS.Cert, "key_file": t.TLS.Key}
				}
				c.StaticConfigs = []staticConfig{{Labels: t.Labels}}
				byScheme[u.Scheme+u.Path] = c
			}
			c.StaticConfigs[0].Targets = append(c.StaticConfigs[0].Targets, u.Host)
		}
		if len(byScheme) != 1 {
			return nil, fmt.Errorf("monitoring: target job %q: every URL must have the same scheme and path", t.Job)
		}
		for _, c := range byScheme {
			if placeholder {
				c.StaticConfigs[0].Targets = []string{}
			}
			scs = append(scs, *c)
		}
	}
	doc := map[string]any{
		"global": map[string]any{
			"scrape_interval":     interval,
			"scrape_timeout":      timeout,
			"evaluation_interval": model.Duration(m.opts.EvaluationInterval).String(),
		},
		"scrape_configs": scs,
	}
	raw, err := yaml.Marshal(doc)
	if err != nil {
		return nil, err
	}
	cfg, err := config.Load(string(raw), m.opts.Logger)
	if err != nil {
		return nil, fmt.Errorf("monitoring: capstan's scrape configuration: %w", err)
	}
	if m.opts.ConfigFile == "" {
		return cfg, nil
	}
	extra, err := config.LoadFile(m.opts.ConfigFile, false, m.opts.Logger)
	if err != nil {
		return nil, fmt.Errorf("monitoring: --prometheus-config %s: %w", m.opts.ConfigFile, err)
	}
	extraScrapes, err := extra.GetScrapeConfigs()
	if err != nil {
		return nil, fmt.Errorf("monitoring: --prometheus-config %s: %w", m.opts.ConfigFile, err)
	}
	for _, sc := range extraScrapes {
		for _, own := range cfg.ScrapeConfigs {
			if own.JobName == sc.JobName {
				return nil, fmt.Errorf("monitoring: --prometheus-config %s: job %q is one of capstan's own", m.opts.ConfigFile, sc.JobName)
			}
		}
		cfg.ScrapeConfigs = append(cfg.ScrapeConfigs, sc)
	}
	cfg.RuleFiles = append(cfg.RuleFiles, extra.RuleFiles...)
	return cfg, nil
}

// Run starts scraping and the rules and returns; Stop ends them.
func (m *Monitor) Run(ctx context.Context) error {
	ctx, m.cancel = context.WithCancel(ctx)
	m.started = time.Now()
	mux := http.NewServeMux()
	for _, t := range m.targets {
		if t.Gatherer == nil {
			continue
		}
		// The scrapes are on loopback: compressing what is read at once
		// costs CPU (1 % of it at 30,000 pods) and saves nothing.
		h := promhttp.HandlerFor(t.Gatherer, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, DisableCompression: true})
		healthy := t.Healthy
		mux.Handle("/targets/"+t.Job+"/metrics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if healthy != nil {
				if err := healthy(); err != nil {
					http.Error(w, err.Error(), http.StatusServiceUnavailable)
					return
				}
			}
			h.ServeHTTP(w, r)
		}))
	}
	m.localSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		_ = m.localSrv.Serve(m.local)
	}()

	sdMetrics, err := discovery.CreateAndRegisterSDMetrics(m.reg)
	if err != nil {
		return fmt.Errorf("monitoring: %w", err)
	}
	m.disc = discovery.NewManager(ctx, m.opts.Logger, m.reg, sdMetrics)
	if m.disc == nil {
		return errors.New("monitoring: the discovery manager could not be created")
	}
	m.scrape, err = scrape.NewManager(&scrape.Options{DiscoveryReloadInterval: model.Duration(min(m.opts.ScrapeInterval, 5*time.Second))},
		m.opts.Logger, nil, nil, m.db, m.reg)
	if err != nil {
		return fmt.Errorf("monitoring: %w", err)
	}
	if err := m.scrape.ApplyConfig(m.cfg); err != nil {
		return fmt.Errorf("monitoring: scrape configuration: %w", err)
	}
	sd := map[string]discovery.Configs{}
	for _, sc := range m.cfg.ScrapeConfigs {
		sd[sc.JobName] = sc.ServiceDiscoveryConfigs
	}
	if err := m.disc.ApplyConfig(sd); err != nil {
		return fmt.Errorf("monitoring: service discovery: %w", err)
	}
	m.wg.Add(3)
	go func() { defer m.wg.Done(); m.rediscover(ctx, sd) }()
	go func() { defer m.wg.Done(); _ = m.disc.Run() }()
	go func() { defer m.wg.Done(); _ = m.scrape.Run(m.disc.SyncCh()) }()
	m.wg.Add(1)
	go func() { defer m.wg.Done(); m.markVanished(ctx) }()

	m.rules = rules.NewManager(&rules.ManagerOptions{
		QueryFunc:       rules.EngineQueryFunc(m.engine, m.db),
		NotifyFunc:      func(context.Context, string, ...*rules.Alert) {},
		Context:         ctx,
		AppendableV2:    m.db,
		Queryable:       m.db,
		Logger:          m.opts.Logger,
		Registerer:      m.reg,
		OutageTolerance: time.Hour,
		ForGracePeriod:  10 * time.Minute,
		ResendDelay:     time.Minute,
		GroupLoader:     &groupLoader{maxFor: m.opts.MaxAlertFor, parser: defaultParser},
	})
	files := ruleFileNames()
	var fromConfig []string
	for _, pattern := range m.cfg.RuleFiles {
		matched, err := filepath.Glob(pattern)
		if err != nil {
			return fmt.Errorf("monitoring: rule_files %q: %w", pattern, err)
		}
		fromConfig = append(fromConfig, matched...)
	}
	sort.Strings(fromConfig)
	files = append(files, fromConfig...)
	if err := m.rules.Update(m.opts.EvaluationInterval, files, labels.EmptyLabels(), "", nil); err != nil {
		return fmt.Errorf("monitoring: rules: %w", err)
	}
	m.wg.Add(1)
	go func() { defer m.wg.Done(); m.rules.Run() }()
	m.running.Store(true)
	return nil
}

// rediscover asks the targets with Discover for their URLs every scrape
// interval and hands what changed to service discovery.
func (m *Monitor) rediscover(ctx context.Context, sd map[string]discovery.Configs) {
	last := map[string]string{}
	t := time.NewTicker(m.opts.ScrapeInterval)
	defer t.Stop()
	for {
		changed := false
		for _, tg := range m.targets {
			if tg.Discover == nil {
				continue
			}
			urls := tg.Discover()
			key := strings.Join(urls, " ")
			if last[tg.Job] == key {
				continue
			}
			last[tg.Job], changed = key, true
			group := &targetgroup.Group{Labels: model.LabelSet{}, Source: tg.Job}
			for k, v := range tg.Labels {
				group.Labels[model.LabelName(k)] = model.LabelValue(v)
			}
			for _, raw := range urls {
				// Each target carries its scheme and path: the job's
				// own were taken before any URL was known.
				if u, err := url.Parse(raw); err == nil {
					path := u.Path
					if path == "" {
						path = "/metrics"
					}
					group.Targets = append(group.Targets, model.LabelSet{model.AddressLabel: model.LabelValue(u.Host),
						model.SchemeLabel: model.LabelValue(u.Scheme), model.MetricsPathLabel: model.LabelValue(path)})
				}
			}
			sd[tg.Job] = discovery.Configs{discovery.StaticConfig{group}}
		}
		if changed {
			if err := m.disc.ApplyConfig(sd); err != nil {
				m.opts.Logger.Error("Applying discovered targets", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Stop stops scraping and the rules and closes the TSDB.
func (m *Monitor) Stop() error {
	var err error
	m.stopped.Do(func() {
		// The API answers 503 from now on; the queries in flight (each
		// holds a slot) end before the TSDB they read is closed.
		m.running.Store(false)
		deadline := time.NewTimer(5 * time.Second)
		defer deadline.Stop()
	drain:
		for range cap(m.queries) {
			select {
			case m.queries <- struct{}{}:
			case <-deadline.C:
				break drain
			}
		}
		if m.rules != nil {
			m.rules.Stop()
		}
		if m.scrape != nil {
			m.scrape.Stop()
		}
		if m.cancel != nil {
			m.cancel()
		}
		if m.localSrv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = m.localSrv.Shutdown(ctx)
			cancel()
		} else {
			m.local.Close()
		}
		m.wg.Wait()
		err = m.db.Close()
	})
	return err
}

// Registry is the monitor's own metrics (prometheus_*, its TSDB's).
func (m *Monitor) Registry() prometheus.Gatherer { return m.reg }

// maxBlockDuration is how long compacted blocks may span, as Prometheus
// sets it when not told: a tenth of the retention, at most 31 days, and
// never under the 2h of the head's blocks.
func maxBlockDuration(retention time.Duration) time.Duration {
	return min(max(retention/10, 2*time.Hour), 31*24*time.Hour)
}

// Jobs are the jobs of the monitor's own targets (not those of a
// --prometheus-config file), in their order.
func (m *Monitor) Jobs() []string {
	var jobs []string
	for _, t := range m.targets {
		if !slices.Contains(jobs, t.Job) {
			jobs = append(jobs, t.Job)
		}
	}
	return jobs
}

// WaitScraped waits until every target of the jobs was scraped once
// since the monitor started, or ctx ends.
func (m *Monitor) WaitScraped(ctx context.Context, jobs ...string) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		pending := m.unscraped(jobs)
		if len(pending) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("monitoring: waiting for the first scrape of %s: %w", strings.Join(pending, ", "), ctx.Err())
		case <-t.C:
		}
	}
}

func (m *Monitor) unscraped(jobs []string) []string {
	active := m.scrape.TargetsActive()
	var pending []string
	for _, job := range jobs {
		ts := active[job]
		done := len(ts) > 0
		for _, t := range ts {
			done = done && t.LastScrape().After(m.started)
		}
		if !done {
			pending = append(pending, job)
		}
	}
	return pending
}
