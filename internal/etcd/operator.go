package etcd

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
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
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capstan-dev/capstan/internal/cvo"
	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/machine/hooks"
	"github.com/capstan-dev/capstan/internal/sim"
)

// The etcd operator's quorum guard, as OpenShift declares it.
const (
	QuorumGuardHook  = "EtcdQuorumOperator"
	QuorumGuardOwner = "clusteroperator/etcd"
	// ReplacesAnnotation on a control-plane machine names the machine it
	// was created to replace.
	ReplacesAnnotation = "capstan.dev/replaces"
	// ClusterOperatorName is the etcd operator's ClusterOperator.
	ClusterOperatorName = "etcd"
)

// Operator is the etcd operator's part of capstan: one member per
// control-plane machine, the quorum guard hook on those machines, a
// replacement for a control-plane machine that is deleted (the
// ControlPlaneMachineSet's OnDelete strategy), and the etcd ClusterOperator.
type Operator struct {
	Cluster   *Cluster
	Kube      kubernetes.Interface
	Machines  machineclient.Interface
	Config    configclient.Interface
	Namespace string
	// Interval is how often the membership is looked at.
	Interval time.Duration
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
			members, err := o.Cluster.Members(ctx)
			if err != nil {
				return hooks.Result{RequeueAfter: time.Second}, nil
			}
			for _, mem := range members {
				if mem.Name == m.Name {
					return hooks.Result{RequeueAfter: time.Second}, nil
				}
			}
			return hooks.Result{Done: true}, nil
		}}
}

// Run reconciles until ctx ends.
func (o *Operator) Run(ctx context.Context) error {
	interval := o.Interval
	if interval <= 0 {
		interval = time.Second
	}
	// Power-on requests are served apart: they matter most when the API
	// is down, and the reconcile below waits on the API.
	go func() {
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
	}()
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

type controlPlaneMachine struct {
	m        *machinev1.Machine
	node     *corev1.Node
	deleting bool
}

func (o *Operator) reconcile(ctx context.Context) error {
	list, err := o.Machines.MachineV1beta1().Machines(o.namespace()).List(ctx, metav1.ListOptions{LabelSelector: machine.MachineRoleLabel + "=master"})
	if err != nil {
		return err
	}
	var machines []controlPlaneMachine
	byName := map[string]*controlPlaneMachine{}
	for i := range list.Items {
		m := &list.Items[i]
		cm := controlPlaneMachine{m: m, deleting: !m.DeletionTimestamp.IsZero()}
		if m.Status.NodeRef != nil {
			if n, err := o.Kube.CoreV1().Nodes().Get(ctx, m.Status.NodeRef.Name, metav1.GetOptions{}); err == nil {
				cm.node = n
			}
		}
		machines = append(machines, cm)
	}
	sort.Slice(machines, func(i, j int) bool { return machines[i].m.Name < machines[j].m.Name })
	for i := range machines {
		byName[machines[i].m.Name] = &machines[i]
	}
	if err := o.replace(ctx, machines); err != nil {
		return err
	}
	// A member runs on its machine: it stops with the machine. A machine
	// started while the API was down has its node started now.
	for _, cm := range machines {
		name := cm.m.Name
		if o.Cluster.powerOnPending(name) {
			if cm.node != nil && sim.Stopped(cm.node) {
				if err := sim.StartNode(ctx, o.Kube, cm.node.Name); err != nil {
					return err
				}
			}
			if err := o.Cluster.clearPowerOn(name); err != nil {
				return err
			}
			continue
		}
		switch {
		case cm.node != nil && sim.Stopped(cm.node) && o.Cluster.Running(cm.m.Name):
			o.Cluster.StopMember(cm.m.Name)
		case cm.node != nil && !sim.Stopped(cm.node):
			if err := o.Cluster.StartMember(cm.m.Name); err != nil {
				return err
			}
		}
	}
	members, err := o.Cluster.Members(ctx)
	if err != nil {
		o.report(ctx, nil, err)
		return err
	}
	defer func() {
		if members, err := o.Cluster.Members(ctx); err == nil {
			o.report(ctx, members, nil)
		}
	}()
	return o.changeMembership(ctx, machines, byName, members)
}

// changeMembership makes one change at a time, as the etcd operator does:
// promote a learner that has caught up; add a learner for a running
// control-plane machine without a member; or, with every voting member
// healthy and enough of them on machines that stay, remove the member of
// a machine being deleted (or gone), or the bootstrap member.
func (o *Operator) changeMembership(ctx context.Context, machines []controlPlaneMachine, byName map[string]*controlPlaneMachine, members []MemberStatus) error {
	memberOf := map[string]MemberStatus{}
	allHealthy := true
	for _, m := range members {
		memberOf[m.Name] = m
		if m.Learner {
			return o.Cluster.Promote(ctx, m.Name)
		}
		if !m.Healthy {
			allHealthy = false
		}
	}
	if !allHealthy {
		return nil
	}
	for _, cm := range machines {
		if _, ok := memberOf[cm.m.Name]; ok || cm.deleting || cm.node == nil || sim.Stopped(cm.node) {
			continue
		}
		klog.FromContext(ctx).Info("Adding an etcd member as a learner", "machine", cm.m.Name)
		return o.Cluster.AddLearner(ctx, cm.m.Name)
	}
	// The control plane's size: the machines that stay, and a slot for
	// each machine being deleted whose replacement is not there yet. A
	// member leaves only when every slot has a voting member.
	replaced := map[string]bool{}
	for _, cm := range machines {
		if r := cm.m.Annotations[ReplacesAnnotation]; r != "" {
			replaced[r] = true
		}
	}
	want := 0
	for _, cm := range machines {
		if !cm.deleting || !replaced[cm.m.Name] {
			want++
		}
	}
	votingStaying := 0
	for _, m := range members {
		if cm := byName[m.Name]; cm != nil && !cm.deleting {
			votingStaying++
		}
	}
	if votingStaying < want || want == 0 {
		return nil
	}
	for _, m := range members {
		cm := byName[m.Name]
		if cm != nil && !cm.deleting {
			continue
		}
		klog.FromContext(ctx).Info("Removing an etcd member: its replacement votes", "member", m.Name)
		return o.Cluster.Remove(ctx, m.Name)
	}
	return nil
}

// controlPlaneName splits a control-plane machine's name into its prefix
// (up to "-master"), the random part a replacement adds, and its index.
var controlPlaneName = regexp.MustCompile(`^(.*-master)(-[a-z0-9]{5})?-(\d+)$`)

// replace creates, for each control-plane machine being deleted, one
// replacement with its spec, as the ControlPlaneMachineSet does with its
// OnDelete strategy.
func (o *Operator) replace(ctx context.Context, machines []controlPlaneMachine) error {
	replaced := map[string]bool{}
	for _, cm := range machines {
		if r := cm.m.Annotations[ReplacesAnnotation]; r != "" {
			replaced[r] = true
		}
	}
	for _, cm := range machines {
		if !cm.deleting || replaced[cm.m.Name] {
			continue
		}
		old := cm.m
		// As the ControlPlaneMachineSet names them: <prefix>-master-<random>-<index>.
		base, index := old.Name, "0"
		if s := controlPlaneName.FindStringSubmatch(old.Name); s != nil {
			base, index = s[1], s[3]
		}
		m := &machinev1.Machine{
			ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("%s-%s-%s", base, sim.RandomSuffix(), index), Namespace: old.Namespace,
				Labels: old.Labels, Annotations: map[string]string{ReplacesAnnotation: old.Name},
			},
			Spec: machinev1.MachineSpec{ProviderSpec: old.Spec.ProviderSpec, ObjectMeta: old.Spec.ObjectMeta, Taints: old.Spec.Taints},
		}
		if _, err := o.Machines.MachineV1beta1().Machines(old.Namespace).Create(ctx, m, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating a replacement for %s: %w", old.Name, err)
		}
		klog.FromContext(ctx).Info("Created a replacement control-plane machine", "machine", m.Name, "replaces", old.Name)
	}
	return nil
}

// report writes the etcd ClusterOperator from the members, in the etcd
// operator's words.
func (o *Operator) report(ctx context.Context, members []MemberStatus, listErr error) {
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
	}
	if len(unstarted)+len(learners) > 0 {
		names := append(append([]string(nil), learners...), unstarted...)
		set(configv1.OperatorProgressing, configv1.ConditionTrue, "EtcdMembers_MembersNotStarted",
			fmt.Sprintf("EtcdMembersProgressing: %s joining the cluster", strings.Join(names, ", ")))
	} else {
		set(configv1.OperatorProgressing, configv1.ConditionFalse, "AsExpected", "EtcdMembersProgressing: No unstarted etcd members found")
	}
	set(configv1.OperatorUpgradeable, configv1.ConditionTrue, "AsExpected", "All is well")
	st.RelatedObjects = []configv1.ObjectReference{{Group: "machine.openshift.io", Resource: "machines", Namespace: o.namespace()}}
	if equality.Semantic.DeepEqual(&co.Status, st) {
		return
	}
	co.Status = *st
	_, _ = cos.UpdateStatus(ctx, co, metav1.UpdateOptions{})
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
