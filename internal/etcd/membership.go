package etcd

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"k8s.io/klog/v2"

	"github.com/capstan-dev/capstan/internal/failpoint"
)

// MemberStatus is one member as the cluster and this process see it.
type MemberStatus struct {
	Name      string
	ID        uint64
	PeerURL   string
	ClientURL string
	Learner   bool
	// Started: the member has joined (a member added but not yet
	// started has no name in the cluster's list).
	Started bool
	// Healthy: it served a read in time (see healthChecker).
	Healthy bool
	// AppliedIndex is the raft index it has applied, Leader the member
	// it follows, when it answered.
	AppliedIndex uint64
	Leader       uint64
	// Local: this process runs it (it is in the registry).
	Local bool
	// Stopped: this process stopped it with its machine.
	Stopped bool
	// Added is when this process added it (zero when it did not).
	Added time.Time
}

// List lists the cluster's members without asking them for their health.
func (c *Cluster) List(ctx context.Context) ([]MemberStatus, error) {
	out, _, err := c.list(ctx)
	return out, err
}

// list is List, and the members not to be asked anything: those stopped
// and those being removed (a removed member that is asked anything
// panics on finding itself no longer a member).
func (c *Cluster) list(ctx context.Context) ([]MemberStatus, map[string]bool, error) {
	list, err := c.client.MemberList(ctx)
	if err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	registry := append([]MemberSpec(nil), c.registry...)
	quiet := map[string]bool{}
	for k, v := range c.stopped {
		quiet[k] = v
	}
	for k, v := range c.leaving {
		quiet[k] = quiet[k] || v
	}
	stopped := maps.Clone(c.stopped)
	c.mu.Unlock()
	var out []MemberStatus
	for _, m := range list.Members {
		st := statusOf(m)
		for _, s := range registry {
			if s.PeerURL() == st.PeerURL {
				st.Local, st.Name, st.Added = true, s.Name, s.Added
				st.ClientURL = s.ClientURL()
				st.Stopped = stopped[s.Name]
			}
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, quiet, nil
}

// Members lists the cluster's members with their health.
func (c *Cluster) Members(ctx context.Context) ([]MemberStatus, error) {
	out, quiet, err := c.list(ctx)
	if err != nil {
		return nil, err
	}
	checkHealth(ctx, c.health, out, quiet)
	c.noteHealth(out)
	return out, nil
}

// sickAfter is how long a running voting member must fail its health
// checks before kube-apiserver's connections leave it.
const sickAfter = 2 * time.Second

// noteHealth follows the running voting members' health: one that has
// failed its checks for sickAfter (cut off from the others, without a
// leader) leaves the proxy's backends, and the apiserver's connections
// to it are closed so that they reconnect to a member that can serve;
// it is a backend again once healthy. The proxy keeps at least one
// backend.
func (c *Cluster) noteHealth(members []MemberStatus) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	changed := false
	seen := map[string]bool{}
	for _, m := range members {
		if !m.Local || m.Learner || !m.Started || m.Stopped || c.leaving[m.Name] {
			continue
		}
		seen[m.Name] = true
		since, sick := c.sickSince[m.Name]
		switch {
		case m.Healthy && sick:
			changed = changed || now.Sub(since) >= sickAfter
			delete(c.sickSince, m.Name)
		case !m.Healthy && !sick:
			c.sickSince[m.Name] = now
		case !m.Healthy && now.Sub(since) >= sickAfter && !c.shunned[m.Name]:
			changed = true
		}
	}
	for name := range c.sickSince {
		if !seen[name] {
			delete(c.sickSince, name)
			changed = true
		}
	}
	if changed {
		if err := c.syncLocked(c.members); err != nil {
			klog.ErrorS(err, "Pointing the etcd proxy at the healthy members")
		}
	}
}

// checkHealth asks each member but the quiet ones for its health, all at
// once, and forgets the clients of members gone.
func checkHealth(ctx context.Context, h *healthChecker, members []MemberStatus, quiet map[string]bool) {
	var wg sync.WaitGroup
	urls := make([]string, 0, len(members))
	for i := range members {
		st := &members[i]
		urls = append(urls, st.ClientURL)
		if quiet[st.Name] || !st.Started {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			mh := h.check(ctx, st.ClientURL, st.Learner)
			st.Healthy, st.AppliedIndex, st.Leader = mh.Healthy, mh.AppliedIndex, mh.Leader
		}()
	}
	wg.Wait()
	h.keep(urls)
}

// statusOf is a member as the cluster's list has it.
func statusOf(m *etcdserverpb.Member) MemberStatus {
	st := MemberStatus{Name: m.Name, ID: m.ID, Learner: m.IsLearner, Started: m.Name != ""}
	if len(m.PeerURLs) > 0 {
		st.PeerURL = m.PeerURLs[0]
	}
	if len(m.ClientURLs) > 0 {
		st.ClientURL = m.ClientURLs[0]
	}
	return st
}

// AddLearner adds a member for name as a learner and starts it: it
// catches up with the leader before it can be promoted to vote.
func (c *Cluster) AddLearner(ctx context.Context, name string) error {
	c.mu.Lock()
	for _, s := range c.registry {
		if s.Name == name {
			c.mu.Unlock()
			return fmt.Errorf("%w: %s", ErrMemberExists, name)
		}
	}
	free, err := c.freePortsLocked(3)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	clientPort, peerPort, metricsPort := free[0], free[1], free[2]
	// A directory left by a member of that name that was removed (a kill
	// between the registry's write and the data's removal) would start
	// the learner as the removed member: it goes first.
	if err := os.RemoveAll(filepath.Join(c.cfg.DataDir, MembersDir, name)); err != nil {
		c.mu.Unlock()
		return fmt.Errorf("removing the stale data of member %s: %w", name, err)
	}
	spec := MemberSpec{Name: name, Dir: filepath.Join(MembersDir, name), ClientPort: clientPort, PeerPort: peerPort, MetricsPort: metricsPort,
		Adding: true, Added: time.Now()}
	// Written down first: a stop between this and the member's start is
	// settled at the next start, either way.
	c.registry = append(c.registry, spec)
	list, err := c.client.MemberList(ctx)
	if err == nil {
		err = c.syncLocked(list.Members)
	}
	c.mu.Unlock()
	if err != nil {
		return err
	}
	failpoint.Hit(failpoint.EtcdAddWritten)
	added, err := c.client.MemberAddAsLearner(ctx, []string{spec.PeerURL()})
	if err != nil {
		c.forget(name)
		return fmt.Errorf("adding member %s: %w", name, err)
	}
	failpoint.Hit(failpoint.EtcdLearnerAdded)
	if c.learnerAdded != nil {
		c.learnerAdded(name)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	spec.Adding = false
	for i := range c.registry {
		if c.registry[i].Name == name {
			c.registry[i] = spec
		}
	}
	m, err := c.start(spec, initialCluster(membersAsSpecs(added.Members, c.registry)), "existing")
	if err != nil {
		return err
	}
	c.running[name] = m
	return c.syncLocked(added.Members)
}

// ErrMemberExists is AddLearner's answer for a name this process runs a
// member of already.
var ErrMemberExists = errors.New("an etcd member of that name is in the registry")

// ForgetRemoved forgets the members of the registry that the cluster no
// longer lists, removed behind capstan's back (etcdctl member remove, as
// OpenShift documents for replacing an unhealthy member): their processes
// stop and their data goes, so that their machines get new members. It
// returns their names.
func (c *Cluster) ForgetRemoved(ctx context.Context) ([]string, error) {
	// The registry is read before the list: a member added since is in
	// both or in neither.
	c.mu.Lock()
	registry := append([]MemberSpec(nil), c.registry...)
	c.mu.Unlock()
	list, err := c.client.MemberList(ctx)
	if err != nil {
		return nil, err
	}
	var gone []string
	for _, s := range registry {
		if s.Adding || s.Removing || byPeerURL(list.Members, s.PeerURL()) != nil {
			continue
		}
		klog.InfoS("Forgetting an etcd member the cluster no longer lists: it was removed by someone else", "member", s.Name)
		c.forget(s.Name)
		gone = append(gone, s.Name)
	}
	return gone, nil
}

// Promote makes a learner a voting member; it fails (and is tried again)
// until the learner has caught up with the leader.
func (c *Cluster) Promote(ctx context.Context, name string) error {
	st, err := c.member(ctx, name)
	if err != nil {
		return err
	}
	if !st.Learner {
		return nil
	}
	resp, err := c.client.MemberPromote(ctx, st.ID)
	if err != nil {
		return fmt.Errorf("promoting member %s: %w", name, err)
	}
	failpoint.Hit(failpoint.EtcdLearnerPromoted)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.syncLocked(resp.Members)
}

// Remove takes a member out of the cluster, stops it and deletes its data.
func (c *Cluster) Remove(ctx context.Context, name string) error {
	st, err := c.member(ctx, name)
	if err != nil && !errors.Is(err, errNoMember) {
		return err
	}
	if err == nil {
		// Out of every client's way first: the proxy drops its
		// connections, the client its endpoint; and written down as
		// being removed before the removal is asked for.
		c.mu.Lock()
		c.leaving[name] = true
		c.setRemovingLocked(name, true)
		list, lerr := c.client.MemberList(ctx)
		if lerr == nil {
			lerr = c.syncLocked(list.Members)
		}
		c.mu.Unlock()
		if lerr != nil {
			c.unleave(name)
			return lerr
		}
		failpoint.Hit(failpoint.EtcdRemovalWritten)
		if _, err := c.client.MemberRemove(ctx, st.ID); err != nil && !strings.Contains(err.Error(), "member not found") {
			// A removal that timed out may still have happened: a member
			// gone from the list is forgotten, never asked again.
			if list, lerr := c.client.MemberList(ctx); lerr != nil || byPeerURL(list.Members, st.PeerURL) != nil {
				c.unleave(name)
				return fmt.Errorf("removing member %s: %w", name, err)
			}
		}
		failpoint.Hit(failpoint.EtcdMemberRemoved)
	}
	c.forget(name)
	return nil
}

// RemoveID removes a member this process does not run and the cluster
// lists without a name: a member added whose start never happened.
func (c *Cluster) RemoveID(ctx context.Context, id uint64) error {
	if _, err := c.client.MemberRemove(ctx, id); err != nil && !strings.Contains(err.Error(), "member not found") {
		return fmt.Errorf("removing member %x: %w", id, err)
	}
	return nil
}

// unleave takes back a removal that did not happen.
func (c *Cluster) unleave(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.leaving, name)
	c.setRemovingLocked(name, false)
	if err := c.writeRegistryLocked(); err != nil {
		klog.ErrorS(err, "Writing the etcd member registry", "member", name)
	}
}

func (c *Cluster) setRemovingLocked(name string, removing bool) {
	for i := range c.registry {
		if c.registry[i].Name == name {
			c.registry[i].Removing = removing
		}
	}
}

// forget stops a local member and drops it from the registry.
func (c *Cluster) forget(name string) {
	// Stopped outside the lock: a member's stop waits on its clients,
	// and nothing else should wait on that.
	c.mu.Lock()
	m := c.running[name]
	delete(c.running, name)
	c.mu.Unlock()
	if m != nil {
		m.Stop()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.stopped, name)
	delete(c.leaving, name)
	var keep []MemberSpec
	var dirs []string
	for _, s := range c.registry {
		if s.Name == name {
			dirs = append(dirs, s.Dir)
			continue
		}
		keep = append(keep, s)
	}
	c.registry = keep
	// The registry is written before the data goes: a stop in between
	// leaves a stray directory, never an entry without its data.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := c.client.MemberList(ctx)
	if err == nil {
		err = c.syncLocked(list.Members)
	} else {
		err = c.writeRegistryLocked()
	}
	if err != nil {
		klog.ErrorS(err, "Writing the etcd member registry; the removed member's data stays", "member", name)
		return
	}
	for _, d := range dirs {
		_ = os.RemoveAll(filepath.Join(c.cfg.DataDir, d))
	}
}

var errNoMember = errors.New("no such member")

func (c *Cluster) member(ctx context.Context, name string) (MemberStatus, error) {
	all, err := c.Members(ctx)
	if err != nil {
		return MemberStatus{}, err
	}
	for _, m := range all {
		if m.Name == name {
			return m, nil
		}
	}
	return MemberStatus{}, fmt.Errorf("%w: %s", errNoMember, name)
}

// StopMember stops a local member as its machine stops; its data stays.
// The stop is written down first, and the member leaves the proxy and the
// client before its process goes.
func (c *Cluster) StopMember(name string) {
	c.mu.Lock()
	m := c.running[name]
	if m != nil {
		delete(c.running, name)
		c.stopped[name] = true
		c.setStoppedLocked(name, true)
		if err := c.syncLocked(c.members); err != nil {
			klog.ErrorS(err, "Writing the etcd member registry", "member", name)
		}
	}
	c.mu.Unlock()
	if m != nil {
		m.Stop()
	}
}

// StartMember starts a stopped local member again.
func (c *Cluster) StartMember(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.stopped[name] {
		return nil
	}
	for _, s := range c.registry {
		if s.Name == name {
			m, err := c.start(s, "", "existing")
			if err != nil {
				return err
			}
			c.running[name] = m
			delete(c.stopped, name)
			c.setStoppedLocked(name, false)
			return c.syncLocked(c.members)
		}
	}
	return nil
}

func (c *Cluster) setStoppedLocked(name string, stopped bool) {
	for i := range c.registry {
		if c.registry[i].Name == name {
			c.registry[i].Stopped = stopped
		}
	}
}

// runningNames lists the members running now.
func (c *Cluster) runningNames() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var names []string
	for name := range c.running {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// MemberPIDs are the processes of the members running now, by name.
func (c *Cluster) MemberPIDs() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for name, m := range c.running {
		out[name] = m.PID()
	}
	return out
}

// Running reports whether this process runs the member now.
func (c *Cluster) Running(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running[name] != nil
}

// ReadyzURL is the /readyz of the member name while this process runs it
// (a stopped member, or one it does not have, answers nothing).
func (c *Cluster) ReadyzURL(name string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running[name] == nil {
		return "", false
	}
	for _, s := range c.registry {
		if s.Name == name {
			return s.MetricsURL() + "/readyz", true
		}
	}
	return "", false
}
