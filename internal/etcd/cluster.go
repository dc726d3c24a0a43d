package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"k8s.io/klog/v2"

	"github.com/capstan-dev/capstan/internal/atomicfile"
	"github.com/capstan-dev/capstan/internal/failpoint"
	"github.com/capstan-dev/capstan/internal/ports"
	"github.com/capstan-dev/capstan/internal/waitfor"
)

// BootstrapName is the member a new cluster starts with; it leaves once
// the control-plane machines' members have joined.
const BootstrapName = "etcd-bootstrap"

// Config is where the cluster's members live and how they are secured.
type Config struct {
	// DataDir is the cluster's data dir: member dirs are relative to it,
	// and the registry of members is DataDir/etcd-members.json.
	DataDir string
	TLS     TLSFiles
	LogFile string
	NoFsync bool
	// QuotaBackendBytes is each member's database quota (default
	// DefaultQuotaBackendBytes): past it etcd raises a NOSPACE alarm and
	// takes no write until the alarm is disarmed.
	QuotaBackendBytes int64
	// Partitionable has every member serve its peer port through a proxy
	// that the data dir's partition file controls (fault campaigns).
	Partitionable bool
	// Bootstrap is the first member of a new cluster (and of a data dir
	// from before members were per machine).
	Bootstrap MemberSpec
}

// Cluster runs this process's members and changes the membership.
type Cluster struct {
	cfg    Config
	proxy  *Proxy
	client *clientv3.Client
	health *healthChecker
	// Warnings are problems Start repaired (a registry that would not
	// validate), for the user to hear of.
	Warnings []string
	// learnerAdded, set by tests only, runs between etcd's answer to a
	// learner's addition and the learner's start.
	learnerAdded func(name string)

	mu       sync.Mutex
	registry []MemberSpec
	running  map[string]*Member
	stopped  map[string]bool
	// leaving are members being removed: no request is sent to them, as
	// a removed member that is asked anything panics on finding itself
	// no longer a member.
	leaving map[string]bool
	// members is the membership as last listed (syncLocked).
	members []*etcdserverpb.Member
	// sickSince is when running voting members started failing their
	// health checks; shunned are those the proxy no longer sends
	// clients to (see noteHealth).
	sickSince map[string]time.Time
	shunned   map[string]bool
}

func (c *Cluster) registryPath() string { return filepath.Join(c.cfg.DataDir, registryFile) }

// registryFile lists a data dir's members.
const registryFile = "etcd-members.json"

// othersMembersTimeout bounds Start's wait for the member processes of a
// capstan that was killed to end (see waitForOthersMembers).
const othersMembersTimeout = 15 * time.Second

// Start starts every member the registry lists (a new cluster: the
// bootstrap member), waits for them to form a quorum, and serves them
// behind the proxy.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	c := &Cluster{cfg: cfg, running: map[string]*Member{}, stopped: map[string]bool{}, leaving: map[string]bool{},
		sickSince: map[string]time.Time{}, shunned: map[string]bool{}}
	raw, err := os.ReadFile(c.registryPath())
	switch {
	case errors.Is(err, os.ErrNotExist):
		c.registry = []MemberSpec{cfg.Bootstrap}
	case err != nil:
		return nil, err
	default:
		if err := json.Unmarshal(raw, &c.registry); err != nil {
			return nil, fmt.Errorf("%s: %w (restore the cluster with capstan etcd restore)", c.registryPath(), err)
		}
	}
	var repaired bool
	if c.Warnings, repaired = c.repairRegistry(); repaired {
		for _, w := range c.Warnings {
			klog.Warning(w)
		}
		if err := c.writeRegistryLocked(); err != nil {
			return nil, err
		}
	}
	// Before any port is judged taken: those of a capstan killed a moment
	// ago are held by its dying members.
	if err := waitForOthersMembers(ctx, cfg.DataDir, othersMembersTimeout); err != nil {
		return nil, err
	}
	if err := c.relocate(); err != nil {
		return nil, err
	}
	// A new cluster is its bootstrap member alone, without data yet (the
	// registry may have been written before the member ever started).
	state := "existing"
	if len(c.registry) == 1 && c.registry[0].Name == cfg.Bootstrap.Name && c.registry[0].Dir == cfg.Bootstrap.Dir {
		if _, err := os.Stat(filepath.Join(cfg.DataDir, cfg.Bootstrap.Dir, "member")); errors.Is(err, os.ErrNotExist) {
			state = "new"
		}
	}
	if err := c.quorumPossible(); err != nil {
		return nil, err
	}
	if state == "existing" {
		if err := c.refuseAmnesiacs(); err != nil {
			return nil, err
		}
	}
	// A member being removed starts too: the removal may not have
	// happened, and then the quorum needs it until settle finishes the
	// removal. If it did happen, the member's process ends on finding
	// itself removed, and it alone.
	var voting, serving []MemberSpec
	for _, s := range c.registry {
		if s.Adding {
			continue
		}
		voting = append(voting, s)
		if s.Removing {
			c.leaving[s.Name] = true
		} else {
			serving = append(serving, s)
		}
	}
	if len(voting) == 0 {
		return nil, fmt.Errorf("%s lists no member to start", c.registryPath())
	}
	if len(serving) == 0 {
		serving = voting
	}
	if err := c.powerOnAtStart(voting); err != nil {
		return nil, err
	}
	// A member that cannot start (its data went with a removal the
	// registry does not show yet) is left out: waitQuorum decides.
	var startErrs []error
	for _, s := range voting {
		if c.stopped[s.Name] || (state == "existing" && c.amnesiac(s)) {
			continue
		}
		m, err := c.start(s, initialCluster(voting), state)
		if err != nil {
			klog.ErrorS(err, "An etcd member did not start", "member", s.Name)
			startErrs = append(startErrs, err)
			continue
		}
		c.running[s.Name] = m
	}
	if len(c.running) == 0 {
		return nil, fmt.Errorf("no etcd member of %s started: %w", c.registryPath(), errors.Join(startErrs...))
	}
	if c.proxy, err = NewProxy("127.0.0.1:0"); err != nil {
		c.Stop()
		return nil, err
	}
	if c.cfg.Partitionable {
		go c.proxy.followClientFaults(filepath.Join(c.cfg.DataDir, ClientFaultFile), c.proxy.stop)
	}
	if c.client, err = c.newClient(serving); err != nil {
		c.Stop()
		return nil, err
	}
	// The registry may list a member the cluster removed (capstan was
	// stopped after the removal and before the registry said so): it
	// never becomes ready, and must not hold the start. The cluster's own
	// list says who the members are, once a quorum serves.
	if err := c.waitQuorum(ctx, 2*time.Minute); err != nil {
		c.Stop()
		return nil, errors.Join(append([]error{err}, startErrs...)...)
	}
	if err := c.fixPeerURLs(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	if err := c.settle(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	c.shunUnhealthy(ctx)
	go c.watchHealth()
	return c, nil
}

// healthEvery is how often the cluster checks its members' health for
// the proxy's sake.
const healthEvery = time.Second

// watchHealth checks the members' health every healthEvery for as long
// as the proxy serves, so that kube-apiserver's connections leave a
// member cut off from the others within seconds (see noteHealth). The
// operator's own checks do the same, but only while it leads: after a
// restart it first waits out its predecessor's Lease, which outlasts any
// outage a client accepts (a partition of the member the proxy sent
// kube-apiserver to kept the API from writing for 150 s, until the
// operator led).
func (c *Cluster) watchHealth() {
	t := time.NewTicker(healthEvery)
	defer t.Stop()
	for {
		select {
		case <-c.proxy.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*healthEvery)
		_, _ = c.Members(ctx)
		cancel()
	}
}

// shunUnhealthy takes the voting members that fail their health check
// now (cut off from the others, hung) out of the proxy's backends at
// once: kube-apiserver starts on the proxy next, and its watch caches
// list through it, before the operator's checks (which shun a member
// after sickAfter) begin. A start inside a partition of the leader
// otherwise failed: the Machines' watch cache was still initializing,
// its list pinned to the member cut off, when client-go's retries ran
// out. A member healthy again is a backend again at the next check.
func (c *Cluster) shunUnhealthy(ctx context.Context) {
	members, err := c.Members(ctx)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	changed := false
	for _, m := range members {
		if since, sick := c.sickSince[m.Name]; sick && !c.shunned[m.Name] {
			c.sickSince[m.Name] = since.Add(-sickAfter)
			changed = true
		}
	}
	if changed {
		if err := c.syncLocked(c.members); err != nil {
			klog.ErrorS(err, "Pointing the etcd proxy at the healthy members")
		}
	}
}

// quorumPossible fails at once when the members that voted last are
// too few with their data to ever form a quorum again (their data dirs
// were deleted): no wait brings them back; a snapshot does.
func (c *Cluster) quorumPossible() error {
	var voting, lost []string
	for _, s := range c.registry {
		if !s.Voting || s.Adding {
			continue
		}
		voting = append(voting, s.Name)
		if _, err := os.Stat(filepath.Join(c.cfg.DataDir, s.Dir, "member")); errors.Is(err, os.ErrNotExist) {
			lost = append(lost, s.Name)
		}
	}
	if len(voting) == 0 || len(voting)-len(lost) >= len(voting)/2+1 {
		return nil
	}
	return fmt.Errorf("etcd cannot form a quorum: the data of %d of its %d voting members is gone (%s): "+
		"restore the cluster from a snapshot with `capstan etcd restore --from FILE --data-dir %s`",
		len(lost), len(voting), strings.Join(lost, ", "), c.cfg.DataDir)
}

// amnesiac is a member of an existing cluster whose data dir is gone
// (deleted by hand, or lost with its disk): started under its old ID with
// an empty log, it would have forgotten its votes and the entries it
// acknowledged, and could help elect a leader that lacks committed
// writes. etcd's own start refuses it ("member dataDir has been destroyed
// and must be removed from the cluster", as OpenShift's
// discover-etcd-initial-cluster says); so does capstan.
func (c *Cluster) amnesiac(s MemberSpec) bool {
	if s.Adding {
		return false
	}
	_, err := os.Stat(filepath.Join(c.cfg.DataDir, s.Dir, "member"))
	return errors.Is(err, os.ErrNotExist)
}

// refuseAmnesiacs writes every amnesiac member down as being removed,
// before anything starts: it is never started, and once a quorum serves,
// settle removes it from the cluster and forgets it, so that the operator
// adds its machine's member again, as a learner with a new ID and the
// leader's data (etcd's documented replacement of a member whose data is
// lost). quorumPossible has refused a cluster that lost a quorum's data.
func (c *Cluster) refuseAmnesiacs() error {
	var lost []string
	for i, s := range c.registry {
		if c.amnesiac(s) && !s.Removing {
			c.registry[i].Removing = true
			lost = append(lost, s.Name)
		}
	}
	if len(lost) == 0 {
		return nil
	}
	w := fmt.Sprintf("the data of etcd members %s is gone: they are removed from the cluster and join again as new members", strings.Join(lost, ", "))
	klog.Warning(w)
	c.Warnings = append(c.Warnings, w)
	return c.writeRegistryLocked()
}

// relocate gives a member whose recorded port another program took while
// capstan was down new ports, written down before the member starts on
// them; fixPeerURLs then points the membership at its new peer URL.
func (c *Cluster) relocate() error {
	moved := false
	for i, s := range c.registry {
		if s.Adding {
			continue
		}
		if !ports.Available(s.ClientPort) || !ports.Available(s.PeerPort) {
			free, err := c.freePortsLocked(2)
			if err != nil {
				return err
			}
			klog.InfoS("An etcd member's port is taken by another program: the member moves", "member", s.Name,
				"clientPort", s.ClientPort, "newClientPort", free[0], "peerPort", s.PeerPort, "newPeerPort", free[1])
			c.registry[i].ClientPort, c.registry[i].PeerPort = free[0], free[1]
			moved = true
		}
		if !ports.Available(s.MetricsPort) {
			free, err := c.freePortsLocked(1)
			if err != nil {
				return err
			}
			klog.InfoS("An etcd member's metrics port is taken by another program: it moves", "member", s.Name, "metricsPort", s.MetricsPort, "newMetricsPort", free[0])
			c.registry[i].MetricsPort = free[0]
			moved = true
		}
	}
	if !moved {
		return nil
	}
	return c.writeRegistryLocked()
}

// powerOnAtStart decides which members of stopped machines stay stopped:
// those whose machines were not asked to start while capstan was down
// (RequestPowerOn), as long as the others are a quorum of the voting
// members. Without a quorum no API could ever start a machine, so then
// every member starts, as a cluster's machines are all powered on to
// recover it.
func (c *Cluster) powerOnAtStart(voting []MemberSpec) error {
	// The quorum is of the voters: learners (started, non-Adding entries
	// too) count for nothing in it.
	var stopped []string
	voters, stoppedVoters := 0, 0
	for _, s := range voting {
		if s.Voting {
			voters++
		}
		if s.Stopped && !c.powerOnPending(s.Name) {
			stopped = append(stopped, s.Name)
			if s.Voting {
				stoppedVoters++
			}
		}
	}
	if voters-stoppedVoters < voters/2+1 {
		if len(stopped) > 0 {
			klog.InfoS("The etcd members of stopped machines start with capstan: the others are no quorum", "members", stopped)
		}
		stopped = nil
	}
	changed := false
	for i, s := range c.registry {
		stop := slices.Contains(stopped, s.Name)
		if stop {
			c.stopped[s.Name] = true
		}
		if s.Stopped != stop {
			c.registry[i].Stopped, changed = stop, true
		}
	}
	if !changed {
		return nil
	}
	return c.writeRegistryLocked()
}

func (c *Cluster) start(s MemberSpec, cluster, state string) (*Member, error) {
	mc := memberConfig{spec: s, dir: filepath.Join(c.cfg.DataDir, s.Dir), tls: c.cfg.TLS, logFile: c.cfg.LogFile,
		noFsync: c.cfg.NoFsync, initialCluster: cluster, state: state, quota: c.cfg.QuotaBackendBytes}
	if c.cfg.Partitionable {
		mc.partitionFile = filepath.Join(c.cfg.DataDir, PartitionFile)
	}
	if state == "existing" {
		mc.rediscover = func() (string, error) { return c.currentInitialCluster(s) }
	}
	return startMember(mc)
}

// currentInitialCluster is the initial cluster of joining member s as
// etcd lists the members now: each by its name, the ones not started yet
// (s itself) by the registry's.
func (c *Cluster) currentInitialCluster(s MemberSpec) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := c.client.MemberList(ctx)
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	registry := append([]MemberSpec(nil), c.registry...)
	c.mu.Unlock()
	if !slices.ContainsFunc(registry, func(r MemberSpec) bool { return r.Name == s.Name }) {
		registry = append(registry, s)
	}
	var parts []string
	for _, m := range list.Members {
		if len(m.PeerURLs) == 0 {
			continue
		}
		name := m.Name
		if name == "" {
			for _, r := range registry {
				if slices.Contains(m.PeerURLs, r.PeerURL()) {
					name = r.Name
				}
			}
		}
		if name == "" {
			return "", fmt.Errorf("member %x (%s) has no name yet and none in the registry", m.ID, m.PeerURLs[0])
		}
		parts = append(parts, name+"="+m.PeerURLs[0])
	}
	return strings.Join(parts, ","), nil
}

func (c *Cluster) newClient(specs []MemberSpec) (*clientv3.Client, error) {
	tlsInfo := transport.TLSInfo{CertFile: c.cfg.TLS.ClientCert, KeyFile: c.cfg.TLS.ClientKey, TrustedCAFile: c.cfg.TLS.CA}
	tlsConfig, err := tlsInfo.ClientConfig()
	if err != nil {
		return nil, err
	}
	c.health = newHealthChecker(tlsConfig)
	var endpoints []string
	for _, s := range specs {
		endpoints = append(endpoints, s.ClientURL())
	}
	return clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: tlsConfig, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

// fixPeerURLs points the membership at the members' current peer URLs
// (a data dir from before TLS advertised http).
func (c *Cluster) fixPeerURLs(ctx context.Context) error {
	list, err := c.client.MemberList(ctx)
	if err != nil {
		return err
	}
	// A lone member is the registry's lone member, whatever it was
	// called (a data dir from before per-machine members named it
	// "capstan").
	alone := len(list.Members) == 1 && len(c.registry) == 1
	for _, m := range list.Members {
		for _, s := range c.registry {
			if (s.Name == m.Name || alone) && (len(m.PeerURLs) != 1 || m.PeerURLs[0] != s.PeerURL()) {
				if _, err := c.client.MemberUpdate(ctx, m.ID, []string{s.PeerURL()}); err != nil {
					return fmt.Errorf("updating the peer URL of member %s: %w", s.Name, err)
				}
			}
		}
	}
	return nil
}

// waitQuorum waits until the cluster's list of members can be read (a
// quorum serves), then until a quorum of the voting members the list
// names is ready. Members of the registry the list does not name were
// removed: they are stopped and forgotten.
func (c *Cluster) waitQuorum(ctx context.Context, timeout time.Duration) error {
	var list *clientv3.MemberListResponse
	err := waitfor.Poll(ctx, 200*time.Millisecond, timeout, func(ctx context.Context) (bool, string, error) {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		var err error
		if list, err = c.client.MemberList(lctx); err != nil {
			return false, "listing the members: " + err.Error(), nil
		}
		return true, "", nil
	})
	if err != nil {
		return fmt.Errorf("etcd has no quorum (see %s; a cluster whose members' data is lost is restored with capstan etcd restore --from SNAPSHOT): %w", c.cfg.LogFile, err)
	}
	var removed []string
	c.mu.Lock()
	for _, s := range c.registry {
		// By name too: a member that moved (relocate) is listed under
		// its old peer URL until fixPeerURLs.
		if !s.Adding && !s.Removing && byPeerURL(list.Members, s.PeerURL()) == nil &&
			!slices.ContainsFunc(list.Members, func(m *etcdserverpb.Member) bool { return m.Name == s.Name }) {
			removed = append(removed, s.Name)
		}
	}
	c.mu.Unlock()
	for _, name := range removed {
		klog.InfoS("Forgetting an etcd member the cluster removed while capstan was stopped", "member", name)
		c.forget(name)
	}
	voting := 0
	c.mu.Lock()
	var waits []*Member
	for _, m := range list.Members {
		if m.IsLearner {
			continue
		}
		voting++
		// By name too: a member that moved (relocate) is listed under its
		// old peer URL until fixPeerURLs, and a lone one is the quorum.
		for _, s := range c.registry {
			if r := c.running[s.Name]; r != nil && (slices.Contains(m.PeerURLs, s.PeerURL()) || m.Name == s.Name) {
				waits = append(waits, r)
				break
			}
		}
	}
	c.mu.Unlock()
	return waitReadyQuorum(ctx, waits, voting, timeout, c.cfg.LogFile)
}

// waitReadyQuorum waits for the members in parallel and returns as soon
// as a quorum of voting is ready: a member that is cut off, or hung, must
// not hold the start while the others serve (the operator's health
// checks report it).
func waitReadyQuorum(ctx context.Context, waits []*Member, voting int, timeout time.Duration, logFile string) error {
	quorum := voting/2 + 1
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan error, len(waits))
	for _, m := range waits {
		go func() { results <- m.waitReady(ctx, timeout, logFile) }()
	}
	ready := 0
	var errs []error
	for range waits {
		if err := <-results; err != nil {
			errs = append(errs, err)
			continue
		}
		if ready++; ready >= quorum {
			return nil
		}
	}
	err := fmt.Errorf("%d of %d voting etcd members ready, a quorum is %d", ready, voting, quorum)
	if len(errs) > 0 {
		err = fmt.Errorf("%w: %w", err, errors.Join(errs...))
	}
	return err
}

// settle resolves what a stop left half done: a member written down as
// being added is started if the cluster has it, forgotten if not; a
// member written down as being removed is removed if the cluster still
// has it, and forgotten; the proxy and the client follow the voting
// members.
func (c *Cluster) settle(ctx context.Context) error {
	list, err := c.client.MemberList(ctx)
	if err != nil {
		return err
	}
	c.mu.Lock()
	var removing []MemberSpec
	for _, s := range c.registry {
		if s.Removing {
			removing = append(removing, s)
		}
	}
	c.mu.Unlock()
	for _, s := range removing {
		if m := byPeerURL(list.Members, s.PeerURL()); m != nil {
			klog.InfoS("Finishing the removal of an etcd member that capstan stopped in the middle of", "member", s.Name)
			if err := c.removeOnceHealthy(ctx, m.ID); err != nil {
				return fmt.Errorf("finishing the removal of member %s: %w", s.Name, err)
			}
			failpoint.Hit(failpoint.EtcdMemberRemoved)
		}
		c.forget(s.Name)
	}
	if len(removing) > 0 {
		if list, err = c.client.MemberList(ctx); err != nil {
			return err
		}
	}
	if removed, err := c.removeUnregistered(ctx, list.Members); err != nil {
		return err
	} else if removed {
		if list, err = c.client.MemberList(ctx); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var keep []MemberSpec
	for _, s := range c.registry {
		if !s.Adding {
			keep = append(keep, s)
			continue
		}
		if byPeerURL(list.Members, s.PeerURL()) == nil {
			_ = os.RemoveAll(filepath.Join(c.cfg.DataDir, s.Dir))
			continue
		}
		s.Adding = false
		m, err := c.start(s, initialCluster(membersAsSpecs(list.Members, append(keep, s))), "existing")
		if err != nil {
			return err
		}
		c.running[s.Name] = m
		keep = append(keep, s)
	}
	c.registry = keep
	return c.syncLocked(list.Members)
}

// removeOnceHealthy removes a member from the cluster. etcd refuses
// membership changes until its leader has heard from a quorum for a while
// ("unhealthy cluster"), which a cluster that just started has not: the
// removal is tried again for a minute.
func (c *Cluster) removeOnceHealthy(ctx context.Context, id uint64) error {
	return waitfor.Poll(ctx, 200*time.Millisecond, time.Minute, func(ctx context.Context) (bool, string, error) {
		_, err := c.client.MemberRemove(ctx, id)
		switch {
		case err == nil || strings.Contains(err.Error(), "member not found"):
			return true, "", nil
		case errors.Is(err, rpctypes.ErrUnhealthy) || strings.Contains(err.Error(), rpctypes.ErrUnhealthy.Error()):
			return false, err.Error(), nil
		}
		return false, "", err
	})
}

// removeUnregistered removes from the cluster every member the registry
// does not name (repairRegistry left its damaged entry out): capstan
// never starts it again, and every member started later is given an
// initial cluster built from the registry, which etcd refuses when it
// names fewer members than the cluster has ("member count is unequal").
// Removed, the member's machine gets a new member from the operator, as
// a learner. It says whether it removed any.
func (c *Cluster) removeUnregistered(ctx context.Context, members []*etcdserverpb.Member) (bool, error) {
	c.mu.Lock()
	var strays []*etcdserverpb.Member
	for _, m := range members {
		if !slices.ContainsFunc(c.registry, func(s MemberSpec) bool { return s.Name == m.Name || slices.Contains(m.PeerURLs, s.PeerURL()) }) {
			strays = append(strays, m)
		}
	}
	c.mu.Unlock()
	for _, m := range strays {
		w := fmt.Sprintf("etcd member %s (%x, %v) is not in the registry %s: it is removed from the cluster, and its machine's member joins again", m.Name, m.ID, m.PeerURLs, c.registryPath())
		klog.Warning(w)
		c.Warnings = append(c.Warnings, w)
		if err := c.removeOnceHealthy(ctx, m.ID); err != nil {
			return false, fmt.Errorf("removing member %s, which the registry does not list: %w", m.Name, err)
		}
	}
	return len(strays) > 0, nil
}

// syncLocked writes the registry and points the proxy and the client at
// the voting members.
func (c *Cluster) syncLocked(members []*etcdserverpb.Member) error {
	for i := range c.registry {
		m := byPeerURL(members, c.registry[i].PeerURL())
		c.registry[i].Voting = m != nil && !m.IsLearner
	}
	if err := c.writeRegistryLocked(); err != nil {
		return err
	}
	var backends, endpoints, sick []string
	shunned := map[string]bool{}
	for _, s := range c.registry {
		m := byPeerURL(members, s.PeerURL())
		if m == nil || m.IsLearner || c.leaving[s.Name] || c.stopped[s.Name] {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(s.ClientPort))
		if since, ok := c.sickSince[s.Name]; ok && time.Since(since) >= sickAfter {
			sick = append(sick, addr)
			shunned[s.Name] = true
			continue
		}
		backends = append(backends, addr)
		endpoints = append(endpoints, s.ClientURL())
	}
	if len(backends) == 0 {
		// None healthy: no better place to send a client.
		backends, shunned = sick, map[string]bool{}
	}
	for name := range shunned {
		if !c.shunned[name] {
			klog.InfoS("An etcd member has failed its health checks: kube-apiserver's connections leave it", "member", name)
		}
	}
	c.shunned = shunned
	c.members = members
	c.proxy.SetBackends(backends)
	if len(endpoints) > 0 {
		c.client.SetEndpoints(endpoints...)
	}
	return nil
}

// writeRegistryLocked writes the registry durably: a temporary file,
// synced, renamed over the old one, and the directory synced.
func (c *Cluster) writeRegistryLocked() error {
	if err := validateRegistry(c.registry, c.cfg.Bootstrap.Dir); err != nil {
		return fmt.Errorf("not writing an invalid etcd member registry: %w", err)
	}
	raw, err := json.MarshalIndent(c.registry, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(c.registryPath(), raw, 0o600)
}

func byPeerURL(members []*etcdserverpb.Member, url string) *etcdserverpb.Member {
	for _, m := range members {
		if slices.Contains(m.PeerURLs, url) {
			return m
		}
	}
	return nil
}

// membersAsSpecs is the initial cluster of a joining member: every member
// the cluster lists, named as the registry names them.
func membersAsSpecs(members []*etcdserverpb.Member, registry []MemberSpec) []MemberSpec {
	var out []MemberSpec
	for _, m := range members {
		for _, s := range registry {
			if slices.Contains(m.PeerURLs, s.PeerURL()) {
				out = append(out, s)
			}
		}
	}
	return out
}

// URL is the address kube-apiserver uses: the proxy in front of the
// voting members.
func (c *Cluster) URL() string { return "https://" + c.proxy.Addr() }

// Quota is the members' database quota.
func (c *Cluster) Quota() int64 {
	if c.cfg.QuotaBackendBytes > 0 {
		return c.cfg.QuotaBackendBytes
	}
	return DefaultQuotaBackendBytes
}

// Client is a client of the voting members.
func (c *Cluster) Client() *clientv3.Client { return c.client }

// Stop stops this process's members.
func (c *Cluster) Stop() {
	if c.proxy != nil {
		c.proxy.Close()
	}
	if c.client != nil {
		c.client.Close()
	}
	if c.health != nil {
		c.health.close()
	}
	c.mu.Lock()
	members := c.running
	c.running = map[string]*Member{}
	c.mu.Unlock()
	// All at once: stopping them one by one would leave the last ones
	// without a quorum, waiting on each other.
	var wg sync.WaitGroup
	for _, m := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.Halt()
		}()
	}
	wg.Wait()
}

// repairRegistry mends what validateRegistry would refuse, so that a
// registry damaged by hand or by an old bug never stops every start: an
// entry with no name, a name listed before, or a data dir that is not a
// member's is left out (its data stays where it is); a port that is not
// one, or that an entry before has, is replaced by a free one. Peer ports
// are kept first, as the membership names them (a member whose peer port
// moves is reached only once fixPeerURLs has a quorum to tell the
// others); client and metrics ports follow, and move freely. An entry
// both being added and removed is being removed. It returns a warning for
// each repair, and whether it changed anything: a member of a registry
// from before metrics ports were recorded gets one, without a warning.
func (c *Cluster) repairRegistry() ([]string, bool) {
	var warnings []string
	names := map[string]bool{}
	var keep []MemberSpec
	for i, s := range c.registry {
		where := fmt.Sprintf("etcd member registry %s: entry %d (%q)", c.registryPath(), i, s.Name)
		switch err := validMemberDir(s.Dir, c.cfg.Bootstrap.Dir); {
		case s.Name == "":
			warnings = append(warnings, where+" has no name: left out")
			continue
		case names[s.Name]:
			warnings = append(warnings, where+" is listed before: left out")
			continue
		case err != nil:
			warnings = append(warnings, fmt.Sprintf("%s: dir %q: %v: left out", where, s.Dir, err))
			continue
		}
		names[s.Name] = true
		if s.Adding && s.Removing {
			warnings = append(warnings, where+" is both being added and removed: it is being removed")
			s.Adding = false
		}
		keep = append(keep, s)
	}
	changed := len(keep) != len(c.registry)
	c.registry = keep
	used := map[int]bool{}
	type port struct {
		what string
		get  func(*MemberSpec) *int
	}
	for _, p := range []port{
		{"peer", func(s *MemberSpec) *int { return &s.PeerPort }},
		{"client", func(s *MemberSpec) *int { return &s.ClientPort }},
		{"metrics", func(s *MemberSpec) *int { return &s.MetricsPort }},
	} {
		for i := range c.registry {
			s := &c.registry[i]
			n := p.get(s)
			if *n > 0 && *n <= 65535 && !used[*n] {
				used[*n] = true
				continue
			}
			free, err := c.freePortsLocked(1, used)
			if err != nil {
				warnings = append(warnings, fmt.Sprintf("etcd member %s: its %s port %d is not its own and no free port was found: %v", s.Name, p.what, *n, err))
				continue
			}
			if *n != 0 || p.what != "metrics" {
				warnings = append(warnings, fmt.Sprintf("etcd member registry %s: member %s's %s port %d is not its own: it moves to %d",
					c.registryPath(), s.Name, p.what, *n, free[0]))
			}
			*n, used[free[0]] = free[0], true
			changed = true
		}
	}
	return warnings, changed || len(warnings) > 0
}

// freePortsLocked returns n free loopback ports, none of them recorded
// for a member of the registry (a stopped member's ports are its own),
// none of also, nor the same as another.
func (c *Cluster) freePortsLocked(n int, also ...map[int]bool) ([]int, error) {
	taken := map[int]bool{}
	for _, s := range c.registry {
		taken[s.ClientPort], taken[s.PeerPort], taken[s.MetricsPort] = true, true, true
	}
	for _, m := range also {
		for p := range m {
			taken[p] = true
		}
	}
	out := make([]int, 0, n)
	for range n {
		p, err := ports.FreeExcept(taken)
		if err != nil {
			return nil, err
		}
		taken[p] = true
		out = append(out, p)
	}
	return out, nil
}

func parseRegistry(raw []byte) ([]MemberSpec, error) {
	var specs []MemberSpec
	if err := json.Unmarshal(raw, &specs); err != nil {
		return nil, err
	}
	return specs, validateRegistry(specs, "")
}

// MembersDir holds the data dirs of the machines' members.
const MembersDir = "etcd-members"

// validateRegistry checks what the registry says before anything acts on
// it: a member's data dir is removed with the member, so an entry must
// never point at the data dir itself or outside it. Each entry has a
// name, a data dir under etcd-members/ (or the bootstrap member's,
// bootstrapDir when known, else a single directory), and ports of its
// own.
func validateRegistry(specs []MemberSpec, bootstrapDir string) error {
	names := map[string]bool{}
	ports := map[int]string{}
	var errs []error
	for i, s := range specs {
		where := fmt.Sprintf("entry %d (%q)", i, s.Name)
		switch {
		case s.Name == "":
			errs = append(errs, fmt.Errorf("entry %d: no name", i))
		case names[s.Name]:
			errs = append(errs, fmt.Errorf("%s: the name is listed twice", where))
		}
		names[s.Name] = true
		if err := validMemberDir(s.Dir, bootstrapDir); err != nil {
			errs = append(errs, fmt.Errorf("%s: dir %q: %w", where, s.Dir, err))
		}
		for _, p := range []int{s.ClientPort, s.PeerPort, s.MetricsPort} {
			if p <= 0 || p > 65535 {
				errs = append(errs, fmt.Errorf("%s: port %d is not a TCP port", where, p))
				continue
			}
			if other, ok := ports[p]; ok {
				errs = append(errs, fmt.Errorf("%s: port %d is also %s's", where, p, other))
			}
			ports[p] = s.Name
		}
		if s.Adding && s.Removing {
			errs = append(errs, fmt.Errorf("%s: both adding and removing", where))
		}
	}
	return errors.Join(errs...)
}

func validMemberDir(dir, bootstrapDir string) error {
	switch {
	case dir == "":
		return errors.New("empty: the member's data would be the whole data dir")
	case filepath.IsAbs(dir) || !filepath.IsLocal(dir) || filepath.Clean(dir) != dir:
		return errors.New("not a clean path inside the data dir")
	case bootstrapDir != "" && dir == bootstrapDir:
		return nil
	case filepath.Dir(dir) == MembersDir:
		return nil
	case bootstrapDir == "" && !strings.ContainsRune(dir, filepath.Separator) && dir != MembersDir:
		return nil
	}
	return fmt.Errorf("not the bootstrap member's dir nor one under %s/", MembersDir)
}

// ReadRegistry returns the members a data dir's registry lists (none when
// it has no registry yet).
func ReadRegistry(dataDir string) ([]MemberSpec, error) {
	raw, err := os.ReadFile(filepath.Join(dataDir, registryFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return parseRegistry(raw)
}

// MetricsURLs are the /metrics endpoints of the cluster's members that
// this process runs, stopped ones included (a scrape of those fails, as
// of a member down); a member removed from the cluster is not one.
//
// The membership is asked of the cluster (a second at most); without an
// answer (no quorum) the last one known stands.
func (c *Cluster) MetricsURLs() []string {
	var live []*etcdserverpb.Member
	if client := c.client; client != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if list, err := client.MemberList(ctx); err == nil {
			live = list.Members
		}
		cancel()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if live == nil {
		live = c.members
	}
	var out []string
	for _, s := range membersAsSpecs(live, c.registry) {
		out = append(out, s.MetricsURL()+"/metrics")
	}
	sort.Strings(out)
	return out
}

// TLS are the files of the cluster's certificates.
func (c *Cluster) TLS() TLSFiles { return c.cfg.TLS }
