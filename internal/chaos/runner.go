package chaos

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/deploy"
	"github.com/capstan-dev/capstan/internal/failpoint"
	"github.com/capstan-dev/capstan/internal/planted"
	"github.com/capstan-dev/capstan/internal/ports"
	"github.com/capstan-dev/capstan/internal/seeded"
)

// runner is one run of a scenario, step by step (see runOnce): what it
// planned, the process it runs, and what it found.
type runner struct {
	opts  *Options
	s     *Scenario
	seed  uint64
	start time.Time
	// timeout bounds the operation's start, each wait for a kill, and its
	// completion after the last.
	timeout time.Duration
	// dir is the run's data dir; args and env start capstan up on it;
	// armFile arms its kill points.
	dir     string
	args    []string
	env     []string
	armFile string

	r   *Run
	res *RunResult
	// kills are the planned kills; next the first not landed yet.
	kills []Kill
	next  int
	// p is the current process the kills land in; starts counts the
	// starts; killedByUs says the campaign sent the current process's
	// SIGKILL (a random instant: a point's kill is the process's own).
	// host is capstan up when a target is what the kills land in (p);
	// targetLog gets what the target prints.
	host       *process
	targetLog  io.Writer
	p          *process
	starts     int
	killedByUs bool
	// hits are the hits of each point the operation made in the
	// processes before the current one (a kill at a point is its hit
	// too): a point armed again waits for its planned hit, counted from
	// the operation's start.
	hits map[string]int

	// The clients of the run, started once capstan is first up: the
	// acknowledged writes, the linearizability clients (stopped by
	// stopLin, done when closed), the scenario's operation.
	writes   *acks
	lin      *linClients
	stopLin  context.CancelFunc
	linDone  chan struct{}
	progress *progress
	// cleanups run when the run ends, last first.
	cleanups []func()
}

// runStep is one step of a run. It stops the run (stop) when what it
// found leaves nothing to check after it; an error is the campaign's own
// failure, not capstan's.
type runStep struct {
	name string
	run  func(context.Context) (stop bool, err error)
}

// runOnce runs scenario s with seed, as these steps. An error is the
// campaign's own failure (no data dir, no process); what capstan did
// wrong is a violation in the result.
func runOnce(ctx context.Context, opts *Options, s *Scenario, seed uint64) (*RunResult, error) {
	rn := newRunner(opts, s, seed)
	defer rn.cleanup()
	for _, step := range []runStep{
		{"prepare the data dir", rn.prepare},
		{"start capstan up", rn.firstStart},
		{"start the clients", rn.startClients},
		{"wait for the operation", rn.awaitOperation},
		{"kill", rn.killAll},
		{"wait for the operation to complete", rn.awaitCompletion},
		{"check the invariants", rn.check},
	} {
		stop, err := step.run(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", step.name, err)
		}
		if stop {
			break
		}
	}
	return rn.res, nil
}

func newRunner(opts *Options, s *Scenario, seed uint64) *runner {
	rn := &runner{opts: opts, s: s, seed: seed, start: time.Now(), timeout: s.Timeout,
		res: &RunResult{Scenario: s.Name, Seed: seed}}
	if opts.Timeout > 0 {
		rn.timeout = opts.Timeout
	}
	rn.kills = PlanKills(s, seed, opts.Kills)
	if opts.EveryPoint {
		rn.kills = PlanEveryPoint(s, seed, opts.Kills)
	}
	if opts.Plan != nil {
		rn.kills = slices.Clone(opts.Plan)
	}
	rn.res.MaxOutage, rn.res.MaxRecovery = s.bounds()
	return rn
}

func (rn *runner) violate(inv, format string, a ...any) {
	rn.res.Violations = append(rn.res.Violations, Violation{Invariant: inv, Detail: fmt.Sprintf(format, a...)})
}

func (rn *runner) onCleanup(f func()) { rn.cleanups = append(rn.cleanups, f) }

// cleanup kills the process left, undoes the scenario's preparation, and
// keeps the data dir of a run that found something (or --keep), else
// removes it.
func (rn *runner) cleanup() {
	for i := len(rn.cleanups) - 1; i >= 0; i-- {
		rn.cleanups[i]()
	}
}

// prepare makes the data dir, picks the ports and prepares the scenario.
func (rn *runner) prepare(context.Context) (bool, error) {
	dir, err := tempDir(rn.opts, rn.s.Name, rn.seed)
	if err != nil {
		return false, err
	}
	rn.dir = dir
	rn.onCleanup(func() {
		rn.res.Duration = time.Since(rn.start)
		if len(rn.res.Violations) > 0 || rn.opts.Keep {
			rn.res.DataDir = dir
			writeRunLog(dir, rn.res)
			return
		}
		os.RemoveAll(dir)
	})
	apiPort, err := ports.Free()
	if err != nil {
		return false, err
	}
	relPort, err := ports.Free()
	if err != nil {
		return false, err
	}
	// The ports stay for the whole run: release images are pulled by a
	// reference that names the registry's address.
	rn.args = append([]string{"--data-dir", dir, "--port", strconv.Itoa(apiPort), "--metrics-address", "", "--console-address", "",
		"--release-address", "127.0.0.1:" + strconv.Itoa(relPort)}, rn.s.Args...)
	r := &Run{Scenario: rn.s, Seed: rn.seed, DataDir: dir, MembersDir: dir, Kubeconfig: filepath.Join(dir, "kubeconfig"), opts: rn.opts, op: newOperation()}
	r.Capstan = func(ctx context.Context, args ...string) (string, error) {
		cmd := rn.opts.Command(append(args, "--kubeconfig", r.Kubeconfig)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	rn.r = r
	if rn.s.Prepare != nil {
		undo, err := rn.s.Prepare(r)
		if err != nil {
			return false, err
		}
		// After the process is killed, before the data dir is removed.
		rn.onCleanup(undo)
	}
	rn.env = slices.Clone(rn.opts.Env)
	if rn.s.Faults != "" {
		rn.env = append(rn.env, failpoint.FaultEnv+"="+rn.s.Faults)
	}
	rn.armFile = filepath.Join(dir, "chaos-failpoint")
	rn.onCleanup(func() {
		if rn.p != nil && !rn.p.exited() {
			rn.p.kill()
		}
	})
	return false, nil
}

// arm arms every point not landed yet at once; the earliest instant not
// landed yet is timed beside them (killAll): the operation reaches them
// in its own order, which a kill can change, and a kill planned for later
// never keeps one the operation reaches first from landing.
func (rn *runner) arm() error {
	if rn.next >= len(rn.kills) || !rn.r.op.hasStarted() {
		return failpoint.WriteArmFile(rn.armFile)
	}
	var arms []failpoint.Arm
	for _, k := range rn.kills[rn.next:] {
		if k.Point != "" && !slices.ContainsFunc(arms, func(a failpoint.Arm) bool { return a.Name == k.Point }) {
			// A hit already passed (a kill elsewhere came first) is
			// waited for at the next hit.
			arms = append(arms, failpoint.Arm{Name: k.Point, Hit: max(1, k.Hit-rn.hits[k.Point])})
		}
	}
	return failpoint.WriteArmFile(rn.armFile, arms...)
}

// landed records the kill that landed, moved to next: the point the
// process reached, or else the earliest instant.
func (rn *runner) landed(inStart bool) {
	rest := rn.kills[rn.next:]
	i := earliestInstant(rest)
	if name := rn.p.reachedPoint(); name != "" {
		i = slices.IndexFunc(rest, func(k Kill) bool { return k.Point == name })
	}
	if i > 0 {
		rest[0], rest[i] = rest[i], rest[0]
	}
	if rn.hits == nil {
		rn.hits = map[string]int{}
	}
	for name, n := range rn.p.pointHits() {
		rn.hits[name] += n
	}
	if name := rn.p.reachedPoint(); name != "" {
		rn.hits[name]++
	}
	now := time.Now()
	rn.res.Kills = append(rn.res.Kills, KillResult{Kill: rn.kills[rn.next], At: now.Sub(rn.start), OpTime: rn.r.op.elapsed(now), Phase: rn.r.op.Phase(), InStart: inStart})
	rn.r.op.down(now)
	rn.next++
}

// boot starts capstan up until a start says it is up. A start that
// reaches its failpoint first is that kill, landed in the start: the next
// start is armed for the kill after it. It returns false when capstan did
// not start (a violation).
func (rn *runner) boot(which string) (bool, error) {
	for {
		// A target's kill leaves capstan up's members be.
		if rn.host == nil {
			if err := waitMembersGone(rn.dir, time.Minute); err != nil {
				rn.violate("stops", "%s: %v", which, err)
				return false, nil
			}
		}
		if rn.starts > 0 && rn.s.AfterKill != nil {
			if err := rn.s.AfterKill(rn.dir); err != nil {
				return false, fmt.Errorf("after kill %d: %w", rn.next, err)
			}
		}
		// Armed once what follows a kill is done (a power cut drops the
		// file written before it).
		if err := rn.arm(); err != nil {
			return false, err
		}
		// capstan's own randomness follows the run's seed, start by
		// start: a replay draws the same names and orders.
		rn.starts++
		startEnv := append(slices.Clone(rn.env), fmt.Sprintf("%s=%d", seeded.Env, rn.seed*1_000_003+uint64(rn.starts)))
		var err error
		if rn.host != nil {
			args, aerr := rn.s.Target.Args(rn.r)
			if aerr != nil {
				return false, fmt.Errorf("the target's command line: %w", aerr)
			}
			rn.p, err = startLogged(rn.opts.Command, args, rn.s.Target.UpLine, rn.armFile, rn.targetLog, startEnv...)
		} else {
			rn.p, err = startProcess(rn.opts.Command, rn.args, rn.armFile, startEnv...)
		}
		if err != nil {
			return false, err
		}
		rn.killedByUs = false
		werr := rn.p.waitUp(rn.opts.StartTimeout)
		if werr == nil {
			if rn.host == nil {
				rn.r.proc.Store(rn.p)
				rn.r.up.Store(true)
			}
			rn.r.op.up(time.Now())
			return true, nil
		}
		if !rn.p.reachedFailpoint() || !rn.p.killedBySIGKILL() {
			rn.violate("starts", "%s: %v", which, werr)
			return false, nil
		}
		rn.landed(true)
		which = fmt.Sprintf("the start after kill %d (%s)", rn.next, rn.res.Kills[rn.next-1])
		if rn.r.History != nil {
			rn.r.History.reconnect()
		}
	}
}

// firstStart starts capstan up and connects the run's clients to it;
// a scenario with a target then has it set up and started.
func (rn *runner) firstStart(ctx context.Context) (bool, error) {
	if rn.s.Target != nil {
		return rn.startTarget(ctx)
	}
	if ok, err := rn.boot("the first start"); !ok || err != nil {
		return true, err
	}
	return false, rn.r.connect()
}

// startTarget starts capstan up, which serves the whole run without a
// kill point armed, a lasting fault or a planted bug, then the scenario's
// target, the process the kills land in.
func (rn *runner) startTarget(ctx context.Context) (bool, error) {
	hostArms := filepath.Join(rn.dir, "chaos-failpoint-host")
	if err := failpoint.WriteArmFile(hostArms); err != nil {
		return true, err
	}
	env := append(slices.Clone(rn.opts.Env), fmt.Sprintf("%s=%d", seeded.Env, rn.seed*1_000_003))
	env = slices.DeleteFunc(env, func(e string) bool { return strings.HasPrefix(e, planted.Env+"=") })
	host, err := startProcess(rn.opts.Command, rn.args, hostArms, env...)
	if err != nil {
		return true, err
	}
	rn.host = host
	rn.onCleanup(func() {
		if !host.exited() {
			host.kill()
		}
	})
	if err := host.waitUp(rn.opts.StartTimeout); err != nil {
		rn.violate("starts", "the first start of capstan up: %v", err)
		return true, nil
	}
	rn.r.proc.Store(host)
	rn.r.up.Store(true)
	if err := rn.r.connect(); err != nil {
		return true, err
	}
	// What the target prints, start after start, is kept beside
	// capstan's logs.
	logFile, err := os.OpenFile(filepath.Join(rn.dir, "logs", "target.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return true, err
	}
	rn.onCleanup(func() { logFile.Close() })
	rn.targetLog = logFile
	undo, err := rn.s.Target.Setup(ctx, rn.r)
	if undo != nil {
		rn.onCleanup(undo)
	}
	if err != nil {
		return true, fmt.Errorf("setting up the target: %w", err)
	}
	if ok, err := rn.boot("the first start of the target"); !ok || err != nil {
		return true, err
	}
	return false, nil
}

// hostDone is closed when capstan up serving a target's run exited (nil
// without a target: the kills' process is capstan up).
func (rn *runner) hostDone() <-chan struct{} {
	if rn.host == nil {
		return nil
	}
	return rn.host.done
}

// hostCrashed records capstan up's exit under a target as a crash.
func (rn *runner) hostCrashed() {
	rn.violate("crash", "%s exited on its own (%s):\n%s", rn.host.name, rn.host.exit(), rn.host.Tail())
}

// startClients starts what follows the run until it ends: the history of
// the storage, the acknowledged writes, the linearizability clients, the
// etcd members' sampler, and the scenario's operation.
func (rn *runner) startClients(ctx context.Context) (bool, error) {
	rctx, stopRecording := context.WithCancel(ctx)
	rn.onCleanup(stopRecording)
	rn.r.History = record(rctx, rn.dir)
	if err := ensureAckNamespace(ctx, rn.r.Kube); err != nil {
		rn.violate("setup", "%v", err)
		return true, nil
	}
	rn.writes = newAcks(rn.r.rawKube, rn.r.upProcess)
	rn.r.writes = rn.writes
	go rn.writes.run(rctx)
	rn.lin = newLinClients(rn.r.rawKube, rn.r.upProcess)
	linCtx, stopLin := context.WithCancel(rctx)
	rn.stopLin = stopLin
	rn.onCleanup(stopLin)
	rn.linDone = make(chan struct{})
	go func() {
		defer close(rn.linDone)
		rn.lin.run(linCtx, rn.seed)
	}()
	if rn.s.SampleMembers {
		rn.r.Members = sampleMembers(rctx, rn.r.MembersDir, rn.r.alive)
	}
	rn.progress = startProgress(rctx, rn.r)
	return false, nil
}

// awaitOperation waits for the scenario's operation to start: kills land
// only in it.
func (rn *runner) awaitOperation(ctx context.Context) (bool, error) {
	select {
	case <-rn.r.op.started:
	case <-rn.progress.done:
	case <-rn.p.done:
	case <-rn.hostDone():
	case <-time.After(rn.timeout):
		rn.violate("completes", "the operation did not start within %s of capstan being up: %s", rn.timeout, rn.progress.why())
	case <-ctx.Done():
		return true, ctx.Err()
	}
	return false, nil
}

// killAll lands the planned kills one after another, each followed by a
// start, a check that the API takes writes again within its bound, and
// a check that no acknowledged write was lost. It stops at the first
// violation.
func (rn *runner) killAll(ctx context.Context) (bool, error) {
	for rn.next < len(rn.kills) && len(rn.res.Violations) == 0 {
		stop, err := rn.killOnce(ctx)
		if stop || err != nil {
			return true, err
		}
	}
	return false, nil
}

// notReached records the kills left as never landed: CI's plan, a kill
// at each point, must reach every one.
func (rn *runner) notReached(why string) {
	rn.res.NotReached = append(rn.res.NotReached, rn.kills[rn.next:]...)
	for _, k := range rn.kills[rn.next:] {
		if k.Point != "" && rn.opts.EveryPoint {
			rn.violate("kills", "%s was not reached: %s, in its phase %s", k, why, rn.r.op.Phase())
		}
	}
	rn.next = len(rn.kills)
}

func (rn *runner) killOnce(ctx context.Context) (bool, error) {
	if err := rn.arm(); err != nil {
		return true, err
	}
	var fire <-chan time.Time
	if i := earliestInstant(rn.kills[rn.next:]); i >= 0 {
		fire = time.After(max(0, rn.kills[rn.next+i].After-rn.r.op.elapsed(time.Now())))
	}
	p := rn.p
	select {
	case <-ctx.Done():
		return true, ctx.Err()
	case <-rn.hostDone():
		rn.hostCrashed()
		return true, nil
	case <-p.done:
	case <-rn.progress.done:
		rn.notReached("the operation completed")
		return false, nil
	case <-time.After(rn.timeout):
		rn.notReached(fmt.Sprintf("not within %s", rn.timeout))
		return false, nil
	case <-fire:
		rn.serving(false)
		rn.killedByUs = true
		p.kill()
	}
	rn.serving(false)
	switch {
	case p.reachedFailpoint():
	case rn.killedByUs:
	case !p.killedBySIGKILL():
		rn.violate("crash", "%s exited on its own (%s) before kill %d:\n%s", p.name, p.exit(), rn.next+1, p.Tail())
		return true, nil
	default:
		// SIGKILLed, but neither at its point nor by the campaign: the
		// OOM killer, say. No planned kill landed.
		rn.violate("crash", "%s was SIGKILLed by something other than the campaign (the OOM killer?) before kill %d:\n%s", p.name, rn.next+1, p.Tail())
		return true, nil
	}
	killedAt := time.Now()
	rn.landed(false)
	rn.r.History.reconnect()
	if ok, err := rn.boot(fmt.Sprintf("the start after kill %d (%s)", rn.next, rn.res.Kills[rn.next-1])); !ok || err != nil {
		return true, err
	}
	return rn.recovered(ctx, killedAt)
}

// serving records whether the API serves: it stops with a kill of
// capstan up, not with a target's.
func (rn *runner) serving(up bool) {
	if rn.host == nil {
		rn.r.up.Store(up)
	}
}

// recovered checks, after a kill and its start, that the API took a
// write within the recovery bound and lost none it had acknowledged. The
// process may reach its armed point any time now, these checks included:
// then the next kill has landed, and they wait for the start after it.
func (rn *runner) recovered(ctx context.Context, killedAt time.Time) (bool, error) {
	p, which := rn.p, fmt.Sprintf("kill %d (%s)", rn.next, rn.res.Kills[rn.next-1])
	killedAgain := func() bool { return p.exited() && p.reachedFailpoint() }
	at, err := rn.writes.waitAfter(ctx, killedAt, time.Minute, p.done)
	switch {
	case err == nil:
		rn.res.Recoveries = append(rn.res.Recoveries, at.Sub(killedAt))
		if d := at.Sub(killedAt); d > rn.res.MaxRecovery {
			rn.violate("recovery", "after %s the API took a write %.1fs after the kill, more than the %s allowed", which, d.Seconds(), rn.res.MaxRecovery)
		}
	case !killedAgain():
		rn.violate("starts", "after %s capstan said it was up, but the API took no write: %v", which, err)
		// What it lost may be why (the writes' namespace gone).
		if lost, err := rn.writes.lost(ctx, 10*time.Second, p.done); err == nil && len(lost) > 0 {
			rn.violate("acknowledged writes", "after %s: %d lost (%s)", which, len(lost), summarize(lost, 5))
		}
		return true, nil
	}
	lost, err := rn.writes.lost(ctx, 30*time.Second, p.done)
	switch {
	case err != nil && !killedAgain():
		rn.violate("acknowledged writes", "after %s: %v", which, err)
	case len(lost) > 0:
		rn.violate("acknowledged writes", "after %s: %d lost (%s)", which, len(lost), summarize(lost, 5))
	}
	return false, nil
}

// awaitCompletion waits for the operation to complete after the last
// kill (a run with a violation already goes straight to the checks).
func (rn *runner) awaitCompletion(ctx context.Context) (bool, error) {
	if len(rn.res.Violations) == 0 {
		select {
		case <-rn.progress.done:
			rn.res.Completed = rn.progress.at.Sub(rn.start)
			rn.res.Operation = rn.r.op.elapsed(rn.progress.at)
		case <-rn.p.done:
			rn.violate("crash", "%s exited on its own (%s):\n%s", rn.p.name, rn.p.exit(), rn.p.Tail())
			return true, nil
		case <-rn.hostDone():
			rn.hostCrashed()
			return true, nil
		case <-time.After(rn.timeout):
			rn.violate("completes", "not within %s of the last kill: %s", rn.timeout, rn.progress.why())
		case <-ctx.Done():
			return true, ctx.Err()
		}
	}
	return rn.p.exited(), nil
}

// check checks the invariants on what the cluster did, whether the
// operation completed or not (a duplicate explains a run that never
// completes), then stops capstan up and reads its audit log.
func (rn *runner) check(ctx context.Context) (bool, error) {
	r, p := rn.r, rn.p
	// The clients stop first, so that the history holds all they wrote.
	rn.stopLin()
	<-rn.linDone
	if rn.s.CheckMembers != nil {
		rn.res.Violations = append(rn.res.Violations, rn.s.CheckMembers(r)...)
	}
	if err := r.History.catchUp(ctx, time.Minute); err != nil {
		rn.violate("history", "%v", err)
		return true, nil
	}
	if lost, err := rn.writes.lost(ctx, 30*time.Second, p.done); err != nil || len(lost) > 0 {
		rn.violate("acknowledged writes", "at the end: %d lost (%s) %v", len(lost), summarize(lost, 5), err)
	}
	rn.res.Changes = r.History.Len()
	rn.res.Outage = rn.writes.longestOutage()
	if rn.res.Outage > rn.res.MaxOutage {
		rn.violate("API outage", "the API refused writes for %.1fs while capstan was up, more than the %s allowed", rn.res.Outage.Seconds(), rn.res.MaxOutage)
	}
	rn.res.Violations = append(rn.res.Violations, rn.s.Check(ctx, r)...)
	ops := rn.lin.history()
	rn.res.Operations = len(ops)
	rn.res.Violations = append(rn.res.Violations, checkLinearizable(ops, filepath.Join(rn.dir, "linearizability.html"))...)
	rn.res.Violations = append(rn.res.Violations, checkWatch(r.History.Received(linKeyPrefix), ops)...)
	if err := p.stop(2 * time.Minute); err != nil {
		rn.violate("stops", "%v", err)
	}
	if rn.host != nil {
		if err := rn.host.stop(2 * time.Minute); err != nil {
			rn.violate("stops", "%v", err)
		}
	}
	// Every component acts as its own ServiceAccount: RBAC refusing one
	// anything, through every kill and restart, is a right its rbac.yaml
	// lacks. The apiserver's audit log says.
	if refused, err := deploy.Refused(filepath.Join(rn.dir, "logs", "audit.log")); err != nil {
		rn.violate("rights", "reading the audit log: %v", err)
	} else if len(refused) > 0 {
		rn.violate("rights", "RBAC refused capstan's components: %s", strings.Join(refused, "; "))
	}
	return false, nil
}
