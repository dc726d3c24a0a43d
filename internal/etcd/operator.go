package etcd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	configv1 "github.com/openshift/api/config/v1"
	machinev1 "github.com/openshift/api/machine/v1beta1"
	configclient "github.com/openshift/client-go/config/clientset/versioned"
	machineclient "github.com/openshift/client-go/machine/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capstan-dev/capstan/internal/cvo"
	"github.com/capstan-dev/capstan/internal/failpoint"
	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/machine/hooks"
	"github.com/capstan-dev/capstan/internal/planted"
	"github.com/capstan-dev/capstan/internal/sim"
)

// The etcd operator's quorum guard, as OpenShift declares it.
const (
	QuorumGuardHook  = "EtcdQuorumOperator"
	QuorumGuardOwner = "clusteroperator/etcd"
	// EventNamespace holds the operator's events, as OpenShift's.
	EventNamespace = "openshift-etcd-operator"
	// ClusterOperatorName is the etcd operator's ClusterOperator.
	ClusterOperatorName = "etcd"
)

// Operator is the etcd operator's part of capstan: one member per
// control-plane machine (the membership rules of Decide), the quorum guard
// hook on those machines, and the etcd ClusterOperator. Replacing a
// deleted control-plane machine is the ControlPlaneMachineSet's part.
type Operator struct {
	// Cluster is the etcd whose member processes capstan runs (capstan
	// up): a member starts and stops with its machine. Or, standalone,
	// Remote is an etcd whose members run on their hosts: capstan
	// changes the membership through etcd's API and leaves the processes
	// to the hosts. One of the two is set.
	Cluster   *Cluster
	Remote    *Remote
	Kube      kubernetes.Interface
	Machines  machineclient.Interface
	Config    configclient.Interface
	Namespace string
	// Interval is how often the membership is looked at.
	Interval time.Duration
	// InstallReplicas is the control plane's size when there is no
	// ControlPlaneMachineSet (a single control-plane machine).
	InstallReplicas int
	// LearnerTimeout is how long a learner may take to join before it is
	// removed (default 5 minutes).
	LearnerTimeout time.Duration

	// RebootDowntime is how long a control-plane machine's reboot keeps
	// its member down (default 5 seconds, the machine config daemon's
	// reboot).
	RebootDowntime time.Duration
	// Instances tells whether a machine's instance still runs: the
	// member of a machine being deleted stops once its instance is gone.
	// Without it (a remote etcd), the machine's Node being NotFound
	// tells.
	Instances InstanceLookup
	// PowerOn starts the node of a control-plane machine that was
	// powered on while the API was down (`capstan sim node start`), once
	// the API is back: the simulated cloud's, with its identity, so that
	// the operator's own patches no node. Nil: no such requests (a
	// remote etcd).
	PowerOn func(ctx context.Context, node string) error
	// KeepQuorumGuard keeps the etcd quorum guard's pods and budget in
	// openshift-etcd (capstan up, whose simulated kubelets probe the
	// members' readiness; a remote etcd's hosts have their own guard).
	KeepQuorumGuard bool

	// DefragInterval is how often the members are looked at for
	// defragmentation (default DefaultDefragInterval); DefragSettle how
	// long the cluster is given after each member's (default
	// DefaultDefragSettle).
	DefragInterval time.Duration
	DefragSettle   time.Duration

	firstSeen map[uint64]time.Time
	progress  map[uint64]learnerProgress
	lastHold  string
	relabeled map[string]bool
	// guardReplicas and guardChecked are the quorum guard's size and
	// when it was last made sure of.
	guardReplicas int
	guardChecked  time.Time

	rebootMu sync.Mutex
	// rebooted are the boots (sim.Boot) of the rebooting machines whose
	// members were stopped for them.
	rebooted map[string]int
}

// InstanceLookup tells whether a machine's instance exists.
type InstanceLookup interface {
	InstanceExists(ctx context.Context, machine string) (bool, error)
}

// learnerProgress is how far a learner was, and when it last moved on or
// was caught up.
type learnerProgress struct {
	applied uint64
	at      time.Time
}

// membership is the etcd the operator changes.
func (o *Operator) membership() Membership {
	if o.Cluster != nil {
		return o.Cluster
	}
	return o.Remote
}

func (o *Operator) namespace() string {
	if o.Namespace == "" {
		return machine.Namespace
	}
	return o.Namespace
}

// QuorumGuard is the preDrain hook that holds a control-plane machine's
// drain and termination until its member has left the cluster, which the
// operator does only once a replacement member votes.
func (o *Operator) QuorumGuard() *hooks.Hook {
	return &hooks.Hook{Name: QuorumGuardHook, Owner: QuorumGuardOwner, Point: hooks.PreDrain,
		Selector: labels.SelectorFromSet(labels.Set{machine.MachineRoleLabel: "master"}),
		Handle: func(ctx context.Context, _ client.Client, m *machinev1.Machine) (hooks.Result, error) {
			members, err := o.membership().List(ctx)
			if err != nil {
				return hooks.Result{RequeueAfter: time.Second}, nil
			}
			for _, mem := range members {
				if mem.Name == m.Name || (m.Status.NodeRef != nil && mem.Name == m.Status.NodeRef.Name) {
					return hooks.Result{RequeueAfter: time.Second}, nil
				}
			}
			return hooks.Result{Done: true}, nil
		}}
}

// Run reconciles until ctx ends.
func (o *Operator) Run(ctx context.Context) error {
	if (o.Cluster == nil) == (o.Remote == nil) {
		return errors.New("etcd operator: either the members capstan runs or a remote etcd, not both or neither")
	}
	interval := o.Interval
	if interval <= 0 {
		interval = time.Second
	}
	if o.Cluster != nil {
		go o.servePowerOn(ctx)
	}
	go o.defragmentEvery(ctx)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := o.reconcile(ctx); err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).V(2).Info("Reconciling etcd members", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// servePowerOn starts the members whose machines were powered on. The
// requests are served apart: they matter most when the API is down, and
// the reconcile waits on the API.
func (o *Operator) servePowerOn(ctx context.Context) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, name := range o.Cluster.pendingPowerOn() {
			if err := o.Cluster.StartMember(name); err != nil {
				klog.FromContext(ctx).Info("Starting a member on request", "member", name, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

type controlPlaneMachine struct {
	m        *machinev1.Machine
	node     *corev1.Node
	deleting bool
}

// rebootMember takes a rebooting machine's member down for the reboot,
// once per boot, and starts it again after RebootDowntime without the
// API, as the machine comes back by itself: the reboot of the only
// control-plane machine (or of one of two) takes the API down with it,
// and the API is what ends the reboot for its node (sim.FinishReboot).
func (o *Operator) rebootMember(ctx context.Context, name string, boot int) {
	o.rebootMu.Lock()
	defer o.rebootMu.Unlock()
	if b, ok := o.rebooted[name]; ok && b == boot {
		return
	}
	if o.rebooted == nil {
		o.rebooted = map[string]int{}
	}
	o.rebooted[name] = boot
	o.Cluster.StopMember(name)
	downtime := o.RebootDowntime
	if downtime <= 0 {
		downtime = 5 * time.Second
	}
	time.AfterFunc(downtime, func() {
		o.rebootMu.Lock()
		b, ok := o.rebooted[name]
		o.rebootMu.Unlock()
		if !ok || b != boot || ctx.Err() != nil {
			return // the machine was stopped, deleted or booted since
		}
		if err := o.Cluster.StartMember(name); err != nil {
			klog.FromContext(ctx).Info("Starting a member after its machine's reboot", "member", name, "err", err)
		}
	})
}

// instanceDown reports whether a machine's instance is not running: it is
// stopped, or, the machine being deleted, the instance was terminated.
// Its member's process is down with it (a reboot: see rebootMember).
// Only the cloud's or the API's NotFound says an instance is gone.
func (o *Operator) instanceDown(ctx context.Context, cm controlPlaneMachine) (bool, error) {
	switch {
	case cm.node != nil && sim.Stopped(cm.node):
		return true, nil
	case !cm.deleting:
		return false, nil
	case o.Instances != nil:
		if err := failpoint.Fail(failpoint.EtcdInstanceRead); err != nil {
			if planted.On(planted.ReadErrorIsGone) {
				return true, nil
			}
			return false, err
		}
		exists, err := o.Instances.InstanceExists(ctx, cm.m.Name)
		if err != nil && planted.On(planted.ReadErrorIsGone) {
			return true, nil
		}
		return !exists, err
	}
	return cm.node == nil && cm.m.Status.NodeRef != nil, nil
}

// controlPlaneMachines lists the control-plane machines with their nodes.
// A node is absent only when the API says it is NotFound: any other
// failure ends the look, as nothing may be decided on a guess.
func (o *Operator) controlPlaneMachines(ctx context.Context) ([]controlPlaneMachine, error) {
	list, err := o.Machines.MachineV1beta1().Machines(o.namespace()).List(ctx, metav1.ListOptions{LabelSelector: machine.MachineRoleLabel + "=master"})
	if err != nil {
		return nil, fmt.Errorf("listing the control-plane machines: %w", err)
	}
	var machines []controlPlaneMachine
	for i := range list.Items {
		m := &list.Items[i]
		cm := controlPlaneMachine{m: m, deleting: !m.DeletionTimestamp.IsZero()}
		if m.Status.NodeRef != nil {
			n, err := o.node(ctx, m.Status.NodeRef.Name)
			switch {
			case err == nil:
				cm.node = n
			case !apierrors.IsNotFound(err):
				return nil, fmt.Errorf("reading node %s of machine %s: %w", m.Status.NodeRef.Name, m.Name, err)
			}
		}
		machines = append(machines, cm)
	}
	sort.Slice(machines, func(i, j int) bool { return machines[i].m.Name < machines[j].m.Name })
	return machines, nil
}

// node reads a Node (a chaos campaign may make the read fail: see
// failpoint.EtcdNodeRead).
func (o *Operator) node(ctx context.Context, name string) (*corev1.Node, error) {
	if err := failpoint.Fail(failpoint.EtcdNodeRead); err != nil {
		return nil, err
	}
	return o.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

// machineAPIFunctional: a control-plane Machine is Running
// (ceohelpers.IsFunctional), so members can be told by their machines.
func machineAPIFunctional(machines []controlPlaneMachine) bool {
	for _, cm := range machines {
		if ptr.Deref(cm.m.Status.Phase, "") == machinev1.PhaseRunning {
			return true
		}
	}
	return false
}

func (o *Operator) reconcile(ctx context.Context) error {
	machines, err := o.controlPlaneMachines(ctx)
	if err != nil {
		return err
	}
	if o.Cluster != nil {
		if err := o.followMachines(ctx, machines); err != nil {
			return err
		}
		if _, err := o.Cluster.ForgetRemoved(ctx); err != nil {
			o.report(ctx, machines, nil, err)
			return err
		}
	}
	members, err := o.membership().Members(ctx)
	if err != nil {
		o.report(ctx, machines, nil, err)
		return err
	}
	desired, err := o.desired(ctx)
	if err != nil {
		o.report(ctx, machines, members, nil)
		return err
	}
	if o.KeepQuorumGuard {
		if err := o.ensureQuorumGuard(ctx, desired); err != nil {
			klog.FromContext(ctx).Error(err, "The etcd quorum guard")
		}
	}
	changed, err := o.changeMembership(ctx, machines, members, desired)
	if changed {
		if now, lerr := o.membership().Members(ctx); lerr == nil {
			members = now
		}
	}
	o.report(ctx, machines, members, nil)
	return err
}

// followMachines starts and stops the member processes capstan runs as
// their machines start, stop and reboot.
func (o *Operator) followMachines(ctx context.Context, machines []controlPlaneMachine) error {
	log := klog.FromContext(ctx)
	// A member runs on its machine: it stops with the machine. A machine
	// started while the API was down has its node started now.
	for _, cm := range machines {
		name := cm.m.Name
		if o.Cluster.powerOnPending(name) {
			if cm.node != nil && sim.Stopped(cm.node) && o.PowerOn != nil {
				if err := o.PowerOn(ctx, cm.node.Name); err != nil {
					return fmt.Errorf("starting node %s of machine %s: %w", cm.node.Name, name, err)
				}
			}
			if err := o.Cluster.clearPowerOn(name); err != nil {
				return err
			}
			continue
		}
		if cm.node != nil && sim.Rebooting(cm.node) {
			o.rebootMember(ctx, name, sim.Boot(cm.node))
			continue
		}
		o.rebootMu.Lock()
		delete(o.rebooted, name)
		o.rebootMu.Unlock()
		down, err := o.instanceDown(ctx, cm)
		if err != nil {
			return fmt.Errorf("the instance of machine %s: %w", name, err)
		}
		switch {
		case down && o.Cluster.Running(name):
			o.stopMember(ctx, name)
		case cm.node != nil && !down:
			// One member that does not start holds no other.
			if err := o.Cluster.StartMember(name); err != nil {
				log.Error(err, "Starting the etcd member of a machine", "machine", name)
			}
		}
	}
	// A member whose machine is gone went with its instance; a machine
	// that only stopped being listed as a master (relabelled) keeps its
	// member.
	for _, name := range o.Cluster.runningNames() {
		if name == BootstrapName || slices.ContainsFunc(machines, func(cm controlPlaneMachine) bool { return cm.m.Name == name }) {
			continue
		}
		_, err := o.Machines.MachineV1beta1().Machines(o.namespace()).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			delete(o.relabeled, name)
			o.Cluster.StopMember(name)
		case err != nil:
			return fmt.Errorf("reading machine %s: %w", name, err)
		case !o.relabeled[name]:
			if o.relabeled == nil {
				o.relabeled = map[string]bool{}
			}
			o.relabeled[name] = true
			log.Info("A machine running an etcd member is no longer labelled a control-plane machine: its member stays", "machine", name,
				"label", machine.MachineRoleLabel+"=master")
		}
	}
	return nil
}

// stopMember stops a member as its machine stops. While the bootstrap
// member votes, the cluster passes through two voters (the bootstrap
// member and the first master's): the master's stop would take the
// quorum with it, though its removal would not. Such a member leaves the
// cluster first, as a member shut down gracefully would; its machine gets
// a new member once it runs again.
func (o *Operator) stopMember(ctx context.Context, name string) {
	if members, err := o.Cluster.Members(ctx); err == nil && leavesBeforeStop(members, name) {
		msg := fmt.Sprintf("removing member %s before its machine stops: with the bootstrap member still voting, its stop would lose the quorum and its removal does not", name)
		if err := o.Cluster.Remove(ctx, name); err != nil {
			// Refused (etcdserver: re-configuration failed due to not
			// enough started members): the stop loses the quorum either way.
			klog.FromContext(ctx).Error(err, "Removing an etcd member before its machine stops", "member", name)
		} else {
			klog.FromContext(ctx).Info("Changed the etcd membership", "reason", "ScaleDown", "change", msg)
			o.event(ctx, "ScaleDown", msg)
		}
	}
	o.Cluster.StopMember(name)
}

// leavesBeforeStop says whether name's member must leave before it
// stops: the bootstrap member votes, name's member votes, and the
// healthy voting members without it are no quorum of the members as they
// are. Whether its removal is safe is etcd's to judge: its
// StrictReconfigCheck refuses a removal that leaves fewer started members
// than a quorum, and counts them from its own peers' connections, where
// one health check here may have flaked (the bootstrap member's, say,
// which the old lower bound took for a member down, so the stop went
// ahead and took the quorum with it).
func leavesBeforeStop(members []MemberStatus, name string) bool {
	voters, others := 0, 0
	bootstrap, self := false, false
	for _, m := range members {
		if !m.Started || m.Learner {
			continue
		}
		voters++
		switch m.Name {
		case BootstrapName:
			bootstrap = true
		case name:
			self = true
			continue
		}
		if m.Healthy {
			others++
		}
	}
	return bootstrap && self && others < voters/2+1
}

// changeMembership makes the one change the etcd operator's rules choose
// (see Decide), and says whether it made one.
func (o *Operator) changeMembership(ctx context.Context, machines []controlPlaneMachine, members []MemberStatus, desired int) (bool, error) {
	state := RuleState{Desired: desired, Now: time.Now(), LearnerTimeout: o.learnerTimeout(), MachineAPIFunctional: machineAPIFunctional(machines)}
	nodeOf := map[string]*corev1.Node{}
	// A member is named after its machine (capstan up's) or its node
	// (kubeadm's and OpenShift's); the rules go by machine.
	machineOf, memberOf := map[string]string{}, map[string]string{}
	for _, cm := range machines {
		nodeOf[cm.m.Name] = cm.node
		if cm.m.Status.NodeRef != nil && cm.m.Status.NodeRef.Name != cm.m.Name {
			machineOf[cm.m.Status.NodeRef.Name] = cm.m.Name
		}
		state.Machines = append(state.Machines, RuleMachine{Name: cm.m.Name, Deleting: cm.deleting, Hook: hasQuorumGuard(cm.m),
			Running: cm.node != nil && !sim.Stopped(cm.node)})
	}
	progressed := o.learnersProgress(members, state.Now)
	seen := map[uint64]bool{}
	for _, m := range members {
		seen[m.ID] = true
		rm := RuleMember{Name: m.Name, ID: m.ID, Learner: m.Learner, Started: m.Started, Healthy: m.Healthy, Added: m.Added,
			Progressed: progressed[m.ID],
			// On a remote etcd, hosts add members: a nameless one is one
			// being started. capstan up adds every member itself and
			// names it from its registry.
			Joining: o.Cluster == nil && !m.Started}
		if machine, ok := machineOf[m.Name]; ok {
			rm.Name, memberOf[machine] = machine, m.Name
		}
		if n, ok := nodeOf[rm.Name]; ok {
			rm.Node = n != nil
		} else if m.Name != "" && m.Name != BootstrapName {
			_, err := o.node(ctx, m.Name)
			if err != nil && !apierrors.IsNotFound(err) {
				return false, fmt.Errorf("reading the node of member %s: %w", m.Name, err)
			}
			rm.Node = err == nil
		}
		if rm.Added.IsZero() && (m.Learner || !m.Started) {
			// A member this process did not add (no registry entry):
			// its timeout runs from when it was first seen.
			if o.firstSeen == nil {
				o.firstSeen = map[uint64]time.Time{}
			}
			if _, ok := o.firstSeen[m.ID]; !ok {
				o.firstSeen[m.ID] = state.Now
			}
			rm.Added = o.firstSeen[m.ID]
		}
		state.Members = append(state.Members, rm)
	}
	for id := range o.firstSeen {
		if !seen[id] {
			delete(o.firstSeen, id)
		}
	}
	act, err := Decide(state)
	if err != nil {
		return false, err
	}
	log := klog.FromContext(ctx)
	if name, ok := memberOf[act.Member]; ok {
		act.Member = name
	}
	switch act.Kind {
	case ActionNone:
		if act.Message != "" && act.Message != o.lastHold {
			log.Info("Etcd membership unchanged", "why", act.Message)
		}
		o.lastHold = act.Message
		return false, nil
	case ActionPromote:
		err = o.membership().Promote(ctx, act.Member)
	case ActionAddLearner:
		err = o.membership().AddLearner(ctx, act.Machine)
		if errors.Is(err, ErrHostJoins) {
			hold := fmt.Sprintf("waiting for the host of machine %s to add its member (%s)", act.Machine, act.Message)
			if hold != o.lastHold {
				log.Info("Etcd membership unchanged", "why", hold)
			}
			o.lastHold = hold
			return false, nil
		}
	case ActionRemove:
		if act.Member == "" {
			err = o.membership().RemoveID(ctx, act.ID)
		} else {
			err = o.membership().Remove(ctx, act.Member)
		}
	}
	o.lastHold = ""
	if err != nil {
		return false, fmt.Errorf("%s: %w", act.Message, err)
	}
	log.Info("Changed the etcd membership", "reason", act.Reason, "change", act.Message)
	o.event(ctx, act.Reason, act.Message)
	return true, nil
}

// hasQuorumGuard reports whether a machine carries the quorum guard's
// preDrain hook.
func hasQuorumGuard(m *machinev1.Machine) bool {
	return slices.ContainsFunc(m.Spec.LifecycleHooks.PreDrain, func(h machinev1.LifecycleHook) bool {
		return h.Name == QuorumGuardHook && h.Owner == QuorumGuardOwner
	})
}

// learnersProgress says when each learner last made progress: it applied
// more than when last seen, or as much as the leader. A learner that
// answers but never catches up is thus told from one catching up.
func (o *Operator) learnersProgress(members []MemberStatus, now time.Time) map[uint64]time.Time {
	var leaderApplied uint64
	for _, m := range members {
		for _, l := range members {
			if m.Leader != 0 && l.ID == m.Leader && l.Healthy {
				leaderApplied = l.AppliedIndex
			}
		}
	}
	out := map[uint64]time.Time{}
	live := map[uint64]bool{}
	for _, m := range members {
		if !m.Learner {
			continue
		}
		live[m.ID] = true
		if o.progress == nil {
			o.progress = map[uint64]learnerProgress{}
		}
		p := o.progress[m.ID]
		if m.Healthy && (m.AppliedIndex > p.applied || leaderApplied > 0 && m.AppliedIndex >= leaderApplied) {
			p.at = now
		}
		p.applied = max(p.applied, m.AppliedIndex)
		o.progress[m.ID] = p
		out[m.ID] = p.at
	}
	for id := range o.progress {
		if !live[id] {
			delete(o.progress, id)
		}
	}
	return out
}

// desired is the control plane's size: the ControlPlaneMachineSet's
// replicas, or, without one, the size the cluster was installed with.
func (o *Operator) desired(ctx context.Context) (int, error) {
	cpms, err := o.Machines.MachineV1().ControlPlaneMachineSets(o.namespace()).Get(ctx, machine.ControlPlaneMachineSetName, metav1.GetOptions{})
	switch {
	case err == nil && cpms.Spec.Replicas != nil:
		return int(*cpms.Spec.Replicas), nil
	case err != nil && !apierrors.IsNotFound(err):
		return 0, err
	case o.InstallReplicas <= 0:
		return 0, errors.New("no ControlPlaneMachineSet and no install-time control-plane size: the desired number of members is unknown")
	}
	return o.InstallReplicas, nil
}

func (o *Operator) learnerTimeout() time.Duration {
	if o.LearnerTimeout > 0 {
		return o.LearnerTimeout
	}
	return 5 * time.Minute
}

// event records a membership change on the etcd ClusterOperator.
func (o *Operator) event(ctx context.Context, reason, message string) {
	now := metav1.Now()
	// As library-go's recorder does: about the operator's Deployment, in
	// its namespace (an event of a cluster-scoped object must be in
	// default).
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: "etcd-operator.", Namespace: EventNamespace},
		InvolvedObject: corev1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Namespace: EventNamespace, Name: "etcd-operator"},
		Reason:         reason, Message: message, Type: corev1.EventTypeNormal,
		Source:         corev1.EventSource{Component: "openshift-cluster-etcd-operator"},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if _, err := o.Kube.CoreV1().Events(EventNamespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		klog.FromContext(ctx).Info("Recording an etcd operator event", "reason", reason, "err", err)
	}
}

// report writes the etcd ClusterOperator from the machines and the
// members, in the etcd operator's words.
func (o *Operator) report(ctx context.Context, machines []controlPlaneMachine, members []MemberStatus, listErr error) {
	cos := o.Config.ConfigV1().ClusterOperators()
	co, err := cos.Get(ctx, ClusterOperatorName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		co, err = cos.Create(ctx, &configv1.ClusterOperator{ObjectMeta: metav1.ObjectMeta{Name: ClusterOperatorName}}, metav1.CreateOptions{})
	}
	if err != nil {
		return
	}
	var available, unhealthy, unstarted, learners []string
	voting := 0
	for _, m := range members {
		switch {
		case !m.Started:
			unstarted = append(unstarted, m.Name)
		case m.Learner:
			learners = append(learners, m.Name)
		case m.Healthy:
			available = append(available, m.Name)
			voting++
		default:
			unhealthy = append(unhealthy, m.Name)
			voting++
		}
	}
	msg := memberMessage(available, unhealthy, unstarted, voting)
	now := metav1.Now()
	st := co.Status.DeepCopy()
	set := func(t configv1.ClusterStatusConditionType, s configv1.ConditionStatus, reason, message string) {
		cvo.SetCondition(&st.Conditions, configv1.ClusterOperatorStatusCondition{Type: t, Status: s, Reason: reason, Message: message}, now)
	}
	switch {
	case listErr != nil:
		set(configv1.OperatorAvailable, configv1.ConditionFalse, "EtcdMembers_NoQuorum", "EtcdMembersAvailable: "+listErr.Error())
		set(configv1.OperatorDegraded, configv1.ConditionTrue, "EtcdMembersController_ErrorUpdatingReportEtcdMembers", "EtcdMembersControllerDegraded: "+listErr.Error())
	default:
		if len(available) > voting/2 {
			set(configv1.OperatorAvailable, configv1.ConditionTrue, "AsExpected", "EtcdMembersAvailable: "+msg)
		} else {
			set(configv1.OperatorAvailable, configv1.ConditionFalse, "EtcdMembers_NoQuorum", "EtcdMembersAvailable: "+msg)
		}
		if len(unhealthy) > 0 {
			set(configv1.OperatorDegraded, configv1.ConditionTrue, "EtcdMembers_UnhealthyMembers", "EtcdMembersDegraded: "+msg)
		} else {
			set(configv1.OperatorDegraded, configv1.ConditionFalse, "AsExpected", "EtcdMembersDegraded: No unhealthy members found")
		}
		if reason, message := progressing(machines, members); reason != "" {
			set(configv1.OperatorProgressing, configv1.ConditionTrue, reason, message)
		} else {
			set(configv1.OperatorProgressing, configv1.ConditionFalse, "AsExpected", "EtcdMembersProgressing: No unstarted etcd members found")
		}
	}
	set(configv1.OperatorUpgradeable, configv1.ConditionTrue, "AsExpected", "All is well")
	st.RelatedObjects = []configv1.ObjectReference{{Group: "machine.openshift.io", Resource: "machines", Namespace: o.namespace()}}
	if v := o.releaseVersion(ctx); v != "" {
		// As the cluster-etcd-operator reports them; `oc get co etcd`
		// shows the operator's.
		st.Versions = []configv1.OperandVersion{{Name: "raw-internal", Version: v}, {Name: "etcd", Version: v}, {Name: "operator", Version: v}}
	}
	if equality.Semantic.DeepEqual(&co.Status, st) {
		return
	}
	co.Status = *st
	_, _ = cos.UpdateStatus(ctx, co, metav1.UpdateOptions{})
}

// progressing says why the etcd ClusterOperator is Progressing (empty:
// it is not): members joining, control-plane machines without a voting
// member, the bootstrap member not gone yet. The cluster is
// fault-tolerant only once none holds. Reasons and messages are joined
// as library-go's union of conditions joins them.
func progressing(machines []controlPlaneMachine, members []MemberStatus) (reason, message string) {
	var reasons, messages []string
	var joining []string
	voters := map[string]bool{}
	bootstrap := false
	for _, m := range members {
		switch {
		case m.Name == BootstrapName:
			bootstrap = true
		case !m.Started || m.Learner:
			joining = append(joining, cmp.Or(m.Name, fmt.Sprintf("%x", m.ID)))
		default:
			voters[m.Name] = true
		}
	}
	if len(joining) > 0 {
		reasons = append(reasons, "EtcdMembers_MembersNotStarted")
		messages = append(messages, fmt.Sprintf("EtcdMembersProgressing: %s joining the cluster", strings.Join(joining, ", ")))
	}
	var without []string
	for _, cm := range machines {
		if cm.deleting {
			continue
		}
		node := ""
		if cm.m.Status.NodeRef != nil {
			node = cm.m.Status.NodeRef.Name
		}
		if !voters[cm.m.Name] && (node == "" || !voters[node]) {
			without = append(without, cm.m.Name)
		}
	}
	if len(without) > 0 {
		reasons = append(reasons, "EtcdMembers_MachinesWithoutVotingMember")
		messages = append(messages, fmt.Sprintf("EtcdMembersProgressing: %s %s no voting member yet", strings.Join(without, ", "), pluralHas(len(without))))
	}
	if bootstrap {
		reasons = append(reasons, "BootstrapTeardown_BootstrapMemberPresent")
		messages = append(messages, "BootstrapTeardownProgressing: the bootstrap member etcd-bootstrap is still a member, waiting for the control-plane machines' members to vote")
	}
	return strings.Join(reasons, "::"), strings.Join(messages, "\n")
}

func pluralHas(n int) string {
	if n == 1 {
		return "has"
	}
	return "have"
}

// releaseVersion is the version of the release the cluster last
// completed: the one whose etcd runs (none before the first completes).
func (o *Operator) releaseVersion(ctx context.Context) string {
	cv, err := o.Config.ConfigV1().ClusterVersions().Get(ctx, "version", metav1.GetOptions{})
	if err != nil {
		return ""
	}
	for _, h := range cv.Status.History {
		if h.State == configv1.CompletedUpdate {
			return h.Version
		}
	}
	return ""
}

// memberMessage words the members as the etcd operator does: "3 members
// are available" or "2 of 3 members are available, NAME is unhealthy".
func memberMessage(available, unhealthy, unstarted []string, total int) string {
	var parts []string
	switch {
	case len(available) > 0 && len(available) == total:
		parts = append(parts, fmt.Sprintf("%d members are available", len(available)))
	case len(available) > 0:
		parts = append(parts, fmt.Sprintf("%d of %d members are available", len(available), total))
	}
	for _, n := range unhealthy {
		parts = append(parts, n+" is unhealthy")
	}
	for _, n := range unstarted {
		parts = append(parts, n+" has not started")
	}
	return strings.Join(parts, ", ")
}

// defragmentEvery runs the defragmentation every DefragInterval, apart
// from the reconcile: a pass waits DefragSettle after each member.
func (o *Operator) defragmentEvery(ctx context.Context) {
	interval := cmp.Or(o.DefragInterval, DefaultDefragInterval)
	quota := DefaultQuotaBackendBytes
	if o.Cluster != nil {
		quota = o.Cluster.Quota()
	}
	d := &Defragger{Client: o.membership().Client(), Members: o.membership().Members, Event: o.event, Quota: quota,
		MinBytes: DefaultDefragMinBytes, MaxFragmentedPercent: DefaultDefragMaxFragmentedPercent,
		Settle: cmp.Or(o.DefragSettle, DefaultDefragSettle)}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := o.defragment(ctx, d); err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).Info("Defragmenting etcd", "err", err)
		}
	}
}

// defragment makes a pass unless an admin turned it off (the ConfigMap
// etcd-disable-defrag in openshift-etcd-operator) or the control plane is
// not highly available (a single member's defragmentation stops the
// cluster), as upstream.
func (o *Operator) defragment(ctx context.Context, d *Defragger) error {
	_, err := o.Kube.CoreV1().ConfigMaps(EventNamespace).Get(ctx, DefragDisableConfigMap, metav1.GetOptions{})
	switch {
	case err == nil:
		return nil
	case !apierrors.IsNotFound(err):
		return err
	}
	desired, err := o.desired(ctx)
	if err != nil {
		return err
	}
	if desired < 3 {
		return nil
	}
	return d.Run(ctx)
}
