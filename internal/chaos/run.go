package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
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

	"github.com/capstan-dev/capstan/deploy"
	"github.com/capstan-dev/capstan/internal/etcdretry"
	"github.com/capstan-dev/capstan/internal/ports"
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
	// (SampleMembers).
	Members *memberSampler
	// Capstan runs a short-lived capstan command against the cluster
	// (`capstan adm upgrade ...`) and returns its output.
	Capstan func(ctx context.Context, args ...string) (string, error)

	opts *Options
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

// upProcess is the process serving the API while capstan is up, nil
// while it is not.
func (r *Run) upProcess() *process {
	if !r.alive() {
		return nil
	}
	return r.proc.Load()
}

// runOnce runs scenario s with seed. An error is the campaign's own
// failure (no data dir, no process); what capstan did wrong is a
// violation in the result.
func runOnce(ctx context.Context, opts *Options, s *Scenario, seed uint64) (*RunResult, error) {
	start := time.Now()
	kills := PlanKills(s, seed, opts.Kills)
	res := &RunResult{Scenario: s.Name, Seed: seed}
	dir, err := tempDir(opts, s.Name, seed)
	if err != nil {
		return nil, err
	}
	apiPort, err := ports.Free()
	if err != nil {
		return nil, err
	}
	relPort, err := ports.Free()
	if err != nil {
		return nil, err
	}
	// The ports stay for the whole run: release images are pulled by a
	// reference that names the registry's address.
	args := append([]string{"--data-dir", dir, "--port", strconv.Itoa(apiPort), "--metrics-address", "", "--console-address", "",
		"--release-address", "127.0.0.1:" + strconv.Itoa(relPort)}, s.Args...)
	r := &Run{Scenario: s, Seed: seed, DataDir: dir, Kubeconfig: filepath.Join(dir, "kubeconfig"), opts: opts}
	r.Capstan = func(ctx context.Context, args ...string) (string, error) {
		cmd := opts.Command(append(args, "--kubeconfig", r.Kubeconfig)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	violate := func(inv, format string, a ...any) {
		res.Violations = append(res.Violations, Violation{Invariant: inv, Detail: fmt.Sprintf(format, a...)})
	}
	defer func() {
		res.Duration = time.Since(start)
		if len(res.Violations) > 0 || opts.Keep {
			res.DataDir = dir
			return
		}
		os.RemoveAll(dir)
	}()

	// next is the kill the running process is armed for (if it is at a
	// point).
	next := 0
	var p *process
	defer func() {
		if p != nil && !p.exited() {
			p.kill()
		}
	}()
	// boot starts capstan up until a start says it is up. A start that
	// reaches its failpoint first is that kill, landed in the start: the
	// next start is armed for the kill after it.
	boot := func(which string) (bool, error) {
		for {
			armed := ""
			if next < len(kills) {
				armed = kills[next].armed()
			}
			var err error
			if p, err = startProcess(opts.Command, args, armed, s.Faults); err != nil {
				return false, err
			}
			werr := p.waitUp(opts.StartTimeout)
			if werr == nil {
				r.proc.Store(p)
				r.up.Store(true)
				return true, nil
			}
			if armed == "" || !p.reachedFailpoint() || !p.killedBySIGKILL() {
				violate("starts", "%s: %v", which, werr)
				return false, nil
			}
			res.Kills = append(res.Kills, fmt.Sprintf("%s [%.0fs: in the start]", kills[next], time.Since(start).Seconds()))
			next++
			which = fmt.Sprintf("the start after kill %d (%s, in the start)", next, kills[next-1])
			if r.History != nil {
				r.History.reconnect()
			}
		}
	}
	if ok, err := boot("the first start"); !ok || err != nil {
		return res, err
	}
	if err := r.connect(); err != nil {
		return nil, err
	}
	rctx, stopRecording := context.WithCancel(ctx)
	defer stopRecording()
	r.History = record(rctx, dir)
	if err := ensureAckNamespace(ctx, r.Kube); err != nil {
		violate("setup", "%v", err)
		return res, nil
	}
	writes := newAcks(r.Kube, r.upProcess)
	go writes.run(rctx)
	if s.SampleMembers {
		r.Members = sampleMembers(rctx, dir, r.alive)
	}
	killNow := func() {
		r.up.Store(false)
		p.kill()
	}

	// The operation goes on from here, through the kills.
	progress := startProgress(rctx, r)
	for next < len(kills) && len(res.Violations) == 0 {
		kill := kills[next]
		landed := kill.String()
		// A kill at a point waits for the point, unless the operation
		// is over (it will not be reached any more).
		var over <-chan struct{}
		if kill.Point != "" {
			over = progress.done
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-p.done:
		case <-over:
			landed = fmt.Sprintf("%s not reached: the operation completed", kill.Point)
			killNow()
		case <-time.After(killDelay(s, kill)):
			if kill.Point != "" {
				landed = fmt.Sprintf("%s not reached: after %.0fs", kill.Point, killDelay(s, kill).Seconds())
			}
			killNow()
		}
		r.up.Store(false)
		killedAt := time.Now()
		switch {
		case kill.Point != "" && p.reachedFailpoint():
		case !p.killedBySIGKILL():
			violate("crash", "capstan up exited on its own (%s) before kill %d:\n%s", p.exit(), next+1, p.Tail())
			return res, nil
		}
		// Where the operation was, as its last step said.
		landed = fmt.Sprintf("%s [%.0fs: %s]", landed, killedAt.Sub(start).Seconds(), progress.why())
		res.Kills = append(res.Kills, landed)
		r.History.reconnect()
		next++
		if ok, err := boot(fmt.Sprintf("the start after kill %d (%s)", next, landed)); !ok || err != nil {
			return res, err
		}
		// The process may reach its armed point any time now, these
		// checks included: then the next kill has landed, and they wait
		// for the start after it.
		killedAgain := func() bool { return p.exited() && p.reachedFailpoint() }
		at, err := writes.waitAfter(ctx, killedAt, time.Minute, p.done)
		switch {
		case err == nil:
			res.Recoveries = append(res.Recoveries, at.Sub(killedAt))
		case !killedAgain():
			violate("starts", "after kill %d (%s) capstan said it was up, but the API took no write: %v", next, landed, err)
			return res, nil
		}
		lost, err := writes.lost(ctx, 30*time.Second, p.done)
		switch {
		case err != nil && !killedAgain():
			violate("acknowledged writes", "after kill %d (%s): %v", next, landed, err)
		case len(lost) > 0:
			violate("acknowledged writes", "after kill %d (%s): %d lost (%s)", next, landed, len(lost), summarize(lost, 5))
		}
	}
	if len(res.Violations) > 0 {
		return res, nil
	}
	select {
	case <-progress.done:
	case <-p.done:
		violate("crash", "capstan up exited on its own (%s):\n%s", p.exit(), p.Tail())
		return res, nil
	case <-time.After(s.Timeout):
		violate("completes", "not within %s of the last kill: %s", s.Timeout, progress.why())
		return res, nil
	case <-ctx.Done():
		return res, ctx.Err()
	}
	if err := r.History.catchUp(ctx, time.Minute); err != nil {
		violate("history", "%v", err)
		return res, nil
	}
	if lost, err := writes.lost(ctx, 30*time.Second, p.done); err != nil || len(lost) > 0 {
		violate("acknowledged writes", "at the end: %d lost (%s) %v", len(lost), summarize(lost, 5), err)
	}
	res.Changes = r.History.Len()
	res.Completed = progress.at.Sub(start)
	res.Outage = writes.longestOutage()
	if s.MaxOutage > 0 && res.Outage > s.MaxOutage {
		violate("API outage", "the API refused writes for %.1fs while capstan was up, more than the %s a leader election may take", res.Outage.Seconds(), s.MaxOutage)
	}
	res.Violations = append(res.Violations, s.Check(ctx, r)...)
	if err := p.stop(2 * time.Minute); err != nil {
		violate("stops", "%v", err)
	}
	// Every component acts as its own ServiceAccount: RBAC refusing one
	// anything, through every kill and restart, is a right its rbac.yaml
	// lacks. The apiserver's audit log says.
	if refused, err := deploy.Refused(filepath.Join(dir, "logs", "audit.log")); err != nil {
		violate("rights", "reading the audit log: %v", err)
	} else if len(refused) > 0 {
		violate("rights", "RBAC refused capstan's components: %s", strings.Join(refused, "; "))
	}
	return res, nil
}

// killDelay is how long a kill waits: its random delay, or how long its
// point may take to be reached.
func killDelay(s *Scenario, k Kill) time.Duration {
	if k.Point != "" {
		return 3 * s.Window
	}
	return k.After
}

// connect makes the run's clients of the cluster's API.
func (r *Run) connect() error {
	cfg, err := clientcmd.BuildConfigFromFlags("", r.Kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", r.Kubeconfig, err)
	}
	cfg = etcdretry.Wrap(cfg)
	cfg.QPS, cfg.Burst = 100, 200
	cfg.Timeout = 30 * time.Second
	var errs []error
	add := func(err error) { errs = append(errs, err) }
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
