package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	configclient "github.com/openshift/client-go/config/clientset/versioned"
	machineclient "github.com/openshift/client-go/machine/clientset/versioned"
	mcfgclient "github.com/openshift/client-go/machineconfiguration/clientset/versioned"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/capstan-dev/capstan/internal/etcd"
	"github.com/capstan-dev/capstan/internal/etcdretry"
)

// Run is one run of a scenario: its cluster's data dir, clients of its
// API, and the history of its storage.
type Run struct {
	Scenario *Scenario
	Seed     uint64
	DataDir  string
	// Kubeconfig is the cluster's admin kubeconfig.
	Kubeconfig string

	Kube    kubernetes.Interface
	Machine machineclient.Interface
	Config  configclient.Interface
	MCO     mcfgclient.Interface
	Dynamic dynamic.Interface
	// History is every revision of the objects the invariants read.
	History *History
	// Members samples the etcd membership, for scenarios that ask
	// (SampleMembers): that of MembersDir, a data dir (the run's own
	// unless the scenario's target set another).
	Members    *memberSampler
	MembersDir string
	// writes are the run's acknowledged and refused writes.
	writes *acks
	// Capstan runs a short-lived capstan command against the cluster
	// (`capstan adm upgrade ...`) and returns its output.
	Capstan func(ctx context.Context, args ...string) (string, error)

	opts *Options
	// rawKube is Kube without etcdretry's retries: the acknowledged
	// writes' client.
	rawKube kubernetes.Interface
	// op is where the operation is.
	op *operation
	// intents are the settings the campaign made as a user.
	intents intents
	// up: the current process said it was up and has not been killed;
	// proc is that process.
	up   atomic.Bool
	proc atomic.Pointer[process]
}

// alive reports whether capstan is up: it said so, was not killed since,
// and has not died.
func (r *Run) alive() bool {
	p := r.proc.Load()
	return r.up.Load() && p != nil && !p.exited()
}

// opTime is the operation's time now: capstan's time up since the
// operation started.
func (r *Run) opTime() time.Duration { return r.op.elapsed(time.Now()) }

// holdFault keeps a fault in place for d of the operation's time, from
// now: applied while capstan is up, lifted while it is not (a start needs
// etcd whole: kube-apiserver's start hooks, and capstan's wait for a
// fault-tolerant etcd), so that a kill leaves what is left of it for the
// start after; then lifted for good. The operation's time stands still
// while capstan is down, so each start has the fault again until it
// lasted d in all.
func holdFault(ctx context.Context, r *Run, d time.Duration, apply, lift func() error) error {
	from := r.opTime()
	applied := false
	for r.opTime()-from < d {
		if up := r.alive(); up != applied {
			step := lift
			if up {
				step = apply
			}
			if err := step(); err != nil {
				return err
			}
			applied = up
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return lift()
}

// upProcess is the process serving the API while capstan is up, nil
// while it is not.
func (r *Run) upProcess() *process {
	if !r.alive() {
		return nil
	}
	return r.proc.Load()
}

// earliestInstant is the index of the random instant among kills that
// comes first (-1: none is an instant).
func earliestInstant(kills []Kill) int {
	first := -1
	for i, k := range kills {
		if k.Point == "" && (first < 0 || k.After < kills[first].After) {
			first = i
		}
	}
	return first
}

// writeRunLog keeps, in a kept run's data dir, what the run did: its
// kills as they landed, those not reached, and its violations
// (chaos-run.txt).
func writeRunLog(dir string, res *RunResult) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s seed %d\n", res.Scenario, res.Seed)
	for i, k := range res.Kills {
		fmt.Fprintf(&b, "kill %d %s\n", i+1, k)
	}
	for _, k := range res.NotReached {
		fmt.Fprintf(&b, "not reached: %s\n", k)
	}
	for _, v := range res.Violations {
		fmt.Fprintf(&b, "%s\n", v)
	}
	_ = os.WriteFile(filepath.Join(dir, "chaos-run.txt"), []byte(b.String()), 0o644)
}

// waitMembersGone waits until no etcd member process of the cluster of
// dataDir is left: members end with capstan (they are its children, and
// die with it), but asynchronously, and a start beside a dying one would
// find its ports taken.
func waitMembersGone(dataDir string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		left, err := etcd.MemberProcesses(dataDir)
		if err != nil || len(left) == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd members of the killed capstan still run after %s: %v", timeout, left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// connect makes the run's clients of the cluster's API.
func (r *Run) connect() error {
	cfg, err := clientcmd.BuildConfigFromFlags("", r.Kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", r.Kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	cfg.Timeout = 30 * time.Second
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	// The acknowledged writes go without retries: a write the API refused
	// is an outage to measure, not one to hide behind a retry.
	r.rawKube, err = kubernetes.NewForConfig(cfg)
	add(err)
	cfg = etcdretry.Wrap(cfg)
	r.Kube, err = kubernetes.NewForConfig(cfg)
	add(err)
	r.Machine, err = machineclient.NewForConfig(cfg)
	add(err)
	r.Config, err = configclient.NewForConfig(cfg)
	add(err)
	r.MCO, err = mcfgclient.NewForConfig(cfg)
	add(err)
	r.Dynamic, err = dynamic.NewForConfig(cfg)
	add(err)
	return errors.Join(errs...)
}

// progress drives a scenario's operation in the background.
type progress struct {
	done chan struct{}
	// at is when the operation was seen complete.
	at   time.Time
	mu   sync.Mutex
	last string
}

func (p *progress) why() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

func startProgress(ctx context.Context, r *Run) *progress {
	p := &progress{done: make(chan struct{})}
	go func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			done, why, err := r.Scenario.Progress(ctx, r)
			if err != nil {
				why = err.Error()
			}
			p.mu.Lock()
			p.last = why
			p.mu.Unlock()
			if done {
				p.at = time.Now()
				close(p.done)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return p
}
