// Package component runs one of capstan's components on its own, the way
// a Deployment of it runs on a cluster: while it holds its Lease (when
// leader election is on; a replica without it stands by), with /healthz,
// /readyz and /metrics served beside it. A replica that loses its lease
// stops its work and returns ErrLost, so that its process exits and is
// restarted as a stand-by, as Kubernetes' own components do.
package component

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"

	"github.com/capstan-dev/capstan/internal/leader"
)

// Options describe how a component runs.
type Options struct {
	// Name names the component (deploy/NAME), in messages and metrics.
	Name string
	// Client reaches the Lease.
	Client kubernetes.Interface
	// LeaderElect runs the work only while Lease is held.
	LeaderElect bool
	Lease       leader.Config
	// HealthAddress, when set, serves /healthz, /readyz and /metrics.
	HealthAddress string
	// Gatherers are the component's metrics.
	Gatherers []prometheus.Gatherer
	// Out is told where the endpoints are and when the work starts.
	Out io.Writer
}

// state is what the endpoints report.
type state struct {
	leading  atomic.Bool
	exited   atomic.Pointer[error]
	watchdog *leaderelection.HealthzAdaptor
}

// Run runs work as o says, until ctx ends, work returns or the lease is
// lost.
func Run(ctx context.Context, o Options, work func(context.Context) error) error {
	if o.Out == nil {
		o.Out = io.Discard
	}
	st := &state{}
	if o.LeaderElect {
		// A leader that has not renewed its lease for this long after it
		// expired is unhealthy: it may act beside a new leader.
		st.watchdog = leaderelection.NewLeaderHealthzAdaptor(20 * time.Second)
		o.Lease.Watchdog = st.watchdog
	}
	isLeader := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "leader_election_master_status",
		Help:        "1 while this replica holds its component's lease (or runs without leader election), 0 otherwise.",
		ConstLabels: prometheus.Labels{"name": o.Name},
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(isLeader)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	served := make(chan error, 1)
	if o.HealthAddress != "" {
		ln, err := net.Listen("tcp", o.HealthAddress)
		if err != nil {
			return fmt.Errorf("%s: health and metrics address: %w", o.Name, err)
		}
		srv := &http.Server{Handler: st.mux(append([]prometheus.Gatherer{reg}, o.Gatherers...)), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			<-ctx.Done()
			sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
			defer c()
			_ = srv.Shutdown(sctx)
		}()
		go func() { served <- srv.Serve(ln) }()
		fmt.Fprintf(o.Out, "Health: http://%s/healthz, readiness /readyz, metrics /metrics\n", ln.Addr())
	}
	lead := func(ctx context.Context) error {
		st.leading.Store(true)
		isLeader.Set(1)
		defer func() { st.leading.Store(false); isLeader.Set(0) }()
		if o.LeaderElect {
			fmt.Fprintf(o.Out, "Leading: holding the Lease %s/%s\n", o.Lease.Namespace, o.Lease.Name)
		}
		return work(ctx)
	}
	var err error
	if o.LeaderElect {
		fmt.Fprintf(o.Out, "Standing by for the Lease %s/%s\n", o.Lease.Namespace, o.Lease.Name)
		err = leader.Run(ctx, o.Client, o.Lease, lead)
	} else {
		err = lead(ctx)
	}
	st.exited.Store(&err)
	cancel()
	if o.HealthAddress != "" {
		if serr := <-served; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
			err = serr
		}
	}
	return err
}

func (st *state) mux(gatherers []prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if p := st.exited.Load(); p != nil && *p != nil {
			http.Error(w, "the component stopped: "+(*p).Error(), http.StatusInternalServerError)
			return
		}
		if st.watchdog != nil {
			if err := st.watchdog.Check(r); err != nil {
				http.Error(w, "leader election: "+err.Error(), http.StatusInternalServerError)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	// A stand-by replica is ready: it is ready to take over.
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if p := st.exited.Load(); p != nil {
			http.Error(w, "the component stopped", http.StatusServiceUnavailable)
			return
		}
		if st.leading.Load() {
			fmt.Fprintln(w, "ok: leading")
			return
		}
		fmt.Fprintln(w, "ok: standing by")
	})
	mux.Handle("/metrics", promhttp.HandlerFor(prometheus.Gatherers(gatherers), promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	return mux
}

// Serve serves srv on ln until ctx ends, then closes it.
func Serve(ctx context.Context, srv *http.Server, ln net.Listener) error {
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
