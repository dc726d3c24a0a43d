package chaos

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/certs"
	"github.com/capstan-dev/capstan/internal/etcd"
	"github.com/capstan-dev/capstan/internal/waitfor"
)

// A quorum lost for a few seconds (two of three members down, as a
// reboot that ignores the quorum guard would take them) is seen: each
// member is asked on its own, with reads that need no quorum, so the
// samples go on while it is lost instead of failing, and the loss is
// reported. The linearizable member list the sampler used before failed
// throughout, and its failed samples were skipped.
func TestTheSamplerSeesAQuorumLostForSeconds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	tls, err := certs.EnsureEtcdPKI(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	ports := make([]int, 2)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	}
	c, err := etcd.Start(ctx, etcd.Config{DataDir: dir, TLS: tls, LogFile: filepath.Join(dir, "etcd.log"), NoFsync: true,
		Bootstrap: etcd.MemberSpec{Name: etcd.BootstrapName, Dir: "etcd", ClientPort: ports[0], PeerPort: ports[1]}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	// etcd takes a member only from a leader connected to a quorum for a
	// while, and promotes a learner once it caught up: tried again.
	retry := func(what string, step func(context.Context) error) {
		t.Helper()
		if err := waitfor.Poll(ctx, 200*time.Millisecond, time.Minute, func(ctx context.Context) (bool, string, error) {
			err := step(ctx)
			return err == nil, fmt.Sprint(err), nil
		}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	for _, n := range []string{"master-0", "master-1", "master-2"} {
		retry("adding "+n, func(ctx context.Context) error { return c.AddLearner(ctx, n) })
		retry("promoting "+n, func(ctx context.Context) error { return c.Promote(ctx, n) })
	}
	retry("removing the bootstrap member", func(ctx context.Context) error { return c.Remove(ctx, etcd.BootstrapName) })

	sampler := sampleMembers(ctx, dir, func() bool { return true })
	samplesSince := func(at time.Time) (n int) {
		for _, s := range sampler.all() {
			if s.At.After(at) {
				n++
			}
		}
		return n
	}
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		if err := waitfor.Poll(ctx, 100*time.Millisecond, time.Minute, waitfor.Simple(func(context.Context) (bool, string) {
			return cond(), what
		})); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil("a sample of three healthy voting members", func() bool { return sampler.last().Healthy == 3 })
	stopped := time.Now()
	c.StopMember("master-1")
	c.StopMember("master-2")
	// Down for a dozen samples, three seconds: under the five seconds
	// for which failed samples were skipped.
	waitUntil("twelve samples since the stop", func() bool { return samplesSince(stopped) >= 12 })
	for _, n := range []string{"master-1", "master-2"} {
		if err := c.StartMember(n); err != nil {
			t.Fatal(err)
		}
	}
	restarted := time.Now()
	waitUntil("three healthy voting members again", func() bool {
		s := sampler.last()
		return s.At.After(restarted) && s.Healthy == 3
	})
	got := checkQuorum(sampler.all(), quorumCheck{formed: fromUp, maxVoting: 3, desired: 3})
	var found bool
	for _, v := range got {
		found = found || (v.Invariant == "etcd quorum" && strings.Contains(v.Detail, "no quorum for"))
	}
	if !found {
		t.Fatalf("two of three members down for %s: violations %v, want the quorum lost", restarted.Sub(stopped).Round(100*time.Millisecond), got)
	}
	t.Log(got)
}
