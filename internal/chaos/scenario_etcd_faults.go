package chaos

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/etcd"
	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/waitfor"
)

// etcdPartitionProgress goes through the steps cut (the leader cut off,
// when), healed, slow (every raft message late) and fast. The partition
// is the run's data dir's partition file, which the members' peer proxies
// read: the campaign controls it, with capstan up killed or not. A kill
// leaves it in place until capstan's processes are gone; the start after
// it goes without it, and it comes back once capstan is up.
func etcdPartitionProgress(ctx context.Context, r *Run) (bool, string, error) {
	if !r.alive() {
		return liftWhileStarting(r)
	}
	p, err := readTypedPhase[faultPhase](ctx, r)
	if err != nil {
		return false, "", err
	}
	s := r.Members.last()
	switch p.Step {
	case faultNone:
		// No partition yet: one written just before a kill that came
		// ahead of its phase is taken back first (it would keep the
		// members from forming, and capstan from saying it is up).
		if err := etcd.WritePartition(r.DataDir); err != nil {
			return false, "", err
		}
		if masters, why, err := formed(ctx, r); masters == nil {
			return false, why, err
		}
		if s.Leader == "" {
			return false, "waiting for a leader to cut off", nil
		}
		if !r.alive() {
			// Not in a start: its wait for a fault-tolerant etcd would
			// last as long as the partition.
			return false, "waiting for capstan to be up", nil
		}
		// The phase first, the cut on the next tick: written after the
		// cut, the phase could wait on an API pinned to the member cut
		// off, and the next tick would cut again.
		return false, "cutting off the leader " + s.Leader, writeTypedPhase(ctx, r, faultPhase{Step: faultCut, Leader: s.Leader, At: time.Now(), OpAt: r.opTime()})
	case faultCut:
		// Put back once capstan is up after a kill (liftWhileStarting).
		if err := etcd.WritePartition(r.DataDir, p.Leader); err != nil {
			return false, "", err
		}
		if ok, why := othersLead(s, p.Leader, p.left(r, partitionFor), "cut off"); !ok {
			return false, why, nil
		}
		if err := etcd.WritePartition(r.DataDir); err != nil {
			return false, "", err
		}
		return false, "healed the partition of " + p.Leader, writeTypedPhase(ctx, r, faultPhase{Step: faultHealed, Leader: p.Leader, At: time.Now()})
	case faultHealed:
		if err := etcd.WritePartition(r.DataDir); err != nil {
			return false, "", err
		}
		if ok, why, err := settledSince(ctx, r, s, p.Leader+" back", p.At); !ok || err != nil {
			return false, why, err
		}
		// Then a slow network between all the members, for as long.
		return false, "slowing the members' network", writeTypedPhase(ctx, r, faultPhase{Step: faultSlow, At: time.Now(), OpAt: r.opTime()})
	case faultSlow:
		if left := p.left(r, partitionFor); left > 0 {
			// On each tick while capstan is up; a start finds the
			// file cleared, and the rest comes once it is up.
			delayed := s.Voting
			if !r.alive() || len(s.Voting) != etcdMasters {
				delayed = nil
			}
			if err := etcd.WritePeerDelay(r.DataDir, peerDelay, delayed...); err != nil {
				return false, "", err
			}
			return false, fmt.Sprintf("every raft message %s late, %.1fs left", peerDelay, left.Seconds()), nil
		}
		if err := etcd.WritePartition(r.DataDir); err != nil {
			return false, "", err
		}
		return false, "the members' network is fast again", writeTypedPhase(ctx, r, faultPhase{Step: faultFast, At: time.Now()})
	case faultFast:
		return settledSince(ctx, r, s, "the network fast again", p.At)
	}
	return false, "", fmt.Errorf("unknown step %q", p.Step)
}

// liftWhileStarting lifts the partition file's cuts and delays while
// capstan is down or starting after a kill: a fault lasts operation time,
// which stands still meanwhile, and the phase, in the API, cannot be read
// then. The partition and the bridge come back once capstan is up, for
// what is left of them. (A start inside a partition of the leader failed
// at first: kube-apiserver's watch cache of Machines, and its service IP
// repair hook, pinned to the member cut off; the start now takes such a
// member out of the proxy, TestAStartDoesNotWaitForACutOffMember.)
func liftWhileStarting(r *Run) (bool, string, error) {
	return false, "capstan is starting: the members' network is whole meanwhile", etcd.WritePartition(r.DataDir)
}

// peerDelay is how late the etcd-partition scenario's slow network
// delivers every raft message, each way: well inside the election
// timeout (1 s), so the members must stay healthy.
const peerDelay = 150 * time.Millisecond

// etcdPauseScenario stops the etcd leader's member process (SIGSTOP) for
// longer than an election, then continues it.
func etcdPauseScenario() *Scenario {
	s := etcdScenario("etcd-pause",
		fmt.Sprintf("the etcd leader's member process stopped (SIGSTOP) for %s, several election timeouts, then continued (SIGCONT): "+
			"the others elect a leader and the API keeps taking writes, the stopped member is neither removed nor replaced and "+
			"follows the new leader once continued, never fewer healthy than a quorum of the 3 desired", partitionFor),
		etcdPauseProgress, quorumCheck{maxVoting: etcdMasters}, 0)
	s.Points = nil
	s.Span = faultSpan
	return s
}

// etcdPauseProgress goes through the steps paused (the member, its PID,
// when) and continued (the member, when).
func etcdPauseProgress(ctx context.Context, r *Run) (bool, string, error) {
	p, err := readTypedPhase[faultPhase](ctx, r)
	if err != nil {
		return false, "", err
	}
	s := r.Members.last()
	switch p.Step {
	case faultNone:
		if masters, why, err := formed(ctx, r); masters == nil {
			return false, why, err
		}
		if s.Leader == "" || !r.alive() {
			return false, "waiting for a leader to stop, capstan up", nil
		}
		pid, why, err := leaderProcess(r, s)
		if pid == 0 {
			return false, why, err
		}
		// The phase first, then the stop: once the leader stops, the API
		// may need an election and more to write anything, and a stop
		// the phase did not record would never be continued (the next
		// tick, at the first step, would wait for all three members
		// forever).
		return false, "stopped the leader " + s.Leader, pauseLeader(ctx, r, faultPhase{Step: faultPaused, Leader: s.Leader, PID: pid, At: time.Now(), OpAt: r.opTime()})
	case faultPaused:
		left := p.left(r, partitionFor)
		// A kill took the stopped member with capstan, and the rest of
		// the pause's time passes with the members whole: stopped again
		// as capstan starts, the member would hold kube-apiserver's
		// requests pinned to it (until its connection's keepalive gives
		// up, 40s) and the start's API with them. Its name may lead
		// again, as another process.
		pids, err := etcd.MemberProcesses(r.DataDir)
		if err != nil {
			return false, "", err
		}
		stopped := pids[p.Leader] == p.PID
		switch {
		case left > 0 && stopped:
			// Stopped again on each tick of the pause: a stop that did
			// not follow its phase (the driver's call ended between the
			// two) is made now.
			if err := syscall.Kill(p.PID, syscall.SIGSTOP); err != nil && !errors.Is(err, syscall.ESRCH) {
				return false, "", fmt.Errorf("stopping member %s (pid %d): %w", p.Leader, p.PID, err)
			}
		case left > 0:
			return false, fmt.Sprintf("%s's stopped process went with a kill, %.1fs of the pause left", p.Leader, left.Seconds()), nil
		}
		if !stopped {
			return false, p.Leader + "'s pause ended with a kill", writeTypedPhase(ctx, r, faultPhase{Step: faultContinued, Leader: p.Leader, At: time.Now()})
		}
		if ok, why := othersLead(s, p.Leader, left, "stopped"); !ok {
			return false, why, nil
		}
		// A member started again since (capstan was killed) is another
		// process: the signal goes nowhere.
		if err := syscall.Kill(p.PID, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
			return false, "", fmt.Errorf("continuing member %s (pid %d): %w", p.Leader, p.PID, err)
		}
		return false, "continued " + p.Leader, writeTypedPhase(ctx, r, faultPhase{Step: faultContinued, Leader: p.Leader, At: time.Now()})
	case faultContinued:
		return settledSince(ctx, r, s, p.Leader+" continued", p.At)
	}
	return false, "", fmt.Errorf("unknown step %q", p.Step)
}

// pauseLeader writes phase p, then stops the member process it names
// (SIGSTOP), and has it continued once its pause is over.
func pauseLeader(ctx context.Context, r *Run, p faultPhase) error {
	// The phase first, then the stop: once the leader stops, the API
	// may need an election and more to write anything, and a stop the
	// phase did not record would never be continued (the next tick, at
	// the first step, would wait for all three members forever).
	if err := writeTypedPhase(ctx, r, p); err != nil {
		return err
	}
	if err := syscall.Kill(p.PID, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("stopping member %s (pid %d): %w", p.Leader, p.PID, err)
	}
	go continueWhenOthersLead(r, p.Leader, p.PID, func() time.Duration { return p.left(r, partitionFor) })
	return nil
}

// continueWhenOthersLead continues the member name's process pid once
// its pause is over (left) and the others lead without it (as the pause
// phase does), from the campaign's own clock and its samples of etcd: not from
// the phase in the API, whose requests may be pinned to the stopped
// member (kube-apiserver's etcd client spreads them over the members, and
// one sent to a stopped process hangs until its connection's keepalive
// gives up, 40s). The pause phase continues it too, once it reads its
// phase: whichever comes first, the other's signal finds it running. It
// gives up after settleTime, or once the process is gone (capstan was
// killed, and its members with it).
func continueWhenOthersLead(r *Run, name string, pid int, left func() time.Duration) {
	_ = waitfor.Poll(context.Background(), 100*time.Millisecond, settleTime, func(context.Context) (bool, string, error) {
		if ok, why := othersLead(r.Members.last(), name, left(), "stopped"); !ok {
			// A process gone ends the wait: nothing is left to continue.
			return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH), why, nil
		}
		return true, "", syscall.Kill(pid, syscall.SIGCONT)
	})
}

// etcdAPIServerCutScenario cuts kube-apiserver from etcd, through the
// proxy it is given, for longer than an election.
func etcdAPIServerCutScenario() *Scenario {
	s := etcdScenario("etcd-apiserver-cut",
		fmt.Sprintf("kube-apiserver cut from etcd for %s (every connection through the proxy it is given refused and closed, "+
			"capstan up --etcd-partitionable), then slow for %s (each chunk held %s each way), then healed: the API refuses writes "+
			"while cut and takes them again within %s of the heal, no acknowledged write lost, no member removed and no machine made, "+
			"never fewer healthy than a quorum of the 3 desired, the members healthy at the end", partitionFor, partitionFor, apiserverDelay, leaderElection),
		etcdAPIServerCutProgress, quorumCheck{maxVoting: etcdMasters}, 0)
	s.Args = append(s.Args, "--etcd-partitionable")
	s.Points = nil
	s.Span = faultSpan
	s.MaxOutage = partitionFor + leaderElection
	return s
}

// apiserverDelay is how long the etcd-apiserver-cut scenario's slow link
// holds each chunk between kube-apiserver and etcd, each way.
const apiserverDelay = 300 * time.Millisecond

// etcdAPIServerCutProgress cuts the apiserver from etcd in one step
// (its own API reads would fail while the cut lasts, so it does not
// wait on them), then goes through the steps slow (the link back, each
// chunk held apiserverDelay, for partitionFor) and healed.
func etcdAPIServerCutProgress(ctx context.Context, r *Run) (bool, string, error) {
	p, err := readTypedPhase[faultPhase](ctx, r)
	if err != nil {
		return false, "", err
	}
	switch p.Step {
	case faultNone:
		if masters, why, err := formed(ctx, r); masters == nil {
			return false, why, err
		}
		if !r.alive() {
			return false, "waiting for capstan to be up", nil
		}
		r.op.enter(string(faultCut))
		// For partitionFor of the operation's time, lifted while capstan
		// starts after a kill (kube-apiserver starts only with etcd).
		cut := func() error { return etcd.WriteClientFault(r.DataDir, etcd.ClientFault{Cut: true}) }
		heal := func() error { return etcd.WriteClientFault(r.DataDir, etcd.ClientFault{}) }
		if err := holdFault(ctx, r, partitionFor, cut, heal); err != nil {
			return false, "", err
		}
		// The API takes a moment to serve again: the phase is written
		// once it does (written "" again, it would cut once more). Then
		// the link stays up but slow.
		if err := etcd.WriteClientFault(r.DataDir, etcd.ClientFault{Delay: apiserverDelay}); err != nil {
			return false, "", err
		}
		return false, "healed the cut; the link is slow", writeFaultPhaseOnceServed(ctx, r, faultPhase{Step: faultSlow, At: time.Now(), OpAt: r.opTime()})
	case faultSlow:
		// A kill ends the delay with capstan's proxy; a start brings it
		// back, from the file, for what is left of it.
		if left := p.left(r, partitionFor); left > 0 {
			return false, fmt.Sprintf("the apiserver's link to etcd delays each chunk %s, %.1fs left", apiserverDelay, left.Seconds()), nil
		}
		if err := etcd.WriteClientFault(r.DataDir, etcd.ClientFault{}); err != nil {
			return false, "", err
		}
		return false, "the link is fast again", writeTypedPhase(ctx, r, faultPhase{Step: faultHealed, At: time.Now()})
	case faultHealed:
		if err := etcd.WriteClientFault(r.DataDir, etcd.ClientFault{}); err != nil {
			return false, "", err
		}
		return replacedWithout(ctx, r)
	}
	return false, "", fmt.Errorf("unknown step %q", p.Step)
}

// othersLead reports whether member name, out (what) with left of its
// fault's operation time to go, has been out for all of it and the
// others have a leader of their own, as sample s, taken in the last
// second, shows; or what is waited for.
func othersLead(s memberSample, name string, left time.Duration, what string) (bool, string) {
	if left > 0 {
		return false, fmt.Sprintf("%s %s, %.1fs left", name, what, left.Seconds())
	}
	if time.Since(s.At) > time.Second || s.Leader == "" || s.Leader == name || s.Healthy < quorum(etcdMasters) {
		return false, fmt.Sprintf("%s %s: waiting for the others to have a leader of their own (voting %v, %d healthy, leader %q)",
			name, what, s.Voting, s.Healthy, s.Leader)
	}
	return true, ""
}

// settledSince reports whether, after a fault ended at at, the masters'
// members formed again in a sample taken since (s) and the control plane
// settled with no machine replaced; what says what ended.
func settledSince(ctx context.Context, r *Run, s memberSample, what string, at time.Time) (bool, string, error) {
	if !s.At.After(at) || !formedWithoutBootstrap(s) {
		return false, fmt.Sprintf("%s: voting %v, %d healthy", what, s.Voting, s.Healthy), nil
	}
	return replacedWithout(ctx, r)
}

// etcdRelabelProgress goes through the steps relabel (the victim),
// relabelled (until the ControlPlaneMachineSet's replacement for its
// index runs and has a learner) and restored (until the control plane
// settled without it).
func etcdRelabelProgress(ctx context.Context, r *Run) (bool, string, error) {
	p, err := readTypedPhase[machinePhase](ctx, r)
	if err != nil {
		return false, "", err
	}
	switch p.Step {
	case machineSetup:
		masters, why, err := formed(ctx, r)
		if masters == nil {
			return false, why, err
		}
		return false, "relabelling " + masters[1].Name, writeTypedPhase(ctx, r, machinePhase{Step: machineRelabel, Machines: []string{masters[1].Name}})
	case machineRelabel:
		victim := p.Machines[0]
		if err := setRole(ctx, r, victim, "relabelled"); err != nil {
			return false, "", err
		}
		return false, victim + " relabelled", writeTypedPhase(ctx, r, machinePhase{Step: machineRelabelled, Machines: p.Machines})
	case machineRelabelled:
		victim := p.Machines[0]
		masters, err := masterMachines(ctx, r)
		if err != nil {
			return false, "", err
		}
		replacement := ""
		for _, m := range masters {
			if m.Name != victim && machine.MachineIndex(m.Name) == machine.MachineIndex(victim) && ptr.Deref(m.Status.Phase, "") == machinev1.PhaseRunning {
				replacement = m.Name
			}
		}
		if s := r.Members.last(); replacement == "" || s.Learners == 0 {
			return false, fmt.Sprintf("%s relabelled: waiting for the replacement of its index to run with a learner (replacement %q, %d learners)",
				victim, replacement, s.Learners), nil
		}
		if err := setRole(ctx, r, victim, "master"); err != nil {
			return false, "", err
		}
		return false, victim + " a master again", writeTypedPhase(ctx, r, machinePhase{Step: machineRestored, Machines: p.Machines})
	case machineRestored:
		victim := p.Machines[0]
		if err := setRole(ctx, r, victim, "master"); err != nil {
			return false, "", err
		}
		return replacedWithout(ctx, r, victim)
	}
	return false, "", fmt.Errorf("unknown step %q", p.Step)
}

// setRole sets a machine's role label (a machine gone already is left).
func setRole(ctx context.Context, r *Run, name, role string) error {
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, machine.MachineRoleLabel, role)
	_, err := r.Machine.MachineV1beta1().Machines(machine.Namespace).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return ignoreNotFound(err)
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
