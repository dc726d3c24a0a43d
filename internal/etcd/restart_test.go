package etcd_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/etcd"
)

// threeVoters starts a cluster of master-0, -1 and -2 (the bootstrap
// member gone), with a key written, and returns it with the members'
// IDs by name.
func threeVoters(t *testing.T, cfg etcd.Config) (*etcd.Cluster, map[string]uint64) {
	t.Helper()
	c := start(t, cfg, "the first start")
	for _, n := range []string{"master-0", "master-1", "master-2"} {
		join(t, c, n)
	}
	remove(t, c, etcd.BootstrapName)
	if _, err := proxyClient(t, cfg, c).Put(context.Background(), "/registry/test", "kept"); err != nil {
		t.Fatal(err)
	}
	return c, memberIDs(t, c)
}

func memberIDs(t *testing.T, c *etcd.Cluster) map[string]uint64 {
	t.Helper()
	members, err := c.Members(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]uint64{}
	for _, m := range members {
		ids[m.Name] = m.ID
	}
	return ids
}

// keyKept checks that the key threeVoters wrote reads "kept".
func keyKept(t *testing.T, cfg etcd.Config, c *etcd.Cluster) {
	t.Helper()
	resp, err := proxyClient(t, cfg, c).Get(context.Background(), "/registry/test")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "kept" {
		t.Fatalf("the key written before the restart reads %v, %v", resp, err)
	}
}

// A voter whose data dir is gone is never started under its old ID with
// an empty log (it would have forgotten its votes and what it
// acknowledged): the start removes it from the cluster, and its machine's
// member joins again as a learner with a new ID, as etcd documents the
// replacement of a member whose data is lost.
func TestAMemberWhoseDataIsGoneJoinsAgainAsANewMember(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := testConfig(t)
	c, before := threeVoters(t, cfg)
	c.Stop()
	if err := os.RemoveAll(filepath.Join(cfg.DataDir, etcd.MembersDir, "master-2")); err != nil {
		t.Fatal(err)
	}
	c = start(t, cfg, "the start without master-2's data")
	if !slices.ContainsFunc(c.Warnings, func(w string) bool { return strings.Contains(w, "master-2") }) {
		t.Errorf("the start's warnings %q do not name master-2, whose data is gone", c.Warnings)
	}
	after := memberIDs(t, c)
	if id, ok := after["master-2"]; ok {
		t.Fatalf("master-2 restarted as member %x (before the loss %x) without its data; members %v", id, before["master-2"], after)
	}
	keyKept(t, cfg, c)
	// The operator adds the machine's member again: a learner first.
	waitFor(t, time.Minute, func() (bool, string) {
		err := c.AddLearner(ctx, "master-2")
		return err == nil, fmt.Sprint(err)
	})
	members, err := c.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		if m.Name == "master-2" && (!m.Learner || m.ID == before["master-2"]) {
			t.Errorf("master-2 joined as %+v; want a learner with an ID other than %x", m, before["master-2"])
		}
	}
	waitFor(t, time.Minute, func() (bool, string) {
		err := c.Promote(ctx, "master-2")
		return err == nil, fmt.Sprint(err)
	})
	waitFor(t, time.Minute, func() (bool, string) {
		v := voting(t, c)
		return len(v) == 3 && v["master-0"] && v["master-1"] && v["master-2"], fmt.Sprintf("voting members' health %v", v)
	})
}

// One member cut off from the others never becomes ready; the start
// returns as soon as the other two, a quorum, serve. The member cut is
// the one etcd lists first (by ID), so that waiting for the members one
// after another would wait for it first.
func TestAStartDoesNotWaitForACutOffMember(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Partitionable = true
	c, ids := threeVoters(t, cfg)
	c.Stop()
	first := lowestID(ids)
	if err := etcd.WritePartition(cfg.DataDir, first); err != nil {
		t.Fatal(err)
	}
	// A quorum serves in seconds; a start that waited for the cut
	// member would wait two minutes for it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	began := time.Now()
	c, err := etcd.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("the start with %s cut off: %v", first, err)
	}
	t.Cleanup(c.Stop)
	t.Logf("the start with %s cut off took %s", first, time.Since(began).Round(time.Millisecond))
	// kube-apiserver starts on the proxy next: each connection it makes
	// (the proxy takes the members in turn) must reach a member that
	// serves, not the one cut off.
	if err := readsThroughProxy(t, cfg, c, 6); err != nil {
		t.Errorf("right after the start with %s cut off, %v", first, err)
	}
	keyKept(t, cfg, c)
	if err := etcd.WritePartition(cfg.DataDir); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, func() (bool, string) {
		v := voting(t, c)
		return v[first] && len(v) == 3, fmt.Sprintf("voting members' health %v after the partition healed", v)
	})
}

// A voter whose registry entry was damaged is left out of the registry
// by the repair; the cluster still lists it, so the start removes it from
// the cluster: otherwise no member could ever join again (etcd refuses an
// initial cluster that names fewer members than it has). The machine's
// member then joins again, and the cluster has three voters.
func TestARegistryThatLostAVoterConvergesToThreeVoters(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	c, _ := threeVoters(t, cfg)
	c.Stop()
	specs, err := etcd.ReadRegistry(cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range specs {
		if specs[i].Name == "master-2" {
			specs[i].Dir = "../elsewhere"
		}
	}
	writeRegistry(t, cfg, specs)
	c = start(t, cfg, "the start with master-2's entry damaged")
	if ids := memberIDs(t, c); len(ids) != 2 {
		t.Errorf("after the start the cluster lists %v; want master-2, whose entry was left out, removed", ids)
	}
	keyKept(t, cfg, c)
	join(t, c, "master-2")
	waitFor(t, time.Minute, func() (bool, string) {
		v := voting(t, c)
		return len(v) == 3 && v["master-0"] && v["master-1"] && v["master-2"], fmt.Sprintf("voting members' health %v", v)
	})
}

// Two of four voters stopped with their machines leave no quorum: every
// member starts with capstan, whatever learner the registry also lists (a
// learner has no vote: counting it as one kept the stopped voters down,
// three "voters" of five running).
func TestStoppedVotersStartWhenTheOthersAreNoQuorumLearnersAside(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := testConfig(t)
	c := start(t, cfg, "the first start")
	for _, n := range []string{"master-0", "master-1", "master-2"} {
		join(t, c, n)
	}
	if _, err := proxyClient(t, cfg, c).Put(ctx, "/registry/test", "kept"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, func() (bool, string) {
		err := c.AddLearner(ctx, "master-3")
		return err == nil, fmt.Sprint(err)
	})
	c.StopMember("master-1")
	c.StopMember("master-2")
	c.Stop()
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	c, err := etcd.Start(sctx, cfg)
	if err != nil {
		t.Fatalf("the start with two of four voters stopped and a learner: %v", err)
	}
	t.Cleanup(c.Stop)
	keyKept(t, cfg, c)
	for _, n := range []string{"master-1", "master-2"} {
		if !c.Running(n) {
			t.Errorf("voter %s stays stopped though the others are no quorum", n)
		}
	}
}

// Two of three members lost their data, one kept it: the quorum restore
// makes that one a cluster of its own with everything it committed (a
// snapshot would lose what came after it), and the other machines'
// members join it again.
func TestAQuorumRestoreKeepsWhatTheSurvivorCommitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := testConfig(t)
	c, before := threeVoters(t, cfg)
	if _, err := proxyClient(t, cfg, c).Put(ctx, "/registry/last", "committed"); err != nil {
		t.Fatal(err)
	}
	if _, err := etcd.QuorumRestore(ctx, cfg.DataDir, cfg.TLS, ""); err == nil || !strings.Contains(err.Error(), "member processes") {
		t.Fatalf("a quorum restore with the members running: %v, want it refused naming them", err)
	}
	c.Stop()
	for _, n := range []string{"master-0", "master-2"} {
		if err := os.RemoveAll(filepath.Join(cfg.DataDir, etcd.MembersDir, n)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := etcd.QuorumRestore(ctx, cfg.DataDir, cfg.TLS, "master-0"); err == nil || !strings.Contains(err.Error(), "--member master-0 has no data") {
		t.Errorf("a quorum restore into a member without data: %v", err)
	}
	res, err := etcd.QuorumRestore(ctx, cfg.DataDir, cfg.TLS, "")
	if err != nil {
		t.Fatal(err)
	}
	if res.Member != "master-1" {
		t.Errorf("restored from %s, want master-1, the member with data", res.Member)
	}
	c = start(t, cfg, "the start after the quorum restore")
	keyKept(t, cfg, c)
	resp, err := proxyClient(t, cfg, c).Get(ctx, "/registry/last")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "committed" {
		t.Fatalf("the last key committed reads %v, %v", resp, err)
	}
	if ids := memberIDs(t, c); len(ids) != 1 || ids["master-1"] != before["master-1"] {
		t.Errorf("members after the quorum restore %v; want master-1 alone, with its ID %x", ids, before["master-1"])
	}
	join(t, c, "master-0")
	join(t, c, "master-2")
	if got := voting(t, c); len(got) != 3 {
		t.Fatalf("voting members %v, want three again", got)
	}
}

// A bridge, as Jepsen makes one: the two followers cut from each other,
// each still reaching the leader. The cluster keeps serving, every
// member healthy. The cut is real: with the leader then cut off too, the
// followers cannot elect one of their own.
func TestABridgeKeepsServingAndCutsTheFollowersApart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := testConfig(t)
	cfg.Partitionable = true
	c, _ := threeVoters(t, cfg)
	leader := leaderName(t, c)
	var followers []string
	for _, n := range []string{"master-0", "master-1", "master-2"} {
		if n != leader {
			followers = append(followers, n)
		}
	}
	if leader == "" || len(followers) != 2 {
		t.Fatalf("leader %q, followers %v", leader, followers)
	}
	bridge := [2]string{followers[0], followers[1]}
	if err := etcd.WriteLinkCuts(cfg.DataDir, bridge); err != nil {
		t.Fatal(err)
	}
	cl := proxyClient(t, cfg, c)
	// Writes for three election timeouts: nobody campaigns, the leader
	// stays, each write is taken.
	for i, began := 0, time.Now(); time.Since(began) < 3*time.Second; i++ {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := cl.Put(wctx, fmt.Sprintf("/registry/bridge-%d", i), "taken")
		cancel()
		if err != nil {
			t.Fatalf("write %d across the bridge: %v", i, err)
		}
	}
	if v := voting(t, c); len(v) != 3 || !v["master-0"] || !v["master-1"] || !v["master-2"] {
		t.Errorf("voting members' health %v across the bridge, want all healthy", v)
	}
	if now := leaderName(t, c); now != leader {
		t.Errorf("the leader moved from %s to %s across the bridge", leader, now)
	}
	// The leader cut off too: no two members reach each other.
	if err := etcd.WritePartition(cfg.DataDir, followers[0]+" cut "+followers[1], leader); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, func() (bool, string) {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := cl.Put(wctx, "/registry/bridge-down", "refused")
		return err != nil, "a write was taken with no two members reaching each other"
	})
	if err := etcd.WritePartition(cfg.DataDir); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, func() (bool, string) {
		v := voting(t, c)
		return len(v) == 3 && v["master-0"] && v["master-1"] && v["master-2"], fmt.Sprintf("voting members' health %v after the heal", v)
	})
}

// A learner whose addition crossed a member's removal by another client
// (etcd answered the addition with the member, then removed it, then the
// learner started)
// joins all the same: started with the members of its addition, etcd
// refuses it ("member count is unequal") and it would never join; it
// starts again with the members as they are now, as an OpenShift etcd pod
// discovers them at every start. The etcd-remote scenario met it, a host
// adding its member while the operator removed the deleted master's.
func TestALearnerWhoseAdditionCrossedARemovalJoins(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := testConfig(t)
	c := start(t, cfg, "the first start")
	join(t, c, "master-0")
	join(t, c, "master-1")
	// Removed behind this process's back, as the operator of a remote
	// etcd does: its registry still lists the member.
	gone := memberIDs(t, c)["master-0"]
	c.BetweenAddAndStart(func(name string) {
		if name != "master-2" {
			return
		}
		waitFor(t, time.Minute, func() (bool, string) {
			_, err := c.Client().MemberRemove(ctx, gone)
			return err == nil, fmt.Sprint(err)
		})
	})
	// etcd takes the addition once its leader reached a quorum for five
	// seconds: tried again until then.
	waitFor(t, time.Minute, func() (bool, string) {
		err := c.AddLearner(ctx, "master-2")
		return err == nil, fmt.Sprint(err)
	})
	waitFor(t, time.Minute, func() (bool, string) {
		members, err := c.Members(ctx)
		if err != nil {
			return false, err.Error()
		}
		for _, m := range members {
			if m.Name == "master-2" && m.Started && m.Healthy {
				return true, ""
			}
		}
		return false, fmt.Sprintf("members %+v: the learner master-2 has not joined", members)
	})
}

// A member cut off while the cluster runs leaves the proxy's backends
// within seconds, though no operator checks the members: kube-apiserver
// starts on the proxy before the operator leads (after a restart it
// first waits out its predecessor's Lease), and a partition then kept
// the API from writing until the operator's first checks, 150 s later.
func TestAMemberCutOffLeavesTheProxyWithoutAnOperator(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Partitionable = true
	c, ids := threeVoters(t, cfg)
	c.Stop()
	c = start(t, cfg, "the start of three voters")
	first := lowestID(ids)
	if err := etcd.WritePartition(cfg.DataDir, first); err != nil {
		t.Fatal(err)
	}
	// Every connection the proxy makes (it takes the backends in turn)
	// reaches a member that serves, six in a row.
	waitFor(t, time.Minute, func() (bool, string) {
		if err := readsThroughProxy(t, cfg, c, 6); err != nil {
			return false, fmt.Sprintf("with %s cut off, %v", first, err)
		}
		return true, ""
	})
	if err := etcd.WritePartition(cfg.DataDir); err != nil {
		t.Fatal(err)
	}
}

// lowestID is the name of the member of the lowest ID.
func lowestID(ids map[string]uint64) string {
	first := ""
	for name, id := range ids {
		if first == "" || id < ids[first] {
			first = name
		}
	}
	return first
}

// readsThroughProxy reads n times through the proxy, each on a new
// connection (the proxy takes its backends in turn), and says which read
// failed first.
func readsThroughProxy(t *testing.T, cfg etcd.Config, c *etcd.Cluster, n int) error {
	for i := range n {
		cl := proxyClient(t, cfg, c)
		gctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err := cl.Get(gctx, "/registry/test")
		cancel()
		if err != nil {
			return fmt.Errorf("read %d through the proxy: %w", i, err)
		}
	}
	return nil
}
