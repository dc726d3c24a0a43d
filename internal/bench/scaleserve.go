package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/etcd"
	"github.com/capstan-dev/capstan/internal/memlimit"
	"github.com/capstan-dev/capstan/internal/seeded"
)

// A scale run measures a cluster in a process of its own, started with
// `capstan bench serve`: the benchmark's process creates the nodes and
// the pods and watches them, so that what it measures (the CPU and memory
// of the cluster's processes) holds nothing of the load's.

// Modes of a served cluster.
const (
	// ModeFull is everything capstan up runs: three masters booted from
	// their Machines, an etcd member on each, and every component.
	ModeFull = "full"
	// ModeFloor is upstream alone: kube-apiserver, kube-controller-manager,
	// the same three etcd members and the simulated kubelets, with
	// monitoring, and none of capstan's controllers. Its pods are bound
	// to their nodes when they are made.
	ModeFloor = "floor"
)

// ServeOptions configure `capstan bench serve`.
type ServeOptions struct {
	Mode              string
	ControlPlaneNodes int
	DataDir           string
	EtcdNoFsync       bool
	Timeout           time.Duration
	// StatusFile receives the Served description once the cluster is up.
	StatusFile string
}

// Served is what a served cluster tells the benchmark.
type Served struct {
	PID        int    `json:"pid"`
	Kubeconfig string `json:"kubeconfig"`
	// Control is the URL of the process's control endpoint.
	Control       string `json:"control"`
	PrometheusURL string `json:"prometheusURL"`
	EtcdMembers   int    `json:"etcdMembers"`
	GOGC          int    `json:"gogc"`
	GOMEMLIMIT    int64  `json:"gomemlimit"`
	// MemberGOMEMLIMIT is each etcd member's soft limit ("" when the
	// environment set it).
	MemberGOMEMLIMIT string `json:"memberGomemlimit"`
	Seed             string `json:"seed"`
}

// ServedState is what the control endpoint's /state answers.
type ServedState struct {
	// HeapLive is the Go heap left by a collection made for the answer,
	// HeapHeld what the heap held from the OS before it.
	HeapLive uint64 `json:"heapLive"`
	HeapHeld uint64 `json:"heapHeld"`
	// LeaseAges is the simulated kubelets' histogram of lease ages at
	// renewal (cumulative counts by upper bound, seconds; the last, of
	// upper bound -1, counts every observation).
	LeaseAges []Bucket `json:"leaseAges"`
	// OldestLease is the age of the oldest lease now, in seconds.
	OldestLease float64 `json:"oldestLease"`
}

// Bucket is one cumulative bucket of a histogram.
type Bucket struct {
	UpperBound float64 `json:"le"`
	Count      uint64  `json:"count"`
}

// Serve starts a cluster of o.Mode, writes its description to
// o.StatusFile and serves its control endpoint until ctx ends.
func Serve(ctx context.Context, o ServeOptions, log io.Writer) error {
	if o.Mode != ModeFull && o.Mode != ModeFloor {
		return fmt.Errorf("--mode %q: want %s or %s", o.Mode, ModeFull, ModeFloor)
	}
	if o.ControlPlaneNodes <= 0 || o.DataDir == "" || o.StatusFile == "" {
		return fmt.Errorf("a served cluster needs --control-plane-nodes, --data-dir and --status-file")
	}
	opts := clusterOptions(o.DataDir, o.EtcdNoFsync)
	// Both modes are monitored, as capstan up is.
	opts.MetricsAddress = "127.0.0.1:0"
	opts.Monitoring = cluster.MonitoringOptions{Retention: 24 * time.Hour, ScrapeInterval: 15 * time.Second,
		EvaluationInterval: 15 * time.Second}
	if o.Mode == ModeFull {
		opts.ControlPlaneNodes = o.ControlPlaneNodes
		opts.BootFromMachines = true
		opts.ConsoleAddress = "127.0.0.1:0"
		opts.Releases.Address = "127.0.0.1:0"
		opts.Monitoring.ThanosAddress = "127.0.0.1:0"
	} else {
		opts.WithoutControllers()
	}
	cl, err := startCluster(ctx, opts, o.DataDir, log)
	if err != nil {
		return err
	}
	defer cl.Stop()
	members := 1
	if o.Mode == ModeFull {
		if err := cl.EnsureNodes(ctx); err != nil {
			return err
		}
		if err := cl.WaitBootNodesReady(ctx, o.Timeout); err != nil {
			return err
		}
		st, err := cl.WaitEtcdFaultTolerant(ctx, o.Timeout, func(waiting string) {
			fmt.Fprintf(log, "Waiting for etcd to tolerate the loss of a master: %s\n", waiting)
		})
		if err != nil {
			return err
		}
		members = st.Healthy
	} else if members, err = addVotingMembers(ctx, cl.ControlPlane.Etcd(), o.ControlPlaneNodes, o.Timeout); err != nil {
		return err
	}
	if err := benchNamespace(ctx, cl.Client); err != nil {
		return err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: controlHandler(cl), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Close()

	mem := memlimit.Current()
	served := Served{PID: os.Getpid(), Kubeconfig: cl.ControlPlane.KubeconfigPath(), Control: "http://" + lis.Addr().String(),
		PrometheusURL: cl.PrometheusURL, EtcdMembers: members, GOGC: mem.GOGC, GOMEMLIMIT: mem.GOMEMLIMIT,
		Seed: os.Getenv(seeded.Env)}
	if os.Getenv("GOMEMLIMIT") == "" && mem.MachineMemory > 0 {
		served.MemberGOMEMLIMIT = memlimit.Bytes(memlimit.Limit(memlimit.EtcdMember, mem.MachineMemory))
	}
	raw, err := json.Marshal(served)
	if err != nil {
		return err
	}
	if err := os.WriteFile(o.StatusFile+".tmp", raw, 0o600); err != nil {
		return err
	}
	if err := os.Rename(o.StatusFile+".tmp", o.StatusFile); err != nil {
		return err
	}
	fmt.Fprintf(log, "Serving a %s cluster: %s\n", o.Mode, raw)
	<-ctx.Done()
	return nil
}

// addVotingMembers grows the floor's etcd to n voting members, as the
// etcd operator grows capstan up's, each a learner until it caught up.
func addVotingMembers(ctx context.Context, e *etcd.Cluster, n int, timeout time.Duration) (int, error) {
	if e == nil {
		return 0, fmt.Errorf("the floor needs capstan's own etcd")
	}
	// etcd refuses a member while the last one added is not yet
	// connected ("unhealthy cluster"), and a promotion until the learner
	// caught up: each is tried again until it is taken.
	retry := func(what string, f func() error) error {
		deadline := time.Now().Add(timeout)
		for {
			err := f()
			if err == nil {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: not done within %s: %w", what, timeout, err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	for i := 1; i < n; i++ {
		name := fmt.Sprintf("floor-%d", i)
		if err := retry("adding etcd member "+name, func() error { return e.AddLearner(ctx, name) }); err != nil {
			return 0, err
		}
		if err := retry("promoting etcd member "+name, func() error { return e.Promote(ctx, name) }); err != nil {
			return 0, err
		}
	}
	members, err := e.List(ctx)
	if err != nil {
		return 0, err
	}
	return len(members), nil
}

// controlHandler serves the benchmark's requests to the cluster's
// process: /state, and CPU and heap profiles written to a path.
func controlHandler(cl *cluster.Cluster) http.Handler {
	mux := http.NewServeMux()
	leases := prometheus.NewRegistry()
	leases.MustRegister(cl.Sim.Metrics())
	leaseState := func(st *ServedState) error {
		fams, err := leases.Gather()
		if err != nil {
			return err
		}
		for _, f := range fams {
			switch f.GetName() {
			case "capstan_simulator_node_lease_age_seconds":
				st.LeaseAges = buckets(f)
			case "capstan_simulator_node_lease_oldest_age_seconds":
				if len(f.Metric) > 0 {
					st.OldestLease = f.Metric[0].GetGauge().GetValue()
				}
			}
		}
		return nil
	}
	answer := func(w http.ResponseWriter, collect bool) {
		var st ServedState
		if collect {
			st.HeapLive, st.HeapHeld = heapAfterCollection()
		}
		if err := leaseState(&st); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_ = json.NewEncoder(w).Encode(st)
	}
	// The heap after a collection, and the leases.
	mux.HandleFunc("GET /state", func(w http.ResponseWriter, r *http.Request) { answer(w, true) })
	// The leases alone, without a collection: for progress lines.
	mux.HandleFunc("GET /leases", func(w http.ResponseWriter, r *http.Request) { answer(w, false) })
	var mu sync.Mutex
	var stopCPU func()
	mux.HandleFunc("POST /cpuprofile/start", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if stopCPU != nil {
			stopCPU()
		}
		var err error
		if stopCPU, err = StartCPUProfile(r.URL.Query().Get("path")); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	mux.HandleFunc("POST /cpuprofile/stop", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if stopCPU != nil {
			stopCPU()
			stopCPU = nil
		}
	})
	mux.HandleFunc("POST /heapprofile", func(w http.ResponseWriter, r *http.Request) {
		f, err := os.Create(r.URL.Query().Get("path"))
		if err == nil {
			runtime.GC()
			err = pprof.Lookup("heap").WriteTo(f, 0)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	return mux
}

func buckets(f *dto.MetricFamily) []Bucket {
	if len(f.Metric) == 0 || f.Metric[0].GetHistogram() == nil {
		return nil
	}
	h := f.Metric[0].GetHistogram()
	var out []Bucket
	for _, b := range h.GetBucket() {
		out = append(out, Bucket{UpperBound: b.GetUpperBound(), Count: b.GetCumulativeCount()})
	}
	return append(out, Bucket{UpperBound: -1, Count: h.GetSampleCount()})
}
