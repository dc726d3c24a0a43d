// Package etcd runs the control plane's etcd as OpenShift does: one member
// per control-plane machine, each a real embedded etcd with its own data
// dir and loopback ports, serving TLS with the cluster's CA. A bootstrap
// member starts the cluster and leaves it once the machines' members have
// joined (as the bootstrap node's etcd does in an OpenShift install).
// kube-apiserver reaches whichever members are up through one loopback
// proxy, so members can come and go under it.
package etcd

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
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
	// Adding marks a member whose addition to the cluster may not have
	// happened: capstan stopped between writing it down and adding it.
	Adding bool `json:"adding,omitempty"`
	// Removing marks a member whose removal from the cluster may have
	// happened: written before the removal is asked for, so a restart
	// never starts a member the cluster may no longer have (etcd panics
	// on finding itself removed) and finishes what was decided.
	Removing bool `json:"removing,omitempty"`
	// Added is when the member was added to the cluster (written before
	// the add): a learner that has not joined some time after is given up.
	Added time.Time `json:"added,omitzero"`
}

// ClientURL is where the member serves clients.
func (s MemberSpec) ClientURL() string { return "https://127.0.0.1:" + strconv.Itoa(s.ClientPort) }

// PeerURL is where the member talks to its peers.
func (s MemberSpec) PeerURL() string { return "https://127.0.0.1:" + strconv.Itoa(s.PeerPort) }

// TLSFiles are the certificates members and their clients use, all signed
// by the cluster's CA.
type TLSFiles struct {
	CA string
	// Serving is the members' certificate for clients and peers (it is
	// both server and client certificate, for 127.0.0.1).
	ServingCert, ServingKey string
	// Client is the certificate capstan's own clients present.
	ClientCert, ClientKey string
}

func (t TLSFiles) serving() transport.TLSInfo {
	return transport.TLSInfo{CertFile: t.ServingCert, KeyFile: t.ServingKey, TrustedCAFile: t.CA, ClientCertAuth: true}
}

// Member is a running member.
type Member struct {
	Spec MemberSpec
	etcd *embed.Etcd
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
}

func startMember(c memberConfig) (*Member, error) {
	cfg := embed.NewConfig()
	cfg.Name = c.spec.Name
	cfg.Dir = c.dir
	client, _ := url.Parse(c.spec.ClientURL())
	peer, _ := url.Parse(c.spec.PeerURL())
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.ClientTLSInfo = c.tls.serving()
	cfg.PeerTLSInfo = c.tls.serving()
	cfg.InitialCluster = c.initialCluster
	cfg.ClusterState = c.state
	cfg.InitialClusterToken = "capstan"
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{c.logFile}
	// Room for large simulated clusters; the apiserver compacts history
	// every five minutes itself.
	cfg.QuotaBackendBytes = 8 << 30
	cfg.UnsafeNoFsync = c.noFsync
	cfg.MaxTxnOps = 10000
	// Elections on one machine's loopback: a dead leader is noticed in
	// about a second, as on a real low-latency network.
	cfg.TickMs = 100
	cfg.ElectionMs = 1000
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("starting etcd member %s in %s: %w", c.spec.Name, c.dir, err)
	}
	return &Member{Spec: c.spec, etcd: e}, nil
}

// waitReady waits until the member serves (it has joined a quorum).
func (m *Member) waitReady(ctx context.Context, timeout time.Duration, logFile string) error {
	select {
	case <-m.etcd.Server.ReadyNotify():
		return nil
	case err := <-m.etcd.Err():
		return fmt.Errorf("etcd member %s failed: %w", m.Spec.Name, err)
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(timeout):
		return fmt.Errorf("etcd member %s did not become ready within %s (see %s)", m.Spec.Name, timeout, logFile)
	}
}

// stopTimeout bounds a member's stop: its servers wait on their clients'
// streams, which a client that went away may never close.
const stopTimeout = 10 * time.Second

// Stop stops the member (its data stays), giving up the wait after
// stopTimeout.
func (m *Member) Stop() {
	done := make(chan struct{})
	go func() {
		m.etcd.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(stopTimeout):
		klog.InfoS("etcd member did not stop in time; going on", "member", m.Spec.Name, "timeout", stopTimeout)
	}
}

// initialCluster writes name=peerURL pairs.
func initialCluster(specs []MemberSpec) string {
	parts := make([]string, 0, len(specs))
	for _, s := range specs {
		parts = append(parts, s.Name+"="+s.PeerURL())
	}
	return strings.Join(parts, ",")
}
