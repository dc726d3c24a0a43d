// Package etcd runs the control plane's etcd as OpenShift does: one member
// per control-plane machine, each a real etcd in its own process (see
// MemberMain) with its own data dir and loopback ports, serving TLS with
// the cluster's CA. A bootstrap
// member starts the cluster and leaves it once the machines' members have
// joined (as the bootstrap node's etcd does in an OpenShift install).
// kube-apiserver reaches whichever members are up through one loopback
// proxy, so members can come and go under it.
package etcd

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"k8s.io/klog/v2"
)

// MemberSpec is where a member lives.
type MemberSpec struct {
	// Name is the member's etcd name: the machine it runs on.
	Name string `json:"name"`
	// Dir is its data dir, relative to the cluster's data dir.
	Dir        string `json:"dir"`
	ClientPort int    `json:"clientPort"`
	PeerPort   int    `json:"peerPort"`
	// MetricsPort serves the member's metrics (to Prometheus's client
	// certificate) and its health (to anyone: a readiness probe).
	MetricsPort int `json:"metricsPort,omitempty"`
	// Adding marks a member whose addition to the cluster may not have
	// happened: capstan stopped between writing it down and adding it.
	Adding bool `json:"adding,omitempty"`
	// Removing marks a member whose removal from the cluster may have
	// happened: written before the removal is asked for, so a restart
	// never starts a member the cluster may no longer have (etcd panics
	// on finding itself removed) and finishes what was decided.
	Removing bool `json:"removing,omitempty"`
	// Stopped marks a member whose machine is stopped, written before
	// its process is stopped: a restart of capstan does not start it
	// (unless its machine was asked to start meanwhile, or the quorum
	// needs it: see Start).
	Stopped bool `json:"stopped,omitempty"`
	// Added is when the member was added to the cluster (written before
	// the add): a learner that has not joined some time after is given up.
	Added time.Time `json:"added,omitzero"`
	// Voting: the member voted when the membership was last listed. A
	// start whose voting members' data is gone for a quorum of them says
	// so at once (the cluster must be restored from a snapshot).
	Voting bool `json:"voting,omitempty"`
}

// ClientURL is where the member serves clients.
func (s MemberSpec) ClientURL() string { return "https://127.0.0.1:" + strconv.Itoa(s.ClientPort) }

// PeerURL is where the member talks to its peers.
func (s MemberSpec) PeerURL() string { return "https://127.0.0.1:" + strconv.Itoa(s.PeerPort) }

// MetricsURL is where the member serves /metrics, /health and /readyz.
func (s MemberSpec) MetricsURL() string { return "https://127.0.0.1:" + strconv.Itoa(s.MetricsPort) }

// PeerCommonName is the name the members' peer certificate carries: a
// member accepts a peer connection only from a certificate of etcd's
// signer with this name, so a client certificate is never a peer.
const PeerCommonName = "system:etcd-peer:capstan"

// TLSFiles are the certificates members and their clients use. Those of
// clients and peers are signed by etcd's signer (CA), which signs nothing
// else; the metrics are served with certificates of a signer of their own
// (MetricsCA), to the one client it signs.
type TLSFiles struct {
	CA string
	// Serving is the members' certificate for clients, Peer the one they
	// present to each other (server and client, named PeerCommonName).
	ServingCert, ServingKey string
	PeerCert, PeerKey       string
	// Client is the certificate kube-apiserver and capstan's own clients
	// present.
	ClientCert, ClientKey string
	// MetricsCA signs MetricsServing, the members' metrics endpoint's
	// certificate, and MetricsClient, the certificate Prometheus
	// presents to read them.
	MetricsCA                             string
	MetricsServingCert, MetricsServingKey string
	MetricsClientCert, MetricsClientKey   string
}

func (t TLSFiles) serving() transport.TLSInfo {
	return transport.TLSInfo{CertFile: t.ServingCert, KeyFile: t.ServingKey, TrustedCAFile: t.CA, ClientCertAuth: true}
}

func (t TLSFiles) peer() transport.TLSInfo {
	return transport.TLSInfo{CertFile: t.PeerCert, KeyFile: t.PeerKey, TrustedCAFile: t.CA, ClientCertAuth: true,
		AllowedCNs: []string{PeerCommonName}}
}

// Member is a member's process and its supervisor: like a kubelet with
// etcd's static pod, the supervisor starts the process again when it
// exits on its own, backing off while it keeps failing.
type Member struct {
	Spec MemberSpec
	cfg  memberConfig

	mu       sync.Mutex
	cur      *memberProcess
	restarts int
	stopOnce sync.Once
	stop     chan struct{} // closed by Stop
	// halt: the whole cluster stops, so the member stops at once, without
	// handing its leadership over (SIGINT, not SIGTERM).
	halt atomic.Bool
	done chan struct{} // closed when supervision has ended
}

// memberConfig is how a member is started.
type memberConfig struct {
	spec    MemberSpec
	dir     string // absolute
	tls     TLSFiles
	logFile string
	noFsync bool
	// initialCluster is name=peerURL,... and state "new" or "existing";
	// a member with data ignores both.
	initialCluster, state string
	// token is the initial cluster token of a new cluster, from which
	// etcd derives the cluster's and the members' IDs (NewClusterToken).
	token string
	// forceNewCluster starts the member as a cluster of its own from its
	// own data (QuorumRestore).
	forceNewCluster bool
	// quota is the database quota (0: DefaultQuotaBackendBytes).
	quota int64
	// partitionFile, when set, has the member serve its peer port through
	// a proxy a fault campaign partitions it with (see servePeers).
	partitionFile string
	// rediscover, when set, is the initial cluster as it is now: a member
	// joining an existing cluster that has not joined yet (no data) starts
	// again with it, not with the members of when it was added, which a
	// removal since makes etcd refuse ("member count is unequal") for
	// good. OpenShift's etcd pods discover it at every start, the same way.
	rediscover func() (string, error)
}

func startMember(c memberConfig) (*Member, error) {
	p, err := launch(c)
	if err != nil {
		return nil, err
	}
	m := &Member{Spec: c.spec, cfg: c, cur: p, stop: make(chan struct{}), done: make(chan struct{})}
	go m.supervise()
	return m, nil
}

// Restart backoff: a member that keeps failing is started again at most
// this often, as a kubelet backs off a crashing container (from 1s here,
// as loopback members start in well under a second).
const (
	restartBackoffMin = time.Second
	restartBackoffMax = 20 * time.Second
	// restartBackoffReset: a process that served this long before it
	// ended starts the backoff over.
	restartBackoffReset = 30 * time.Second
)

func (m *Member) supervise() {
	defer close(m.done)
	backoff := restartBackoffMin
	cfg := m.cfg
	for {
		m.mu.Lock()
		p := m.cur
		m.mu.Unlock()
		began := time.Now()
		select {
		case <-m.stop:
			sig := syscall.SIGTERM
			if m.halt.Load() {
				sig = syscall.SIGINT
			}
			p.signal(sig)
			select {
			case <-p.exited:
			case <-time.After(stopTimeout):
				klog.InfoS("etcd member did not stop in time; killing it", "member", m.Spec.Name, "timeout", stopTimeout)
				p.signal(syscall.SIGKILL)
				<-p.exited
			}
			return
		case <-p.exited:
		}
		if time.Since(began) > restartBackoffReset {
			backoff = restartBackoffMin
		}
		klog.InfoS("An etcd member's process ended; starting it again", "member", m.Spec.Name, "err", p.err, "after", backoff)
		for {
			select {
			case <-m.stop:
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, restartBackoffMax)
			// Started again with its data: the initial cluster no
			// longer matters, unless it never wrote any: then it is
			// the members etcd lists now.
			if cfg.rediscover != nil && cfg.state == "existing" && !hasMemberData(cfg.dir) {
				if now, err := cfg.rediscover(); err != nil {
					klog.InfoS("Listing the members for a joining etcd member's start; starting it with those of its addition", "member", m.Spec.Name, "err", err)
				} else if now != cfg.initialCluster {
					klog.InfoS("A joining etcd member starts again with the members as they are now", "member", m.Spec.Name, "was", cfg.initialCluster, "now", now)
					cfg.initialCluster = now
				}
			}
			next, err := launch(cfg)
			if err != nil {
				klog.ErrorS(err, "Starting an etcd member's process again", "member", m.Spec.Name)
				continue
			}
			m.mu.Lock()
			m.cur = next
			m.restarts++
			m.mu.Unlock()
			break
		}
	}
}

// PID is the process the member runs in now.
func (m *Member) PID() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cur.cmd.Process.Pid
}

// Restarts counts the member's processes started after its first.
func (m *Member) Restarts() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.restarts
}

// waitReady waits until the member's current process serves (it has
// joined a quorum), and fails if that process ends first.
func (m *Member) waitReady(ctx context.Context, timeout time.Duration, logFile string) error {
	m.mu.Lock()
	p := m.cur
	m.mu.Unlock()
	select {
	case <-p.ready:
		return nil
	case <-p.exited:
		return fmt.Errorf("etcd member %s failed: %w (see %s)", m.Spec.Name, p.err, logFile)
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(timeout):
		return fmt.Errorf("etcd member %s did not become ready within %s (see %s)", m.Spec.Name, timeout, logFile)
	}
}

// stopTimeout bounds a member's clean stop: its servers wait on their
// clients' streams, which a client that went away may never close. The
// process is killed after it.
const stopTimeout = 10 * time.Second

// Stop stops the member's process (its data stays) and its supervision:
// SIGTERM, and SIGKILL if it has not ended within stopTimeout. It
// returns once the process has ended.
func (m *Member) Stop() {
	m.stopOnce.Do(func() { close(m.stop) })
	<-m.done
}

// Halt stops the member as part of stopping every member at once: SIGINT,
// which stops it without first handing its leadership to a peer. A
// leader stopped with SIGTERM waits for a transfer that cannot happen
// while its peers stop too (etcd's request timeout, 7s).
func (m *Member) Halt() {
	m.halt.Store(true)
	m.Stop()
}

// initialCluster writes name=peerURL pairs.
// hasMemberData reports whether a member's data dir holds etcd's data: a
// write-ahead log (etcd makes the member directory before it checks the
// cluster it joins, so a member refused has one, empty).
func hasMemberData(dir string) bool {
	wals, _ := filepath.Glob(filepath.Join(dir, "member", "wal", "*.wal"))
	return len(wals) > 0
}

func initialCluster(specs []MemberSpec) string {
	parts := make([]string, 0, len(specs))
	for _, s := range specs {
		parts = append(parts, s.Name+"="+s.PeerURL())
	}
	return strings.Join(parts, ",")
}
