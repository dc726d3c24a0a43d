// Package metrics serves Prometheus metrics on one /metrics endpoint: the
// embedded Kubernetes components' (their legacy registry) and capstan's
// own components', and, beside them, any other handler (capstan up serves
// its Prometheus's API there).
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/capstan-dev/capstan/internal/ports"
)

// Server serves /metrics on a listener.
type Server struct {
	l   net.Listener
	srv *http.Server
}

// Listen binds addr and serves what the gatherers gather at /metrics, and
// api (when set) at every other path.
func Listen(addr string, api http.Handler, gatherers ...prometheus.Gatherer) (*Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics endpoint %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(prometheus.Gatherers(gatherers), promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	if api != nil {
		mux.Handle("/", api)
	}
	var h http.Handler = mux
	if ports.LoopbackOnly(addr) == nil {
		h = ports.LoopbackHosts(h)
	}
	return &Server{l: l, srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}, nil
}

// Addr is where the server listens.
func (s *Server) Addr() string { return s.l.Addr().String() }

// Run serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.srv.Shutdown(sctx)
	}()
	if err := s.srv.Serve(s.l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
