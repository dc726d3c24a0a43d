package etcd

import (
	"context"
	"crypto/tls"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// healthTimeout bounds one member's health check, as upstream's.
const healthTimeout = 2 * time.Second

// memberHealth is what a member answered.
type memberHealth struct {
	// Healthy: a voter served a linearizable read (it has a leader and
	// its leader a quorum), a learner a serializable one.
	Healthy bool
	// AppliedIndex is the raft index the member has applied, Leader the
	// leader it follows (0 when it knows none); both from its status.
	AppliedIndex uint64
	Leader       uint64
}

// healthChecker checks members one by one, as the cluster-etcd-operator's
// checkSingleMemberHealth does: a linearizable Get of the key "health" on
// a voter, a serializable one on a learner (which serves no other). A
// member that answers a status request but has no leader, or is cut off
// from the others, fails the linearizable read. Each member is asked
// through a client of its own, kept while the member is.
type healthChecker struct {
	tls *tls.Config

	mu      sync.Mutex
	clients map[string]*clientv3.Client // by client URL
}

func newHealthChecker(tlsConfig *tls.Config) *healthChecker {
	return &healthChecker{tls: tlsConfig, clients: map[string]*clientv3.Client{}}
}

func (h *healthChecker) client(url string) (*clientv3.Client, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c, ok := h.clients[url]; ok {
		return c, nil
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, TLS: h.tls, DialTimeout: healthTimeout, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	h.clients[url] = c
	return c, nil
}

// check asks the member at url.
func (h *healthChecker) check(ctx context.Context, url string, learner bool) memberHealth {
	if url == "" {
		return memberHealth{}
	}
	c, err := h.client(url)
	if err != nil {
		return memberHealth{}
	}
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	var opts []clientv3.OpOption
	if learner {
		opts = append(opts, clientv3.WithSerializable())
	}
	if _, err := c.Get(ctx, "health", opts...); err != nil {
		return memberHealth{}
	}
	out := memberHealth{Healthy: true}
	if st, err := c.Status(ctx, url); err == nil {
		out.AppliedIndex, out.Leader = st.RaftAppliedIndex, st.Leader
	}
	return out
}

// keep closes the clients of members no longer listed.
func (h *healthChecker) keep(urls []string) {
	live := map[string]bool{}
	for _, u := range urls {
		live[u] = true
	}
	h.mu.Lock()
	var gone []*clientv3.Client
	for u, c := range h.clients {
		if !live[u] {
			gone = append(gone, c)
			delete(h.clients, u)
		}
	}
	h.mu.Unlock()
	for _, c := range gone {
		c.Close()
	}
}

// close closes every client.
func (h *healthChecker) close() { h.keep(nil) }
