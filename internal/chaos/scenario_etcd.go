package chaos

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"syscall"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/etcd"
	"github.com/capstan-dev/capstan/internal/failpoint"
	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/nodes"
	"github.com/capstan-dev/capstan/internal/sim"
)

// etcdMasters is the control plane's size in the etcd scenarios.
const etcdMasters = 3

// leaderElection bounds how long the API may refuse writes in the etcd
// scenarios while capstan is up: etcd elects a leader within a second or
// two (its election timeout is 1s); the rest is room for a loaded
// machine. Longer means the API waited on a member that was gone.
const leaderElection = 30 * time.Second

// etcdScenario is the base of the etcd scenarios: a control plane of 3
// machines and a worker, the membership sampled from etcd and held to
// q (its desired size is the control plane's), replacements machines made
// beside the three.
func etcdScenario(name, doc string, progress func(context.Context, *Run) (bool, string, error), q quorumCheck, replacements int) *Scenario {
	if q.formed == nil {
		q.formed = formedWithoutBootstrap
	}
	q.desired = etcdMasters
	return &Scenario{
		Name: name,
		Doc:  doc,
		Args: []string{"--control-plane-nodes", "3", "--nodes", "1"},
		Span: 60 * time.Second,
		Points: []Point{{failpoint.CPMSMachineCreated, 1}, {failpoint.EtcdRemovalWritten, 1}, {failpoint.EtcdMemberRemoved, 1},
			{failpoint.EtcdAddWritten, 1}, {failpoint.EtcdLearnerAdded, 1}, {failpoint.EtcdLearnerPromoted, 1}},
		Timeout:       settleTime,
		SampleMembers: true,
		CheckMembers: func(r *Run) []Violation {
			q.writesFailed = r.writes.refusedBetween
			return checkQuorum(r.Members.all(), q)
		},
		MaxOutage: leaderElection,
		Progress:  progress,
		Check: func(ctx context.Context, r *Run) []Violation {
			var out []Violation
			if made := mastersOf(r.History); len(made) != etcdMasters+replacements {
				out = append(out, Violation{"nothing twice", fmt.Sprintf("%d control-plane machines ever made (%v), want %d and %d replacements",
					len(made), made, etcdMasters, replacements)})
			}
			return out
		},
	}
}

// fromUp checks the samples from the first taken while capstan is up:
// up means fault-tolerant, so nothing needs to form first.
func fromUp(memberSample) bool { return true }

// etcdDeadScenario replaces a dead master, the documented way, starting
// the moment capstan is first up: its machine is stopped, then deleted.
func etcdDeadScenario() *Scenario {
	return etcdScenario("etcd",
		"a dead master replaced from the moment capstan is first up: one of 3 control-plane machines stopped as soon as capstan says "+
			"it is up, then deleted; the ControlPlaneMachineSet makes one replacement, whose member joins once the dead one left: "+
			"one replacement machine ever made, never more than 3 voting members nor the bootstrap member, never fewer healthy than a quorum of the "+
			"3 desired while capstan is up (so up was fault-tolerant), the API never down longer than a leader election, the 3 masters' "+
			"members healthy at the end (read from etcd)",
		etcdDeadProgress, quorumCheck{formed: fromUp, maxVoting: etcdMasters}, 1)
}

// etcdTwoScenario deletes two healthy masters at once, while the etcd
// operator's Node reads fail for 2s of every 5s.
func etcdTwoScenario() *Scenario {
	s := etcdScenario("etcd-two",
		"two of 3 healthy control-plane machines deleted at once, the etcd operator's Node reads failing 2s of every 5s and its instance look-ups 2s of every 7s: each "+
			"replaced, one at a time, its replacement voting before the old member leaves (no member ever down: a failed read is no "+
			"missing node): two replacement machines ever made, never more than 4 voting members, never fewer than 3 healthy while "+
			"capstan is up, the API never down longer than a leader election, the 3 masters' members healthy at the end",
		etcdTwoProgress, quorumCheck{maxVoting: etcdMasters + 1, minHealthy: etcdMasters}, 2)
	// Another period for the look-ups: the windows of a fault are fixed
	// on the clock, and look-ups failing only while the Node reads do
	// would never be made (a failed Node read ends the tick first).
	s.Faults = failpoint.FormatFault(failpoint.EtcdNodeRead, 2*time.Second, 5*time.Second) + "," +
		failpoint.FormatFault(failpoint.EtcdInstanceRead, 2*time.Second, 7*time.Second)
	// Its operations took 12 to 15 s in the fresh-seed campaigns of
	// 2026-12-06/07.
	s.Span = 9 * time.Second
	return s
}

// etcdFailedScenario deletes a replacement that failed: a dead master is
// deleted while its zone has no capacity, its replacement goes Failed,
// the zone comes back and the failed replacement is deleted.
func etcdFailedScenario() *Scenario {
	return etcdScenario("etcd-failed",
		"a dead master deleted while its zone has no capacity: the replacement goes Failed (InsufficientInstanceCapacity), the dead "+
			"member leaves anyway; the zone restored and the failed replacement deleted, the ControlPlaneMachineSet makes one more for "+
			"that index: two replacement machines ever made, never more than 3 voting members, never fewer healthy than a quorum of the 3 "+
			"desired while capstan is up, the API never down longer than a leader election, the 3 masters' members healthy at the end",
		etcdFailedProgress, quorumCheck{maxVoting: etcdMasters}, 2)
}

// faultSpan is the span of the scenarios whose fault lasts a time
// (partitionFor, diskFullFor): the operation's time, so that a kill in
// it leaves the rest for the start after (holdFault). Their operations
// last the fault and more.
const faultSpan = 4 * time.Second

// partitionFor is how long the partition scenario cuts a member off:
// several election timeouts (1s).
const partitionFor = 5 * time.Second

// etcdPartitionScenario cuts the leader's member from the others.
func etcdPartitionScenario() *Scenario {
	s := etcdScenario("etcd-partition",
		fmt.Sprintf("the etcd leader's member cut from the others (peer traffic both ways, through the proxy of capstan up "+
			"--etcd-partitionable that the campaign's partition file controls) for %s, longer than an election, then healed: the "+
			"others elect a leader and the API keeps taking writes (kube-apiserver's connections leave the member cut off), then "+
			"every raft message between the members %s late for %s: no member removed and no machine made, never fewer healthy than "+
			"a quorum of the 3 desired, the cut member healthy again at the end", partitionFor, peerDelay, partitionFor),
		etcdPartitionProgress, quorumCheck{maxVoting: etcdMasters}, 0)
	s.Args = append(s.Args, "--etcd-partitionable")
	s.Points = nil
	// Its fault lasts a wall-clock time: a kill's restart outlasts the
	// rest of it, and the operation then ends within seconds of capstan's
	// time. The span is the shortest operation measured (a kill or not).
	s.Span = faultSpan
	return s
}

// etcdRelabelScenario takes a master's role label away, and gives it back.
func etcdRelabelScenario() *Scenario {
	s := etcdScenario("etcd-relabel",
		"a master Machine's role label taken away (it is no longer the ControlPlaneMachineSet's, which makes a replacement for its "+
			"index), then given back (the ControlPlaneMachineSet deletes the older of the index's two machines): the relabelled "+
			"machine's member is never stopped (a label is no machine gone), its replacement joins once it is deleted: one "+
			"replacement machine ever made, never more than 4 voting members, never fewer than 3 healthy while capstan is up, the "+
			"API never down longer than a leader election, the 3 masters' members healthy at the end",
		etcdRelabelProgress, quorumCheck{maxVoting: etcdMasters + 1, minHealthy: etcdMasters}, 1)
	// Its operations took 6 to 13 s in the fresh-seed campaigns of
	// 2026-12-06/07.
	s.Span = 4 * time.Second
	return s
}

// memberKills is how many member processes the etcd-member scenario
// SIGKILLs.
const memberKills = 3

// etcdMemberScenario SIGKILLs the leader's member process, again and
// again, under the campaign's stream of writes.
func etcdMemberScenario() *Scenario {
	s := etcdScenario("etcd-member",
		fmt.Sprintf("the etcd leader's member process SIGKILLed %d times under a stream of writes, each time once the members are "+
			"all healthy again: no acknowledged write lost, the API never down longer than a leader election, the member started "+
			"again by capstan, no machine replaced, never fewer healthy voting members than a quorum while capstan is up", memberKills),
		etcdMemberProgress, quorumCheck{maxVoting: etcdMasters}, 0)
	s.Points = nil
	// Its operations took 5 to 17 s in the fresh-seed campaign of
	// 2026-12-06.
	s.Span = 4 * time.Second
	return s
}

// formedWithoutBootstrap: the masters' members all vote and are healthy,
// and the bootstrap member left.
func formedWithoutBootstrap(s memberSample) bool {
	return len(s.Voting) == etcdMasters && s.Healthy == etcdMasters && s.Learners == 0 && !slices.Contains(s.Voting, etcd.BootstrapName)
}

// formed waits for the masters' members to form, and names the
// control-plane machines.
func formed(ctx context.Context, r *Run) ([]machinev1.Machine, string, error) {
	if s := r.Members.last(); !formedWithoutBootstrap(s) {
		return nil, fmt.Sprintf("waiting for the masters' members: voting %v, %d healthy, %d learners", s.Voting, s.Healthy, s.Learners), nil
	}
	masters, err := masterMachines(ctx, r)
	if err != nil {
		return nil, "", err
	}
	if len(masters) != etcdMasters {
		return nil, fmt.Sprintf("%d control-plane machines", len(masters)), nil
	}
	return masters, "", nil
}

// deleteMachines deletes the named machines (those gone already too).
func deleteMachines(ctx context.Context, r *Run, names ...string) error {
	for _, n := range names {
		if err := r.Machine.MachineV1beta1().Machines(machine.Namespace).Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// machineStep is where a scenario that replaces machines is.
type machineStep string

const (
	machineSetup machineStep = ""
	// The victims are being deleted (etcd-two, etcd-remote) or stopped
	// (etcd, etcd-failed: Zone is the victim's, made to have no
	// capacity first).
	machineDeleting machineStep = "deleting"
	machineDead     machineStep = "dead"
	// etcd-failed: the victim deleted, its replacement failing in Zone.
	machineFailing machineStep = "failing"
	// The control plane settles without Machines.
	machineReplacing machineStep = "replacing"
	// etcd-relabel: the victim's role label taken away, the
	// replacement for its index waited for, the label given back.
	machineRelabel    machineStep = "relabel"
	machineRelabelled machineStep = "relabelled"
	machineRestored   machineStep = "restored"
)

// machinePhase is the phase of a scenario that replaces machines, kept as
// JSON in the phase ConfigMap (a kill of capstan loses none of it): its
// step, the machines it acts on, and a zone.
type machinePhase struct {
	Step     machineStep `json:"step"`
	Machines []string    `json:"machines,omitempty"`
	Zone     string      `json:"zone,omitempty"`
}

func (p machinePhase) step() string { return string(p.Step) }

// replaceProgress drives a replacement in three steps kept in the
// cluster: the victims picked once the members formed (step), act done
// to each of them (it may be done twice), then replacing until the
// control plane settled without them.
func replaceProgress(step machineStep, pick func([]machinev1.Machine) []string, act func(context.Context, *Run, string) error) func(context.Context, *Run) (bool, string, error) {
	return func(ctx context.Context, r *Run) (bool, string, error) {
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
			victims := pick(masters)
			return false, fmt.Sprintf("%s %v", step, victims), writeTypedPhase(ctx, r, machinePhase{Step: step, Machines: victims})
		case step:
			for _, v := range p.Machines {
				if err := act(ctx, r, v); err != nil {
					return false, "", err
				}
			}
			return false, fmt.Sprintf("replacing %v", p.Machines), writeTypedPhase(ctx, r, machinePhase{Step: machineReplacing, Machines: p.Machines})
		case machineReplacing:
			return replacedWithout(ctx, r, p.Machines...)
		}
		return false, "", fmt.Errorf("unknown step %q", p.Step)
	}
}

// etcdDeadProgress stops the first master's machine the moment capstan
// is up (up means fault-tolerant: nothing is waited for), then deletes
// it: the steps dead and replacing.
func etcdDeadProgress(ctx context.Context, r *Run) (bool, string, error) {
	p, err := readTypedPhase[machinePhase](ctx, r)
	if err != nil {
		return false, "", err
	}
	switch p.Step {
	case machineSetup:
		masters, err := masterMachines(ctx, r)
		if err != nil {
			return false, "", err
		}
		if len(masters) != etcdMasters {
			return false, fmt.Sprintf("%d control-plane machines", len(masters)), nil
		}
		return false, "stopping " + masters[0].Name, writeTypedPhase(ctx, r, machinePhase{Step: machineDead, Machines: []string{masters[0].Name}})
	case machineDead:
		victim := p.Machines[0]
		if err := stopMachine(ctx, r, victim); err != nil {
			return false, "", err
		}
		if err := deleteMachines(ctx, r, victim); err != nil {
			return false, "", err
		}
		return false, "replacing " + victim, writeTypedPhase(ctx, r, machinePhase{Step: machineReplacing, Machines: p.Machines})
	case machineReplacing:
		return replacedWithout(ctx, r, p.Machines...)
	}
	return false, "", fmt.Errorf("unknown step %q", p.Step)
}

// etcdTwoProgress deletes the first and the last master at once.
var etcdTwoProgress = replaceProgress(machineDeleting,
	func(m []machinev1.Machine) []string { return []string{m[0].Name, m[2].Name} },
	func(ctx context.Context, r *Run, victim string) error { return deleteMachines(ctx, r, victim) })

// stopMachine stops the kubelet of a machine's node: the machine is
// dead, its member stopped with it.
func stopMachine(ctx context.Context, r *Run, name string) error {
	m, err := r.Machine.MachineV1beta1().Machines(machine.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && m.Status.NodeRef == nil) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := sim.StopNode(ctx, r.Kube, m.Status.NodeRef.Name); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// etcdFailedProgress goes through the steps dead (the victim, its
// zone), failing (the same) and replacing (the victim and its failed
// replacement).
func etcdFailedProgress(ctx context.Context, r *Run) (bool, string, error) {
	p, err := readTypedPhase[machinePhase](ctx, r)
	if err != nil {
		return false, "", err
	}
	mc := r.Machine.MachineV1beta1().Machines(machine.Namespace)
	switch p.Step {
	case machineSetup:
		masters, why, err := formed(ctx, r)
		if masters == nil {
			return false, why, err
		}
		ps, err := machine.ParseProviderSpec(masters[0].Spec.ProviderSpec)
		if err != nil {
			return false, "", err
		}
		return false, "stopping " + masters[0].Name, writeTypedPhase(ctx, r, machinePhase{Step: machineDead, Machines: []string{masters[0].Name}, Zone: ps.Zone})
	case machineDead:
		victim := p.Machines[0]
		// The zone first: the replacement is made as soon as the
		// machine is deleted.
		if err := sim.ExhaustZone(ctx, r.Kube, p.Zone); err != nil {
			return false, "", err
		}
		if err := stopMachine(ctx, r, victim); err != nil {
			return false, "", err
		}
		if err := deleteMachines(ctx, r, victim); err != nil {
			return false, "", err
		}
		p.Step = machineFailing
		return false, "waiting for the replacement of " + victim + " to fail", writeTypedPhase(ctx, r, p)
	case machineFailing:
		victim := p.Machines[0]
		masters, err := masterMachines(ctx, r)
		if err != nil {
			return false, "", err
		}
		for _, m := range masters {
			if m.Name == victim || machine.MachineIndex(m.Name) != machine.MachineIndex(victim) {
				continue
			}
			if ptr.Deref(m.Status.Phase, "") != machinev1.PhaseFailed {
				return false, fmt.Sprintf("the replacement %s of %s is %s, not Failed yet", m.Name, victim, ptr.Deref(m.Status.Phase, "new")), nil
			}
			if err := sim.RestoreZone(ctx, r.Kube, p.Zone); err != nil {
				return false, "", err
			}
			return false, "deleting the failed replacement " + m.Name, writeTypedPhase(ctx, r, machinePhase{Step: machineReplacing, Machines: []string{victim, m.Name}})
		}
		return false, "no replacement of " + victim + " yet", nil
	case machineReplacing:
		gone := p.Machines
		if m, err := mc.Get(ctx, gone[1], metav1.GetOptions{}); err == nil && m.DeletionTimestamp.IsZero() {
			if err := deleteMachines(ctx, r, gone[1]); err != nil {
				return false, "", err
			}
		}
		return replacedWithout(ctx, r, gone...)
	}
	return false, "", fmt.Errorf("unknown step %q", p.Step)
}

// etcdMemberProgress goes through the steps kill (Kill i) and killed
// (Kill i, the member, its PID, when), then done.
func etcdMemberProgress(ctx context.Context, r *Run) (bool, string, error) {
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
		return false, "members formed", writeTypedPhase(ctx, r, faultPhase{Step: faultKill, Kill: 1})
	case faultKill:
		if !formedWithoutBootstrap(s) || s.Leader == "" {
			return false, fmt.Sprintf("kill %d waits for the members: voting %v, %d healthy, leader %q", p.Kill, s.Voting, s.Healthy, s.Leader), nil
		}
		pid, why, err := leaderProcess(r, s)
		if pid == 0 {
			return false, fmt.Sprintf("kill %d: %s", p.Kill, why), err
		}
		at := time.Now()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return false, "", fmt.Errorf("killing member %s (pid %d): %w", s.Leader, pid, err)
		}
		return false, fmt.Sprintf("killed the leader %s (pid %d)", s.Leader, pid),
			writeTypedPhase(ctx, r, faultPhase{Step: faultKilled, Kill: p.Kill, Leader: s.Leader, PID: pid, At: at})
	case faultKilled:
		pids, err := etcd.MemberProcesses(r.DataDir)
		if err != nil {
			return false, "", err
		}
		if now := pids[p.Leader]; now == 0 || now == p.PID {
			return false, fmt.Sprintf("member %s not started again (killed pid %d)", p.Leader, p.PID), nil
		}
		if !s.At.After(p.At) || !formedWithoutBootstrap(s) {
			return false, fmt.Sprintf("after kill %d: voting %v, %d healthy", p.Kill, s.Voting, s.Healthy), nil
		}
		if p.Kill >= memberKills {
			return false, "every kill done", writeTypedPhase(ctx, r, faultPhase{Step: faultDone})
		}
		return false, fmt.Sprintf("member %s back", p.Leader), writeTypedPhase(ctx, r, faultPhase{Step: faultKill, Kill: p.Kill + 1})
	case faultDone:
		if masters, why, err := formed(ctx, r); masters == nil {
			return false, why, err
		}
		return true, "", nil
	}
	return false, "", fmt.Errorf("unknown step %q", p.Step)
}

// replacedWithout reports whether the control plane settled without the
// named machines: they are gone, 3 control-plane machines run with Ready
// nodes, and their members, and only theirs, vote and are healthy.
func replacedWithout(ctx context.Context, r *Run, gone ...string) (bool, string, error) {
	mc := r.Machine.MachineV1beta1().Machines(machine.Namespace)
	for _, g := range gone {
		if _, err := mc.Get(ctx, g, metav1.GetOptions{}); err == nil {
			return false, "machine " + g + " is still there", nil
		} else if !apierrors.IsNotFound(err) {
			return false, "", err
		}
	}
	masters, err := masterMachines(ctx, r)
	if err != nil {
		return false, "", err
	}
	var names []string
	for _, m := range masters {
		if m.Status.NodeRef == nil {
			return false, "machine " + m.Name + " has no node yet", nil
		}
		n, err := r.Kube.CoreV1().Nodes().Get(ctx, m.Status.NodeRef.Name, metav1.GetOptions{})
		if err != nil || !nodes.Ready(n) {
			return false, "the node of machine " + m.Name + " is not Ready", err
		}
		names = append(names, m.Name)
	}
	s := r.Members.last()
	if len(masters) != etcdMasters || !formedWithoutBootstrap(s) || !slices.Equal(s.Voting, names) {
		return false, fmt.Sprintf("machines %v, voting members %v (%d healthy, %d learners)", names, s.Voting, s.Healthy, s.Learners), nil
	}
	return true, "", nil
}

// masterMachines are the control-plane machines not being deleted, by
// name.
func masterMachines(ctx context.Context, r *Run) ([]machinev1.Machine, error) {
	list, err := r.Machine.MachineV1beta1().Machines(machine.Namespace).List(ctx, metav1.ListOptions{LabelSelector: machine.MachineRoleLabel + "=master"})
	if err != nil {
		return nil, err
	}
	var out []machinev1.Machine
	for _, m := range list.Items {
		if m.DeletionTimestamp.IsZero() {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// mastersOf are the names of every control-plane machine ever made.
func mastersOf(h *History) []string {
	var out []string
	for _, e := range h.Events(machinesKey) {
		m, ok := e.Obj.(*machinev1.Machine)
		if ok && e.Prev == nil && m.Labels[machine.MachineRoleLabel] == "master" && !slices.Contains(out, m.Name) {
			out = append(out, m.Name)
		}
	}
	return out
}

// leaderProcess finds the process of the leader a sample names, from the
// operating system's process table (0 and why when there is none).
func leaderProcess(r *Run, s memberSample) (int, string, error) {
	pids, err := etcd.MemberProcesses(r.DataDir)
	if err != nil {
		return 0, "", err
	}
	if pid := pids[s.Leader]; pid != 0 {
		return pid, "", nil
	}
	return 0, fmt.Sprintf("no process of the leader %s (processes %v)", s.Leader, pids), nil
}
