package etcd_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/capstan-dev/capstan/internal/certs"
	"github.com/capstan-dev/capstan/internal/etcd"
	"github.com/capstan-dev/capstan/internal/waitfor"
)

func testConfig(t *testing.T) etcd.Config {
	t.Helper()
	dir := t.TempDir()
	pki := filepath.Join(dir, "pki")
	tls, err := certs.EnsureEtcdPKI(pki)
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
	return etcd.Config{DataDir: dir, TLS: tls, LogFile: filepath.Join(dir, "etcd.log"), NoFsync: true,
		Bootstrap: etcd.MemberSpec{Name: etcd.BootstrapName, Dir: "etcd", ClientPort: ports[0], PeerPort: ports[1]}}
}

// proxyClient talks to the cluster the way kube-apiserver does: through
// the proxy, with the client certificate.
func proxyClient(t *testing.T, cfg etcd.Config, c *etcd.Cluster) *clientv3.Client {
	t.Helper()
	tlsConfig, err := transport.TLSInfo{CertFile: cfg.TLS.ClientCert, KeyFile: cfg.TLS.ClientKey, TrustedCAFile: cfg.TLS.CA}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := clientv3.New(clientv3.Config{Endpoints: []string{c.URL()}, TLS: tlsConfig, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// start starts the cluster of cfg, stopped when the test ends (stopping
// a stopped cluster does nothing).
func start(t *testing.T, cfg etcd.Config, what string) *etcd.Cluster {
	t.Helper()
	c, err := etcd.Start(context.Background(), cfg)
	if err != nil {
		// The temporary dir goes with the test: its log's end stays.
		tail, why := "", ""
		if raw, rerr := os.ReadFile(cfg.LogFile); rerr == nil {
			lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
			tail = strings.Join(lines[max(0, len(lines)-40):], "\n")
			// A member that died says why before its goroutines' dump,
			// which the end alone is.
			for i, l := range lines {
				if strings.HasPrefix(l, "panic:") || strings.HasPrefix(l, "fatal error:") || strings.Contains(l, `"level":"fatal"`) || strings.Contains(l, `"level":"panic"`) {
					why += strings.Join(lines[i:min(i+3, len(lines))], "\n") + "\n"
				}
			}
		}
		t.Fatalf("%s: %v\nwhy members died in %s:\n%s\nthe end of it:\n%s", what, err, cfg.LogFile, why, tail)
	}
	t.Cleanup(c.Stop)
	return c
}

func join(t *testing.T, c *etcd.Cluster, name string) {
	t.Helper()
	ctx := context.Background()
	// etcd takes a member only from a leader connected to a quorum for
	// the last five seconds, and promotes a learner only once it caught
	// up: both are tried again, as the operator does.
	deadline := time.Now().Add(time.Minute)
	for _, step := range []func(context.Context, string) error{c.AddLearner, c.Promote} {
		for {
			err := step(ctx, name)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("member %s never joined: %v", name, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// remove takes a member out; etcd refuses while the leader has not been
// connected to the rest for five seconds, so it is tried again.
func remove(t *testing.T, c *etcd.Cluster, name string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := c.Remove(context.Background(), name)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("member %s was never removed: %v", name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func voting(t *testing.T, c *etcd.Cluster) map[string]bool {
	t.Helper()
	members, err := c.Members(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range members {
		if !m.Learner {
			out[m.Name] = m.Healthy
		}
	}
	return out
}

// TestMembersReplaceTheBootstrapAndSurviveARestart: the bootstrap member
// hands the cluster to three machine members, one learner at a time; a
// member is replaced; the data written at the start is there throughout
// and after a restart from the registry.
func TestMembersReplaceTheBootstrapAndSurviveARestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := testConfig(t)
	c := start(t, cfg, "the first start")
	if _, err := proxyClient(t, cfg, c).Put(ctx, "/registry/test", "kept"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"master-0", "master-1", "master-2"} {
		join(t, c, n)
	}
	remove(t, c, etcd.BootstrapName)
	if got := voting(t, c); len(got) != 3 || !got["master-0"] || !got["master-1"] || !got["master-2"] {
		t.Fatalf("voting members %v, want the three masters, healthy", got)
	}
	// Replace master-1 by master-3: a replacement joins before the old
	// member leaves.
	join(t, c, "master-3")
	remove(t, c, "master-1")
	get := func(c *etcd.Cluster) string {
		resp, err := proxyClient(t, cfg, c).Get(ctx, "/registry/test")
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 1 {
			return ""
		}
		return string(resp.Kvs[0].Value)
	}
	if v := get(c); v != "kept" {
		t.Fatalf("after the replacement the key is %q", v)
	}
	c.Stop()
	c = start(t, cfg, "the restart")
	if got := voting(t, c); len(got) != 3 || !got["master-0"] || !got["master-2"] || !got["master-3"] {
		t.Fatalf("after a restart, voting members %v", got)
	}
	if v := get(c); v != "kept" {
		t.Fatalf("after a restart the key is %q", v)
	}
	// A stopped member is unhealthy; the other two keep the quorum.
	c.StopMember("master-2")
	if got := voting(t, c); got["master-2"] || !got["master-0"] || !got["master-3"] {
		t.Fatalf("with master-2 stopped: %v", got)
	}
	if _, err := proxyClient(t, cfg, c).Put(ctx, "/registry/test2", "with two"); err != nil {
		t.Fatalf("two of three members lost the quorum: %v", err)
	}
	if err := c.StartMember("master-2"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !voting(t, c)["master-2"] {
		if time.Now().After(deadline) {
			t.Fatal("master-2 never came back")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A member removed from the cluster, with capstan killed before the
// registry said so: the next start finds the member gone from the
// cluster's own list, forgets it (entry and data) and starts with the
// others, rather than waiting for a member that can never be ready.
func TestStartForgetsAMemberRemovedBeforeTheRegistrySaidSo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := testConfig(t)
	c := start(t, cfg, "the first start")
	join(t, c, "master-0")
	registry := filepath.Join(cfg.DataDir, "etcd-members.json")
	before, err := os.ReadFile(registry)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := proxyClient(t, cfg, c).Put(ctx, "/registry/test", "kept"); err != nil {
		t.Fatal(err)
	}
	// The bootstrap member's data as it is just before its removal (the
	// removal deletes it), copied while the member is stopped.
	bootstrapDir := filepath.Join(cfg.DataDir, cfg.Bootstrap.Dir)
	saved := filepath.Join(t.TempDir(), "bootstrap")
	c.StopMember(etcd.BootstrapName)
	if err := os.CopyFS(saved, os.DirFS(bootstrapDir)); err != nil {
		t.Fatal(err)
	}
	if err := c.StartMember(etcd.BootstrapName); err != nil {
		t.Fatal(err)
	}
	remove(t, c, etcd.BootstrapName)
	c.Stop()
	// The kill: the removal happened, the registry and the bootstrap
	// member's data are as before it.
	if err := os.WriteFile(registry, before, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(bootstrapDir, os.DirFS(saved)); err != nil {
		t.Fatal(err)
	}
	c = start(t, cfg, "the start after a removal the registry did not record")
	specs, err := etcd.ReadRegistry(cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 1 || specs[0].Name != "master-0" {
		t.Fatalf("registry after the start: %+v, want master-0 alone", specs)
	}
	bootstrapGoneDataKept(t, cfg, c)
}

// A removal written down (Removing) and cut short by a stop is finished at
// the next start, whether or not etcd had carried it out, and even when
// the quorum needs the member being removed to do so: with the bootstrap
// member and one machine's, the bootstrap member is half of the quorum
// until it is removed (found by the chaos campaign: capstan could never
// start again).
func TestStartFinishesARemovalCutShort(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		members []string
		// removed: etcd carried the removal out before the stop.
		removed bool
	}{
		{"not asked, quorum without it", []string{"master-0", "master-1"}, false},
		{"not asked, quorum needs it", []string{"master-0"}, false},
		{"carried out", []string{"master-0", "master-1"}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			cfg := testConfig(t)
			c := start(t, cfg, "the first start")
			for _, m := range tc.members {
				join(t, c, m)
			}
			if _, err := proxyClient(t, cfg, c).Put(ctx, "/registry/test", "kept"); err != nil {
				t.Fatal(err)
			}
			if tc.removed {
				removeBehindCapstansBack(t, c, etcd.BootstrapName)
			}
			c.Stop()
			specs, err := etcd.ReadRegistry(cfg.DataDir)
			if err != nil {
				t.Fatal(err)
			}
			for i := range specs {
				if specs[i].Name == etcd.BootstrapName {
					specs[i].Removing = true
				}
			}
			writeRegistry(t, cfg, specs)
			c = start(t, cfg, "the start after a removal cut short")
			members, err := c.Members(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, m := range members {
				names = append(names, m.Name)
			}
			if strings.Join(names, ",") != strings.Join(tc.members, ",") {
				t.Fatalf("members after the start: %v, want %v", names, tc.members)
			}
			if specs, _ := etcd.ReadRegistry(cfg.DataDir); len(specs) != len(tc.members) {
				t.Fatalf("registry after the start: %+v", specs)
			}
			bootstrapGoneDataKept(t, cfg, c)
		})
	}
}

// removeBehindCapstansBack removes a member through etcd alone, as if
// capstan had been stopped right after asking.
func removeBehindCapstansBack(t *testing.T, c *etcd.Cluster, name string) {
	t.Helper()
	members, err := c.Members(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		if m.Name != name {
			continue
		}
		deadline := time.Now().Add(time.Minute)
		for {
			_, err := c.Client().MemberRemove(context.Background(), m.ID)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("removing %s: %v", name, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	t.Fatalf("no member %s", name)
}

func writeRegistry(t *testing.T, cfg etcd.Config, specs []etcd.MemberSpec) {
	t.Helper()
	raw, err := json.Marshal(specs)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.DataDir, "etcd-members.json"), raw, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A registry damaged by hand or by an old bug never stops every start: a
// bad entry is left out (its data, wherever it points, stays), a port
// another entry has moves, and each repair is a warning. The members that
// were fine serve with their data.
func TestStartRepairsABadRegistry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := testConfig(t)
	c := start(t, cfg, "the first start")
	join(t, c, "master-0")
	if _, err := proxyClient(t, cfg, c).Put(ctx, "/registry/test", "kept"); err != nil {
		t.Fatal(err)
	}
	c.Stop()
	good, err := etcd.ReadRegistry(cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	var boot, m0 etcd.MemberSpec
	for _, s := range good {
		switch s.Name {
		case etcd.BootstrapName:
			boot = s
		case "master-0":
			m0 = s
		}
	}
	outside := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.MkdirAll(outside, 0o700); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		registry func() []etcd.MemberSpec
		warnings []string
	}{
		"entries without a dir, outside the data dir, in the members' dir itself, without a name, or listed twice": {func() []etcd.MemberSpec {
			return append(slices.Clone(good),
				etcd.MemberSpec{Name: "m", ClientPort: 1, PeerPort: 2, MetricsPort: 3},
				etcd.MemberSpec{Name: "n", Dir: outside, ClientPort: 4, PeerPort: 5, MetricsPort: 6},
				etcd.MemberSpec{Name: "o", Dir: "etcd-members", ClientPort: 7, PeerPort: 8, MetricsPort: 9},
				etcd.MemberSpec{Dir: "etcd-members/x", ClientPort: 10, PeerPort: 11, MetricsPort: 12},
				etcd.MemberSpec{Name: "master-0", Dir: "etcd-members/y", ClientPort: 13, PeerPort: 14, MetricsPort: 15})
		}, []string{`dir "": empty: the member's data would be the whole data dir: left out`, "not a clean path inside the data dir: left out",
			"nor one under etcd-members/: left out", "has no name: left out", "is listed before: left out"}},
		// M5: two entries drew the same port.
		"a port another member has": {func() []etcd.MemberSpec {
			bad := m0
			bad.ClientPort = boot.PeerPort
			return []etcd.MemberSpec{boot, bad}
		}, []string{"member master-0's client port"}},
		"a port out of range": {func() []etcd.MemberSpec {
			bad := m0
			bad.MetricsPort = 70000
			return []etcd.MemberSpec{boot, bad}
		}, []string{"member master-0's metrics port 70000 is not its own"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			raw, err := json.Marshal(tc.registry())
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(cfg.DataDir, "etcd-members.json"), raw, 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := etcd.Start(ctx, cfg)
			if err != nil {
				t.Fatalf("a repairable registry stopped the start: %v", err)
			}
			defer c.Stop()
			for _, want := range tc.warnings {
				if !slices.ContainsFunc(c.Warnings, func(w string) bool { return strings.Contains(w, want) }) {
					t.Errorf("warnings %q, want one saying %q", c.Warnings, want)
				}
			}
			resp, err := proxyClient(t, cfg, c).Get(ctx, "/registry/test")
			if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "kept" {
				t.Fatalf("after the repair the key reads %v, %v", resp, err)
			}
			deadline := time.Now().Add(time.Minute)
			for v := voting(t, c); !v[etcd.BootstrapName] || !v["master-0"]; v = voting(t, c) {
				if time.Now().After(deadline) {
					t.Fatalf("the members are not both healthy voters after the repair: %v", v)
				}
				time.Sleep(200 * time.Millisecond)
			}
			specs, err := etcd.ReadRegistry(cfg.DataDir)
			if err != nil {
				t.Fatalf("the repaired registry does not read back: %v", err)
			}
			if len(specs) != 2 {
				t.Errorf("the repaired registry lists %+v, want the two members", specs)
			}
			if _, err := os.Stat(outside); err != nil {
				t.Errorf("the data of an entry left out went: %v", err)
			}
			c.Stop()
			// The next case starts from the repaired registry's members.
			good = specs
			for _, s := range specs {
				switch s.Name {
				case etcd.BootstrapName:
					boot = s
				case "master-0":
					m0 = s
				}
			}
		})
	}
}

// takePorts listens on ports until the test ends, as another program
// that took them while capstan was down.
func takePorts(t *testing.T, ports ...int) {
	t.Helper()
	for _, p := range ports {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
	}
}

// So does a lone member, which is the whole quorum: the cluster lists it
// under its old peer URL until the start points it at the new one. (The
// ports of a capstan killed a moment before are still held by its dying
// member, and a start there failed with "0 of 1 voting etcd members
// ready".)
func TestALoneMemberWhosePortsWereTakenMoves(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := testConfig(t)
	c := start(t, cfg, "the first start")
	if _, err := proxyClient(t, cfg, c).Put(ctx, "/registry/test", "kept"); err != nil {
		t.Fatal(err)
	}
	c.Stop()
	specs, err := etcd.ReadRegistry(cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 1 {
		t.Fatalf("registry %+v, want the bootstrap member alone", specs)
	}
	old := specs[0]
	takePorts(t, old.ClientPort, old.PeerPort)
	c = start(t, cfg, "the start with the lone member's ports taken")
	specs, err = etcd.ReadRegistry(cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 1 || specs[0].ClientPort == old.ClientPort || specs[0].PeerPort == old.PeerPort {
		t.Fatalf("registry after the start: %+v, want the member on new ports (was %+v)", specs, old)
	}
	resp, err := proxyClient(t, cfg, c).Get(ctx, "/registry/test")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "kept" {
		t.Fatalf("the data after the move: %v %v", resp, err)
	}
}

// A member whose ports another program took while capstan was down moves
// to new ones, written down first, and the cluster points at its new peer
// URL: the start neither fails nor forgets the member.
func TestAMemberWhosePortsWereTakenMoves(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := testConfig(t)
	c := start(t, cfg, "the first start")
	join(t, c, "master-0")
	join(t, c, "master-1")
	if _, err := proxyClient(t, cfg, c).Put(ctx, "/registry/test", "kept"); err != nil {
		t.Fatal(err)
	}
	c.Stop()
	specs, err := etcd.ReadRegistry(cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	var old etcd.MemberSpec
	for _, s := range specs {
		if s.Name == "master-0" {
			old = s
		}
	}
	takePorts(t, old.ClientPort, old.PeerPort)
	c = start(t, cfg, "the start with master-0's ports taken")
	specs, err = etcd.ReadRegistry(cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	var moved etcd.MemberSpec
	for _, s := range specs {
		if s.Name == "master-0" {
			moved = s
		}
	}
	if moved.Name == "" || moved.ClientPort == old.ClientPort || moved.PeerPort == old.PeerPort {
		t.Fatalf("registry after the start: %+v, want master-0 on new ports (was %+v)", specs, old)
	}
	deadline := time.Now().Add(time.Minute)
	for !voting(t, c)["master-0"] {
		if time.Now().After(deadline) {
			t.Fatalf("master-0 never became a healthy voting member on its new ports: %v", voting(t, c))
		}
		time.Sleep(200 * time.Millisecond)
	}
	members, err := c.Client().MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range members.Members {
		if m.Name == "master-0" && (len(m.PeerURLs) != 1 || m.PeerURLs[0] != moved.PeerURL()) {
			t.Errorf("master-0's peer URLs %v, want %s", m.PeerURLs, moved.PeerURL())
		}
	}
	resp, err := proxyClient(t, cfg, c).Get(ctx, "/registry/test")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "kept" {
		t.Fatalf("after the move the key reads %v, %v", resp, err)
	}
}

// Each member is its own process: SIGKILLed, as the OS kills a crashed
// etcd, it is started again by its supervisor, and the cluster serves
// through the proxy meanwhile (the others are a quorum).
func TestAKilledMemberProcessIsStartedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := testConfig(t)
	c := start(t, cfg, "the first start")
	join(t, c, "master-0")
	join(t, c, "master-1")
	remove(t, c, etcd.BootstrapName)
	cl := proxyClient(t, cfg, c)
	for i, victim := range []string{"master-0", "master-1", "master-0"} {
		before := c.MemberPIDs()
		pid := before[victim]
		if pid == 0 || pid == os.Getpid() {
			t.Fatalf("member %s runs in process %d (this test's is %d): %v", victim, pid, os.Getpid(), before)
		}
		// The process table shows the same members, as ps would.
		if procs, err := etcd.MemberProcesses(cfg.DataDir); err != nil || !maps.Equal(procs, before) {
			t.Fatalf("the process table shows members %v (%v), capstan runs %v", procs, err, before)
		}
		// In a group of its own: a Ctrl-C to capstan's reaches capstan
		// alone, which stops the API server before the members.
		if pgid, err := syscall.Getpgid(pid); err != nil || pgid == syscall.Getpgrp() {
			t.Errorf("member %s (process %d) is in process group %d (%v), capstan's own (%d)", victim, pid, pgid, err, syscall.Getpgrp())
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		key := "/registry/after-kill-" + strconv.Itoa(i)
		waitFor(t, 2*time.Minute, func() (bool, string) {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if _, err := cl.Put(wctx, key, victim); err != nil {
				return false, "writing: " + err.Error()
			}
			now := c.MemberPIDs()[victim]
			if now == 0 || now == pid {
				return false, fmt.Sprintf("member %s runs in process %d, killed %d", victim, now, pid)
			}
			v := voting(t, c)
			return v["master-0"] && v["master-1"] && len(v) == 2,
				fmt.Sprintf("voting members and their health: %v", v)
		})
	}
}

func waitFor(t *testing.T, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	if err := waitfor.Poll(context.Background(), 200*time.Millisecond, timeout, waitfor.Simple(func(context.Context) (bool, string) {
		return cond()
	})); err != nil {
		t.Fatal(err)
	}
}

// bootstrapGoneDataKept checks that the removed bootstrap member's data
// dir went, and that the key written before the restart reads "kept".
func bootstrapGoneDataKept(t *testing.T, cfg etcd.Config, c *etcd.Cluster) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(cfg.DataDir, cfg.Bootstrap.Dir)); !os.IsNotExist(err) {
		t.Errorf("the removed member's data dir is still there (%v)", err)
	}
	resp, err := proxyClient(t, cfg, c).Get(context.Background(), "/registry/test")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "kept" {
		t.Fatalf("after the start the key reads %v, %v", resp, err)
	}
}

// A Remote reaches members it does not run through etcd's API only: it
// lists them with their health, promotes a learner, removes a member,
// and leaves adding one to its host.
func TestARemoteChangesTheMembershipThroughTheAPIOnly(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	c := start(t, cfg, "the hosts' cluster")
	join(t, c, "host-a")
	ctx := context.Background()
	members, err := c.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var endpoints []string
	for _, m := range members {
		endpoints = append(endpoints, m.ClientURL)
	}
	if _, err := etcd.DialRemote(etcd.RemoteConfig{Endpoints: []string{"10.0.0.1:2379", "http://10.0.0.2:2379"}, Cert: cfg.TLS.ClientCert}); err == nil ||
		!strings.Contains(err.Error(), `"10.0.0.1:2379" is not a client URL`) || !strings.Contains(err.Error(), "--etcd-cert and --etcd-key go together") ||
		!strings.Contains(err.Error(), `"http://10.0.0.2:2379" is plain HTTP`) || !strings.Contains(err.Error(), "--etcd-cacert: the CA") {
		t.Errorf("a bad remote configuration: %v", err)
	}
	r, err := etcd.DialRemote(etcd.RemoteConfig{Endpoints: endpoints, CA: cfg.TLS.CA, Cert: cfg.TLS.ClientCert, Key: cfg.TLS.ClientKey})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := r.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !got[0].Healthy || !got[1].Healthy || got[0].Local || got[1].Local {
		t.Fatalf("the remote's members: %+v", got)
	}
	if err := r.AddLearner(ctx, "host-b"); !errors.Is(err, etcd.ErrHostJoins) {
		t.Errorf("AddLearner on a remote: %v", err)
	}
	// The host adds its learner; the remote promotes it once it caught up.
	if err := waitfor.Poll(ctx, 200*time.Millisecond, time.Minute, waitfor.Simple(func(ctx context.Context) (bool, string) {
		err := c.AddLearner(ctx, "host-b")
		return err == nil, fmt.Sprint(err)
	})); err != nil {
		t.Fatal(err)
	}
	if err := waitfor.Poll(ctx, 200*time.Millisecond, time.Minute, waitfor.Simple(func(ctx context.Context) (bool, string) {
		err := r.Promote(ctx, "host-b")
		return err == nil, fmt.Sprint(err)
	})); err != nil {
		t.Fatal(err)
	}
	// The bootstrap member leaves; the remote still reaches the rest.
	if err := waitfor.Poll(ctx, 200*time.Millisecond, time.Minute, waitfor.Simple(func(ctx context.Context) (bool, string) {
		err := r.Remove(ctx, etcd.BootstrapName)
		return err == nil, fmt.Sprint(err)
	})); err != nil {
		t.Fatal(err)
	}
	if err := waitfor.Poll(ctx, 200*time.Millisecond, time.Minute, waitfor.Simple(func(ctx context.Context) (bool, string) {
		got, err := r.Members(ctx)
		if err != nil {
			return false, err.Error()
		}
		var names []string
		for _, m := range got {
			if !m.Learner && m.Healthy {
				names = append(names, m.Name)
			}
		}
		return strings.Join(names, ",") == "host-a,host-b", fmt.Sprintf("healthy voting members %v", names)
	})); err != nil {
		t.Fatal(err)
	}
}

// A cluster whose quorum is lost for good (two of three members' data
// deleted) says so at its next start, at once, and comes back from a
// snapshot: one member restored with everything written before the
// snapshot, its revision moved on; what came after the snapshot is gone.
func TestASnapshotRestoresAClusterThatLostItsQuorum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := testConfig(t)
	c := start(t, cfg, "the first start")
	for _, n := range []string{"master-0", "master-1", "master-2"} {
		join(t, c, n)
	}
	remove(t, c, etcd.BootstrapName)
	if _, err := proxyClient(t, cfg, c).Put(ctx, "/registry/before", "kept"); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(t.TempDir(), "backup", "snapshot.db")
	st, err := etcd.SaveSnapshot(ctx, cfg.DataDir, cfg.TLS, snap)
	if err != nil {
		t.Fatal(err)
	}
	if st.Revision < 2 || st.TotalKeys < 1 || st.Member == "" {
		t.Errorf("snapshot status %+v", st)
	}
	if _, err := proxyClient(t, cfg, c).Put(ctx, "/registry/after", "lost"); err != nil {
		t.Fatal(err)
	}
	// Not while members run: they would write into the data moved aside.
	if _, err := etcd.Restore(cfg.DataDir, snap, ""); err == nil || !strings.Contains(err.Error(), "member processes") {
		t.Fatalf("a restore with the members running: %v, want it refused naming them", err)
	}
	c.Stop()
	specs, err := etcd.ReadRegistry(cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if s.Name != "master-0" {
			if err := os.RemoveAll(filepath.Join(cfg.DataDir, s.Dir)); err != nil {
				t.Fatal(err)
			}
		}
	}
	began := time.Now()
	if _, err := etcd.Start(ctx, cfg); err == nil || !strings.Contains(err.Error(), "cannot form a quorum: the data of 2 of its 3 voting members is gone") ||
		!strings.Contains(err.Error(), "capstan etcd restore --from") {
		t.Fatalf("the start without a quorum's data said %v, want it to name the lost members and the restore", err)
	} else if took := time.Since(began); took > 30*time.Second {
		t.Errorf("the start took %s to say so", took)
	}
	if _, err := etcd.Restore(cfg.DataDir, filepath.Join(cfg.DataDir, "no-such-snapshot"), ""); err == nil {
		t.Error("a missing snapshot was restored")
	}
	if _, err := etcd.Restore(cfg.DataDir, snap, "nobody"); err == nil || !strings.Contains(err.Error(), "--member nobody is not an etcd member") {
		t.Errorf("an unknown --member: %v", err)
	}
	res, err := etcd.Restore(cfg.DataDir, snap, "")
	if err != nil {
		t.Fatal(err)
	}
	if res.Member != "master-0" {
		t.Errorf("restored into %s, want master-0 (the first control-plane member)", res.Member)
	}
	if _, err := os.Stat(filepath.Join(res.Aside, "master-0", "member")); err != nil {
		t.Errorf("the former data of master-0 was not kept aside: %v", err)
	}
	c = start(t, cfg, "the start after the restore")
	cl := proxyClient(t, cfg, c)
	resp, err := cl.Get(ctx, "/registry/before")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "kept" {
		t.Fatalf("a key written before the snapshot reads %v, %v", resp, err)
	}
	if resp.Header.Revision < etcd.RevisionBump {
		t.Errorf("revision %d after the restore, want it moved on by %d", resp.Header.Revision, etcd.RevisionBump)
	}
	if resp, err := cl.Get(ctx, "/registry/after"); err != nil || len(resp.Kvs) != 0 {
		t.Errorf("a key written after the snapshot reads %v, %v", resp, err)
	}
	if got := voting(t, c); len(got) != 1 || !got["master-0"] {
		t.Fatalf("voting members %v after the restore, want master-0 alone", got)
	}
	// A second restore of the same snapshot into the same member makes
	// another cluster: its ID derives from a token new with each restore.
	first := resp.Header.ClusterId
	c.Stop()
	if _, err := etcd.Restore(cfg.DataDir, snap, ""); err != nil {
		t.Fatal(err)
	}
	c = start(t, cfg, "the start after the second restore")
	cl = proxyClient(t, cfg, c)
	if resp, err = cl.Get(ctx, "/registry/before"); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("after the second restore the key reads %v, %v", resp, err)
	}
	if resp.Header.ClusterId == first {
		t.Errorf("two restores made clusters of the same ID %x", first)
	}
	// The operator's way back to three: learners added and promoted.
	join(t, c, "master-1")
	join(t, c, "master-2")
	if got := voting(t, c); len(got) != 3 {
		t.Fatalf("voting members %v, want three again", got)
	}
}

// etcd trusts its own signer only: a certificate of the cluster CA, as
// every component has, is refused; a client certificate of etcd's signer
// is refused as a peer (peers must carry the peer certificate's name);
// the metrics go to the metrics signer's client alone, the readiness to
// anyone.
func TestEtcdTrustsOnlyItsOwnSigner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := testConfig(t)
	c := start(t, cfg, "the first start")
	specs, err := etcd.ReadRegistry(cfg.DataDir)
	if err != nil || len(specs) != 1 {
		t.Fatalf("registry %v, %v", specs, err)
	}
	member := specs[0]
	pki := filepath.Join(cfg.DataDir, "pki")
	clusterCA, err := certs.LoadOrCreateCA(filepath.Join(pki, "ca.crt"), filepath.Join(pki, "ca.key"), "capstan-ca")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := clusterCA.Issue(certs.LeafSpec{CommonName: "system:serviceaccount:openshift-machine-api:machine-api",
		Organization: []string{"system:serviceaccounts"}, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	component, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	etcdCA := x509.NewCertPool()
	raw, err := os.ReadFile(cfg.TLS.CA)
	if err != nil {
		t.Fatal(err)
	}
	etcdCA.AppendCertsFromPEM(raw)
	// A component's certificate: no etcd request gets through.
	cl, err := clientv3.New(clientv3.Config{Endpoints: []string{member.ClientURL()}, DialTimeout: 2 * time.Second, Logger: zap.NewNop(),
		TLS: &tls.Config{RootCAs: etcdCA, Certificates: []tls.Certificate{component}}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	if _, err := cl.Put(rctx, "/registry/rbac/owned", "by a component"); err == nil {
		t.Error("etcd took a write from a certificate of the cluster CA")
	}
	cancel()
	// The peer port: the client certificate of etcd's own signer is no
	// peer; the peer certificate is.
	handshake := func(certFile, keyFile string) error {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := tls.Dial("tcp", strings.TrimPrefix(member.PeerURL(), "https://"), &tls.Config{RootCAs: etcdCA, Certificates: []tls.Certificate{pair}})
		if err != nil {
			return err
		}
		defer conn.Close()
		// TLS 1.3 reports a refused client certificate on the first read.
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := conn.Write([]byte("GET /version HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			return err
		}
		_, err = conn.Read(make([]byte, 1))
		return err
	}
	if err := handshake(cfg.TLS.ClientCert, cfg.TLS.ClientKey); err == nil {
		t.Error("the peer port took etcd's client certificate as a peer")
	}
	if err := handshake(cfg.TLS.PeerCert, cfg.TLS.PeerKey); err != nil {
		t.Errorf("the peer port refused the peer certificate: %v", err)
	}
	// The metrics port.
	metricsCA := x509.NewCertPool()
	if raw, err := os.ReadFile(cfg.TLS.MetricsCA); err != nil {
		t.Fatal(err)
	} else {
		metricsCA.AppendCertsFromPEM(raw)
	}
	get := func(path string, certs ...tls.Certificate) (int, error) {
		hc := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: metricsCA, Certificates: certs}}}
		resp, err := hc.Get(member.MetricsURL() + path)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	prometheus, err := tls.LoadX509KeyPair(cfg.TLS.MetricsClientCert, cfg.TLS.MetricsClientKey)
	if err != nil {
		t.Fatal(err)
	}
	if code, err := get("/metrics", prometheus); err != nil || code != http.StatusOK {
		t.Errorf("/metrics with the metrics client certificate: %d, %v", code, err)
	}
	if code, err := get("/metrics"); err != nil || code != http.StatusForbidden {
		t.Errorf("/metrics without a certificate: %d, %v, want 403", code, err)
	}
	if code, err := get("/metrics", component); err == nil && code == http.StatusOK {
		t.Error("/metrics served a certificate of the cluster CA")
	}
	if code, err := get("/readyz"); err != nil || code != http.StatusOK {
		t.Errorf("/readyz without a certificate: %d, %v", code, err)
	}
	_ = c
}

// A member cut from the others by the partition file (both ways, as a
// network partition) loses its quorum reads while it still answers a
// status request, the others elect a leader and take writes, and once
// the partition heals the member catches up.
func TestAPartitionedMemberIsCutBothWays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := testConfig(t)
	cfg.Partitionable = true
	c := start(t, cfg, "the first start")
	for _, n := range []string{"master-0", "master-1", "master-2"} {
		join(t, c, n)
	}
	remove(t, c, etcd.BootstrapName)
	members, err := c.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader := ""
	for _, m := range members {
		if m.Leader == m.ID {
			leader = m.Name
		}
	}
	if leader == "" {
		t.Fatalf("no leader among %+v", members)
	}
	if err := etcd.WritePartition(cfg.DataDir, leader); err != nil {
		t.Fatal(err)
	}
	// The others elect a leader of their own and take writes.
	err = waitfor.Poll(ctx, 200*time.Millisecond, time.Minute, func(ctx context.Context) (bool, string, error) {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := proxyClient(t, cfg, c).Put(wctx, "/registry/during", "the partition")
		if err != nil {
			return false, err.Error(), nil
		}
		v := voting(t, c)
		return !v[leader] && len(v) == 3, fmt.Sprintf("voting members' health %v, want %s alone unhealthy", v, leader), nil
	})
	if err != nil {
		t.Fatalf("with %s partitioned: %v", leader, err)
	}
	// The partitioned member answers a status request all the same: a
	// status is no health.
	for _, m := range members {
		if m.Name != leader {
			continue
		}
		cl := memberClient(t, cfg, m.ClientURL)
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if _, err := cl.Status(sctx, m.ClientURL); err != nil {
			t.Errorf("the partitioned member's status: %v", err)
		}
		cancel()
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if _, err := cl.Get(gctx, "health"); err == nil {
			t.Error("the partitioned member served a linearizable read")
		}
		cancel()
	}
	if err := etcd.WritePartition(cfg.DataDir); err != nil {
		t.Fatal(err)
	}
	err = waitfor.Poll(ctx, 200*time.Millisecond, time.Minute, func(ctx context.Context) (bool, string, error) {
		v := voting(t, c)
		return v[leader] && len(v) == 3, fmt.Sprintf("voting members' health %v after the partition healed", v), nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// A slow network: every raft message between the members arrives
	// 150 ms late. A write commits only after a round trip from the leader
	// to a follower (at least 300 ms), and the members stay healthy: the
	// heartbeats are late, but well inside the election timeout.
	const delay = 150 * time.Millisecond
	if err := etcd.WritePeerDelay(cfg.DataDir, delay, "master-0", "master-1", "master-2"); err != nil {
		t.Fatal(err)
	}
	var took time.Duration
	err = waitfor.Poll(ctx, 200*time.Millisecond, time.Minute, func(ctx context.Context) (bool, string, error) {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		began := time.Now()
		if _, err := proxyClient(t, cfg, c).Put(wctx, "/registry/slow", "a slow network"); err != nil {
			return false, err.Error(), nil
		}
		took = time.Since(began)
		return took >= 2*delay, fmt.Sprintf("a write took %s, want at least %s with every message %s late", took, 2*delay, delay), nil
	})
	if err != nil {
		t.Fatalf("with the members' messages delayed: %v", err)
	}
	if v := voting(t, c); len(v) != 3 || !v["master-0"] || !v["master-1"] || !v["master-2"] {
		t.Errorf("voting members' health %v with the messages %s late, want all healthy", v, delay)
	}
	t.Logf("a write took %s with every raft message %s late", took.Round(time.Millisecond), delay)
	if err := etcd.WritePartition(cfg.DataDir); err != nil {
		t.Fatal(err)
	}
}

// The partition file's lines: a name cuts, NAME delay D delays, anything
// else does neither.
func TestPeerFaultsFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := etcd.WritePeerDelay(dir, 0, "m"); err == nil {
		t.Error("a zero peer delay was taken")
	}
	if err := etcd.WritePeerDelay(dir, 200*time.Millisecond, "m-1", "m-2"); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, etcd.PartitionFile))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(raw), "m-1 delay 200ms\nm-2 delay 200ms\n"; got != want {
		t.Errorf("the file says %q, want %q", got, want)
	}
}

// memberClient is a client of one member only.
func memberClient(t *testing.T, cfg etcd.Config, url string) *clientv3.Client {
	t.Helper()
	tlsConfig, err := transport.TLSInfo{CertFile: cfg.TLS.ClientCert, KeyFile: cfg.TLS.ClientKey, TrustedCAFile: cfg.TLS.CA}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, TLS: tlsConfig, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// A member removed behind capstan's back (etcdctl member remove, as
// OpenShift documents for an unhealthy member) is forgotten, its process
// stopped and its data gone, so that its machine can get a new member.
func TestAMemberRemovedOutOfBandIsForgotten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := testConfig(t)
	c := start(t, cfg, "the first start")
	join(t, c, "master-0")
	join(t, c, "master-1")
	members, err := c.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var id uint64
	for _, m := range members {
		if m.Name == "master-1" {
			id = m.ID
		}
	}
	if err := c.AddLearner(ctx, "master-1"); !errors.Is(err, etcd.ErrMemberExists) {
		t.Errorf("adding master-1 again: %v, want ErrMemberExists", err)
	}
	err = waitfor.Poll(ctx, 200*time.Millisecond, time.Minute, func(ctx context.Context) (bool, string, error) {
		_, err := c.Client().MemberRemove(ctx, id)
		return err == nil, fmt.Sprint(err), nil
	})
	if err != nil {
		t.Fatalf("etcdctl member remove: %v", err)
	}
	gone, err := c.ForgetRemoved(ctx)
	if err != nil || len(gone) != 1 || gone[0] != "master-1" {
		t.Fatalf("ForgetRemoved = %v, %v; want master-1", gone, err)
	}
	specs, err := etcd.ReadRegistry(cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if s.Name == "master-1" {
			t.Errorf("master-1 is still in the registry: %+v", specs)
		}
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, etcd.MembersDir, "master-1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("master-1's data is still there: %v", err)
	}
	// Its machine gets a member again.
	join(t, c, "master-1")
	if got := voting(t, c); !got["master-1"] {
		t.Errorf("voting members %v after master-1 was added again", got)
	}
}
