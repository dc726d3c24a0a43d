package etcd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"

	"github.com/capstan-dev/capstan/internal/failpoint"
	"github.com/capstan-dev/capstan/internal/ports"
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
	// Healthy: it answered a status request in time.
	Healthy bool
	// Local: this process runs it (it is in the registry).
	Local bool
	// Added is when this process added it (zero when it did not).
	Added time.Time
}

// Members lists the cluster's members with their health.
func (c *Cluster) Members(ctx context.Context) ([]MemberStatus, error) {
	list, err := c.client.MemberList(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	registry := append([]MemberSpec(nil), c.registry...)
	// No request to a stopped member, nor to one being removed.
	stopped := map[string]bool{}
	for k, v := range c.stopped {
		stopped[k] = v
	}
	for k, v := range c.leaving {
		stopped[k] = stopped[k] || v
	}
	c.mu.Unlock()
	var out []MemberStatus
	for _, m := range list.Members {
		st := statusOf(m)
		for _, s := range registry {
			if s.PeerURL() == st.PeerURL {
				st.Local, st.Name, st.Added = true, s.Name, s.Added
				st.ClientURL = s.ClientURL()
			}
		}
		if !stopped[st.Name] {
			st.Healthy = answers(ctx, c.client, st.ClientURL)
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
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

// answers says whether the member at clientURL answers a status request
// in time: its health.
func answers(ctx context.Context, client *clientv3.Client, clientURL string) bool {
	if clientURL == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := client.Status(ctx, clientURL)
	return err == nil
}

// AddLearner adds a member for name as a learner and starts it: it
// catches up with the leader before it can be promoted to vote.
func (c *Cluster) AddLearner(ctx context.Context, name string) error {
	c.mu.Lock()
	for _, s := range c.registry {
		if s.Name == name {
			c.mu.Unlock()
			return nil
		}
	}
	clientPort, err := ports.Free()
	if err != nil {
		c.mu.Unlock()
		return err
	}
	peerPort, err := ports.Free()
	if err != nil {
		c.mu.Unlock()
		return err
	}
	spec := MemberSpec{Name: name, Dir: filepath.Join(MembersDir, name), ClientPort: clientPort, PeerPort: peerPort, Adding: true, Added: time.Now()}
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
