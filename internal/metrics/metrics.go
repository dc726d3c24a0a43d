// Package metrics serves capstan's Prometheus metrics: the embedded
// Kubernetes components' (their legacy registry) and capstan's own
// components', on one /metrics endpoint, and instant queries over them at
// /api/v1/query.
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

	"github.com/capstan-dev/capstan/internal/promql"
)

// Server serves /metrics on a listener.
type Server struct {
	l   net.Listener
	srv *http.Server
}

// Listen binds addr and serves what the gatherers gather at /metrics.
func Listen(addr string, gatherers ...prometheus.Gatherer) (*Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics endpoint %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(prometheus.Gatherers(gatherers), promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	// The same metrics, queried as Prometheus's API answers instant
	// queries: what the cluster version operator evaluates update risks on.
	mux.Handle("/api/v1/query", promql.Handler(prometheus.Gatherers(gatherers)))
	return &Server{l: l, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}, nil
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
