package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
	"github.com/capstan-dev/capstan/internal/etcd"
	"github.com/capstan-dev/capstan/internal/etcdretry"
	"github.com/capstan-dev/capstan/internal/failpoint"
	"github.com/capstan-dev/capstan/internal/ports"
	"github.com/capstan-dev/capstan/internal/seeded"
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
	timeout := s.Timeout
	if opts.Timeout > 0 {
		timeout = opts.Timeout
	}
	kills := PlanKills(s, seed, opts.Kills)
	if opts.EveryPoint {
		kills = PlanEveryPoint(s, seed, opts.Kills)
	}
	if opts.Plan != nil {
		kills = slices.Clone(opts.Plan)
	}
	res := &RunResult{Scenario: s.Name, Seed: seed}
	res.MaxOutage, res.MaxRecovery = s.bounds()
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
	r := &Run{Scenario: s, Seed: seed, DataDir: dir, Kubeconfig: filepath.Join(dir, "kubeconfig"), opts: opts, op: newOperation()}
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
			writeRunLog(dir, res)
			return
		}
		os.RemoveAll(dir)
	}()
	if s.Prepare != nil {
		undo, err := s.Prepare(dir)
		if err != nil {
			return nil, err
		}
		// After the process is killed (deferred later, run earlier), before
		// the data dir is removed.
		defer undo()
	}
	env := slices.Clone(opts.Env)
	if s.Faults != "" {
		env = append(env, failpoint.FaultEnv+"="+s.Faults)
	}

	// next is the kill the running process is armed for (if it is at a
	// point, and the operation started: the file armFile arms it).
	next := 0
	// p is the current process; starts counts the starts.
	var p *process
	starts := 0
	armFile := filepath.Join(dir, "chaos-failpoint")
	// Every point not landed yet is armed at once, and the earliest
	// instant not landed yet timed beside them: the operation reaches
	// them in its own order, which a kill can change, and a kill planned
	// for later never keeps one the operation reaches first from landing.
	arm := func() error {
		if next >= len(kills) || !r.op.hasStarted() {
			return failpoint.WriteArmFile(armFile)
		}
		var arms []failpoint.Arm
		for _, k := range kills[next:] {
			if k.Point != "" && !slices.ContainsFunc(arms, func(a failpoint.Arm) bool { return a.Name == k.Point }) {
				arms = append(arms, failpoint.Arm{Name: k.Point, Hit: k.Hit})
			}
		}
		return failpoint.WriteArmFile(armFile, arms...)
	}
	// landedFirst moves the kill that landed to next: the point the
	// process reached, or else the earliest instant.
	landedFirst := func() {
		if name := p.reachedPoint(); name != "" {
			if i := slices.IndexFunc(kills[next:], func(k Kill) bool { return k.Point == name }); i > 0 {
				kills[next], kills[next+i] = kills[next+i], kills[next]
			}
			return
		}
		if i := earliestInstant(kills[next:]); i > 0 {
			kills[next], kills[next+i] = kills[next+i], kills[next]
		}
	}
	landed := func(inStart bool) {
		landedFirst()
		now := time.Now()
		res.Kills = append(res.Kills, KillResult{Kill: kills[next], At: now.Sub(start), OpTime: r.op.elapsed(now), Phase: r.op.Phase(), InStart: inStart})
		r.op.down(now)
		next++
	}
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
			if err := arm(); err != nil {
				return false, err
			}
			if err := waitMembersGone(dir, time.Minute); err != nil {
				violate("stops", "%s: %v", which, err)
				return false, nil
			}
			// capstan's own randomness follows the run's seed, start by
			// start: a replay draws the same names and orders.
			starts++
			startEnv := append(slices.Clone(env), fmt.Sprintf("%s=%d", seeded.Env, seed*1_000_003+uint64(starts)))
			var err error
			if p, err = startProcess(opts.Command, args, armFile, startEnv...); err != nil {
				return false, err
			}
			werr := p.waitUp(opts.StartTimeout)
			if werr == nil {
				r.proc.Store(p)
				r.up.Store(true)
				r.op.up(time.Now())
				return true, nil
			}
			if !p.reachedFailpoint() || !p.killedBySIGKILL() {
				violate("starts", "%s: %v", which, werr)
				return false, nil
			}
			landed(true)
			which = fmt.Sprintf("the start after kill %d (%s)", next, res.Kills[next-1])
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
	writes := newAcks(r.rawKube, r.upProcess)
	r.writes = writes
	go writes.run(rctx)
	lin := newLinClients(r.rawKube, r.upProcess)
	linCtx, stopLin := context.WithCancel(rctx)
	defer stopLin()
	linDone := make(chan struct{})
	go func() {
		defer close(linDone)
		lin.run(linCtx, seed)
	}()
	if s.SampleMembers {
		r.Members = sampleMembers(rctx, dir, r.alive)
	}
	// killedByUs: the campaign sent the SIGKILL of the current process
	// (a random instant); a point's kill is the process's own.
	killedByUs := false
	killNow := func() {
		r.up.Store(false)
		killedByUs = true
		p.kill()
	}

	// The operation goes on from here, through the kills, each of which
	// waits for the operation to start.
	progress := startProgress(rctx, r)
	select {
	case <-r.op.started:
	case <-progress.done:
	case <-p.done:
	case <-time.After(timeout):
		violate("completes", "the operation did not start within %s of capstan being up: %s", timeout, progress.why())
	case <-ctx.Done():
		return res, ctx.Err()
	}
	for next < len(kills) && len(res.Violations) == 0 {
		killedByUs = false
		if err := arm(); err != nil {
			return nil, err
		}
		var fire <-chan time.Time
		if i := earliestInstant(kills[next:]); i >= 0 {
			fire = time.After(max(0, kills[next+i].After-r.op.elapsed(time.Now())))
		}
		notReached := func(why string) {
			res.NotReached = append(res.NotReached, kills[next:]...)
			// CI's plan, a kill at each point, must reach every one.
			for _, k := range kills[next:] {
				if k.Point != "" && opts.EveryPoint {
					violate("kills", "%s was not reached: %s, in its phase %s", k, why, r.op.Phase())
				}
			}
			next = len(kills)
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-p.done:
		case <-progress.done:
			notReached("the operation completed")
			continue
		case <-time.After(timeout):
			notReached(fmt.Sprintf("not within %s", timeout))
			continue
		case <-fire:
			killNow()
		}
		r.up.Store(false)
		switch {
		case p.reachedFailpoint():
		case killedByUs:
		case !p.killedBySIGKILL():
			violate("crash", "capstan up exited on its own (%s) before kill %d:\n%s", p.exit(), next+1, p.Tail())
			return res, nil
		default:
			// SIGKILLed, but neither at its point nor by the campaign:
			// the OOM killer, say. No planned kill landed.
			violate("crash", "capstan up was SIGKILLed by something other than the campaign (the OOM killer?) before kill %d:\n%s", next+1, p.Tail())
			return res, nil
		}
		killedAt := time.Now()
		landed(false)
		r.History.reconnect()
		if ok, err := boot(fmt.Sprintf("the start after kill %d (%s)", next, res.Kills[next-1])); !ok || err != nil {
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
			if d := at.Sub(killedAt); d > res.MaxRecovery {
				violate("recovery", "after kill %d (%s) the API took a write %.1fs after the kill, more than the %s allowed", next, res.Kills[next-1], d.Seconds(), res.MaxRecovery)
			}
		case !killedAgain():
			violate("starts", "after kill %d (%s) capstan said it was up, but the API took no write: %v", next, res.Kills[next-1], err)
			// What it lost may be why (the writes' namespace gone).
			if lost, err := writes.lost(ctx, 10*time.Second, p.done); err == nil && len(lost) > 0 {
				violate("acknowledged writes", "after kill %d (%s): %d lost (%s)", next, res.Kills[next-1], len(lost), summarize(lost, 5))
			}
			return res, nil
		}
		lost, err := writes.lost(ctx, 30*time.Second, p.done)
		switch {
		case err != nil && !killedAgain():
			violate("acknowledged writes", "after kill %d (%s): %v", next, res.Kills[next-1], err)
		case len(lost) > 0:
			violate("acknowledged writes", "after kill %d (%s): %d lost (%s)", next, res.Kills[next-1], len(lost), summarize(lost, 5))
		}
	}
	complete := len(res.Violations) == 0
	if complete {
		select {
		case <-progress.done:
		case <-p.done:
			violate("crash", "capstan up exited on its own (%s):\n%s", p.exit(), p.Tail())
			return res, nil
		case <-time.After(timeout):
			violate("completes", "not within %s of the last kill: %s", timeout, progress.why())
			complete = false
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
	if p.exited() {
		return res, nil
	}
	// The invariants are checked on what the cluster did, whether the
	// operation completed or not: a duplicate explains a run that never
	// completes. The clients stop first, so that the history holds all
	// they wrote.
	stopLin()
	<-linDone
	if err := r.History.catchUp(ctx, time.Minute); err != nil {
		violate("history", "%v", err)
		return res, nil
	}
	if lost, err := writes.lost(ctx, 30*time.Second, p.done); err != nil || len(lost) > 0 {
		violate("acknowledged writes", "at the end: %d lost (%s) %v", len(lost), summarize(lost, 5), err)
	}
	res.Changes = r.History.Len()
	if complete {
		res.Completed = progress.at.Sub(start)
		res.Operation = r.op.elapsed(progress.at)
	}
	res.Outage = writes.longestOutage()
	if res.Outage > res.MaxOutage {
		violate("API outage", "the API refused writes for %.1fs while capstan was up, more than the %s allowed", res.Outage.Seconds(), res.MaxOutage)
	}
	res.Violations = append(res.Violations, s.Check(ctx, r)...)
	ops := lin.history()
	res.Operations = len(ops)
	res.Violations = append(res.Violations, checkLinearizable(ops, filepath.Join(dir, "linearizability.html"))...)
	res.Violations = append(res.Violations, checkWatch(r.History.Received(linKeyPrefix), ops)...)
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
