package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/capstan-dev/capstan/internal/certs"
	"github.com/capstan-dev/capstan/internal/etcd"
	"github.com/capstan-dev/capstan/internal/ports"
	"github.com/capstan-dev/capstan/internal/waitfor"
)

// EtcdOptions size the etcd failover benchmark.
type EtcdOptions struct {
	// Members is the number of control-plane members (3 in OpenShift).
	Members int
	// Kills is how many times the leader's process is SIGKILLed.
	Kills int
	// Rest is how long the cluster's CPU is sampled at rest.
	Rest    time.Duration
	NoFsync bool
	Timeout time.Duration
}

// EtcdResult is what the benchmark measured.
type EtcdResult struct {
	Members int
	// Formed is how long the members took to replace the bootstrap
	// member (start, learners added and promoted, bootstrap removed).
	Formed time.Duration
	// RSSBytes is the resident memory of the member processes at rest,
	// PSSBytes their proportional share of it (shared pages split);
	// CPUAtRest their CPU seconds per second at rest.
	RSSBytes, PSSBytes int64
	CPUAtRest          float64
	// Outages are, per kill of the leader, the time from the SIGKILL to
	// the first write that succeeded after it, through the proxy as
	// kube-apiserver writes.
	Outages []time.Duration
	// Restart is, per kill, the time until the killed member's new
	// process was a healthy voting member again.
	Restarts []time.Duration
}

// Etcd forms a cluster of o.Members member processes behind the proxy
// kube-apiserver uses, measures it at rest, then SIGKILLs the leader's
// process o.Kills times while writing.
func Etcd(ctx context.Context, o EtcdOptions, log io.Writer) (*EtcdResult, error) {
	if o.Members < 1 || o.Kills < 0 {
		return nil, fmt.Errorf("--members must be at least 1 and --kills at least 0 (got %d, %d)", o.Members, o.Kills)
	}
	if o.Kills > 0 && o.Members < 3 {
		return nil, fmt.Errorf("--members %d: a kill needs at least 3 members to keep a quorum", o.Members)
	}
	dir, err := os.MkdirTemp("", "capstan-bench-etcd-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	pki := filepath.Join(dir, "pki")
	tlsFiles, err := certs.EnsureEtcdPKI(pki)
	if err != nil {
		return nil, err
	}
	clientPort, err := ports.Free()
	if err != nil {
		return nil, err
	}
	peerPort, err := ports.Free()
	if err != nil {
		return nil, err
	}
	began := time.Now()
	c, err := etcd.Start(ctx, etcd.Config{DataDir: dir, TLS: tlsFiles, LogFile: filepath.Join(dir, "etcd.log"), NoFsync: o.NoFsync,
		Bootstrap: etcd.MemberSpec{Name: etcd.BootstrapName, Dir: "etcd", ClientPort: clientPort, PeerPort: peerPort}})
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	var names []string
	for i := range o.Members {
		name := "master-" + strconv.Itoa(i)
		names = append(names, name)
		// etcd takes a member only from a leader that has heard from a
		// quorum for a while, and promotes a learner once it caught up:
		// both are tried again, as the etcd operator does.
		for _, step := range []func(context.Context, string) error{c.AddLearner, c.Promote} {
			if err := retry(ctx, o.Timeout, func(ctx context.Context) error { return step(ctx, name) }); err != nil {
				return nil, fmt.Errorf("member %s did not join: %w", name, err)
			}
		}
	}
	if err := retry(ctx, o.Timeout, func(ctx context.Context) error { return c.Remove(ctx, etcd.BootstrapName) }); err != nil {
		return nil, fmt.Errorf("the bootstrap member did not leave: %w", err)
	}
	res := &EtcdResult{Members: o.Members, Formed: time.Since(began)}
	fmt.Fprintf(log, "%d members formed in %.1f s\n", o.Members, res.Formed.Seconds())

	pids := c.MemberPIDs()
	before, err := cpuSeconds(pids)
	if err != nil {
		return nil, err
	}
	restStart := time.Now()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(o.Rest):
	}
	after, err := cpuSeconds(pids)
	if err != nil {
		return nil, err
	}
	res.CPUAtRest = (after - before) / time.Since(restStart).Seconds()
	for _, pid := range pids {
		b, err := vmField(fmt.Sprintf("/proc/%d/status", pid), "VmRSS:")
		if err != nil {
			return nil, err
		}
		res.RSSBytes += b
		// The members run one binary: its pages are shared, and the
		// proportional set splits them between the processes.
		if b, err = vmField(fmt.Sprintf("/proc/%d/smaps_rollup", pid), "Pss:"); err != nil {
			return nil, err
		}
		res.PSSBytes += b
	}

	tlsConfig, err := transport.TLSInfo{CertFile: tlsFiles.ClientCert, KeyFile: tlsFiles.ClientKey, TrustedCAFile: tlsFiles.CA}.ClientConfig()
	if err != nil {
		return nil, err
	}
	// One endpoint, the proxy, as kube-apiserver is configured.
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{c.URL()}, TLS: tlsConfig, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	defer client.Close()
	for k := range o.Kills {
		leader, err := leaderName(ctx, c)
		if err != nil {
			return nil, err
		}
		pid := c.MemberPIDs()[leader]
		if pid == 0 {
			return nil, fmt.Errorf("the leader %s has no process", leader)
		}
		killed := time.Now()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return nil, fmt.Errorf("killing %s (pid %d): %w", leader, pid, err)
		}
		key := fmt.Sprintf("/bench/after-kill-%d", k)
		if err := retry(ctx, o.Timeout, func(ctx context.Context) error {
			// Short attempts: the outage is measured to within one.
			wctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
			defer cancel()
			_, err := client.Put(wctx, key, leader)
			return err
		}); err != nil {
			return nil, fmt.Errorf("no write succeeded after the leader %s was killed: %w", leader, err)
		}
		outage := time.Since(killed)
		// The next kill waits for the member to be back and healthy.
		err = waitfor.Poll(ctx, 50*time.Millisecond, o.Timeout, func(ctx context.Context) (bool, string, error) {
			now := c.MemberPIDs()[leader]
			if now == 0 || now == pid {
				return false, "the killed member has no new process", nil
			}
			members, err := c.Members(ctx)
			if err != nil {
				return false, err.Error(), nil
			}
			healthy := 0
			for _, m := range members {
				if m.Healthy && !m.Learner && slices.Contains(names, m.Name) {
					healthy++
				}
			}
			return healthy == o.Members, fmt.Sprintf("%d of %d members healthy", healthy, o.Members), nil
		})
		if err != nil {
			return nil, fmt.Errorf("member %s did not come back after its kill: %w", leader, err)
		}
		res.Outages = append(res.Outages, outage)
		res.Restarts = append(res.Restarts, time.Since(killed))
		fmt.Fprintf(log, "kill %d: leader %s; writes again after %d ms; the member healthy again after %.1f s\n",
			k+1, leader, outage.Milliseconds(), time.Since(killed).Seconds())
	}
	return res, nil
}

// leaderName is the name of the member that leads now.
func leaderName(ctx context.Context, c *etcd.Cluster) (string, error) {
	members, err := c.Members(ctx)
	if err != nil {
		return "", err
	}
	for _, m := range members {
		if m.Healthy {
			st, err := c.Client().Status(ctx, m.ClientURL)
			if err != nil {
				continue
			}
			for _, l := range members {
				if l.ID == st.Leader {
					return l.Name, nil
				}
			}
		}
	}
	return "", fmt.Errorf("no member knows a leader")
}

// retry calls f until it succeeds, ctx ends or timeout passes.
func retry(ctx context.Context, timeout time.Duration, f func(context.Context) error) error {
	return waitfor.Poll(ctx, 100*time.Millisecond, timeout, func(ctx context.Context) (bool, string, error) {
		if err := f(ctx); err != nil {
			return false, err.Error(), nil
		}
		return true, "", nil
	})
}

// cpuSeconds sums the user and system CPU of processes (/proc/PID/stat).
func cpuSeconds(pids map[string]int) (float64, error) {
	const ticks = 100 // USER_HZ on Linux
	total := 0.0
	for name, pid := range pids {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, fmt.Errorf("member %s: %w", name, err)
		}
		rest := string(raw)
		if i := strings.LastIndexByte(rest, ')'); i >= 0 {
			rest = rest[i+1:]
		}
		// After the command: state is field 3; utime and stime 14 and 15.
		f := strings.Fields(rest)
		if len(f) < 13 {
			return 0, fmt.Errorf("member %s: short /proc stat", name)
		}
		for _, v := range f[11:13] {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, err
			}
			total += n / ticks
		}
	}
	return total, nil
}

// Quantile is the q-quantile of ds by nearest rank (0 when empty).
func Quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}
