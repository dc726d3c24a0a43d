package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/nodes"
	"github.com/capstan-dev/capstan/internal/waitfor"

	configv1 "github.com/openshift/api/config/v1"
	cpmsv1 "github.com/openshift/api/machine/v1"
	machinev1 "github.com/openshift/api/machine/v1beta1"
	machineclient "github.com/openshift/client-go/machine/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/autoscaler"
	"github.com/capstan-dev/capstan/internal/etcd"
	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/machine/hooks"
	"github.com/capstan-dev/capstan/internal/sim"
)

// startMachineAPI runs the Machine API controllers on the simulated cloud,
// and the hook-implementing controllers asked for.
func (c *Cluster) startMachineAPI(ctx, runCtx context.Context) error {
	opts := *c.opts.MachineAPI
	opts.Actuator = &machine.SimActuator{Cloud: c.Cloud}
	if err := ensureNamespace(ctx, c, opts.Namespace); err != nil {
		return err
	}
	id, err := c.as(ctx, "machine-api")
	if err != nil {
		return err
	}
	mgr, err := machine.NewManager(id.cfg, opts)
	if err != nil {
		return err
	}
	c.addMetrics(JobMachineAPI, &machine.Metrics{Client: mgr.GetClient(), Namespace: opts.Namespace})
	c.run(runCtx, "machine API", mgr.Start)
	if c.opts.EtcdOperator {
		if err := c.startEtcdOperator(ctx, runCtx, opts.Namespace); err != nil {
			return fmt.Errorf("etcd operator: %w", err)
		}
	}
	if len(c.opts.Hooks) == 0 {
		return nil
	}
	if id, err = c.as(ctx, "hooks"); err != nil {
		return err
	}
	hookMgr, err := hooks.NewManager(id.cfg, hooks.Options{Namespace: opts.Namespace}, c.opts.Hooks...)
	if err != nil {
		return fmt.Errorf("hook controllers: %w", err)
	}
	c.run(runCtx, "hook controllers", hookMgr.Start)
	return nil
}

// startEtcdOperator runs etcd's operator: a member per control-plane
// machine, guarded by its preDrain hook, which it implements itself.
func (c *Cluster) startEtcdOperator(ctx, runCtx context.Context, namespace string) error {
	id, err := c.as(ctx, "etcd-operator")
	if err != nil {
		return err
	}
	mc, err := machineclient.NewForConfig(id.cfg)
	if err != nil {
		return err
	}
	op := &etcd.Operator{Cluster: c.ControlPlane.Etcd(), Kube: id.kube, Machines: mc, Config: id.config, Namespace: namespace,
		InstallReplicas: c.opts.ControlPlaneNodes, Instances: simInstances{c.Cloud}, PowerOn: c.Cloud.PowerOn, KeepQuorumGuard: true}
	c.run(runCtx, "etcd operator", op.Run)
	guard, err := hooks.NewManager(id.cfg, hooks.Options{Namespace: namespace}, op.QuorumGuard())
	if err != nil {
		return fmt.Errorf("quorum guard: %w", err)
	}
	c.run(runCtx, "etcd quorum guard", guard.Start)
	return nil
}

// simInstances tells the etcd operator whether a machine's simulated
// instance exists: a member runs on its machine's instance, and only the
// cloud knows when that is gone.
type simInstances struct{ cloud *sim.APICloud }

func (s simInstances) InstanceExists(ctx context.Context, machine string) (bool, error) {
	_, err := s.cloud.GetInstance(ctx, machine)
	if errors.Is(err, sim.ErrInstanceNotFound) {
		return false, nil
	}
	return err == nil, err
}

// startAutoscaler runs the cluster autoscaler and the MachineAutoscaler
// controller on the cluster's Policy.
func (c *Cluster) startAutoscaler(ctx, runCtx context.Context) error {
	opts := *c.opts.Autoscaler
	if opts.Policy == nil && c.opts.Scheduler != nil {
		opts.Policy = c.opts.Scheduler.Policy
	}
	if err := ensureNamespace(ctx, c, opts.Namespace); err != nil {
		return err
	}
	id, err := c.as(ctx, "autoscaler")
	if err != nil {
		return err
	}
	opts.Informers = c.informers
	run, err := autoscaler.NewComponent(id.cfg, id.kube, opts)
	if err != nil {
		return err
	}
	c.run(runCtx, "autoscaler", run)
	return nil
}

func ensureNamespace(ctx context.Context, c *Cluster, name string) error {
	_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}

// MachineClient is a clientset for the machine.openshift.io API.
func (c *Cluster) MachineClient() (machineclient.Interface, error) {
	return machineclient.NewForConfig(c.RESTConfig())
}

// ensureMachines boots the cluster the way an OpenShift installer does:
// control-plane Machines <infra>-master-N spread over the zones, and one
// worker MachineSet <infra>-worker-<zone> per zone sharing the workers. A
// cluster that has its machines already (a restart) gets nothing new.
func (c *Cluster) ensureMachines(ctx context.Context) error {
	if c.opts.MachineAPI == nil {
		return errNoMachineAPI
	}
	mc, err := c.MachineClient()
	if err != nil {
		return err
	}
	ns := c.opts.MachineAPI.Namespace
	existing, err := mc.MachineV1beta1().Machines(ns).List(ctx, metav1.ListOptions{LabelSelector: machine.ClusterIDLabel})
	if err != nil {
		return fmt.Errorf("listing machines: %w", err)
	}
	sets, err := mc.MachineV1beta1().MachineSets(ns).List(ctx, metav1.ListOptions{LabelSelector: machine.ClusterIDLabel})
	if err != nil {
		return fmt.Errorf("listing machinesets: %w", err)
	}
	installed := c.ControlPlane.DataDir().Path(installedMarker)
	if len(existing.Items) > 0 || len(sets.Items) > 0 {
		// A ControlPlaneMachineSet deleted since the install comes back
		// Inactive, as upstream's generator makes it: it replaces nothing
		// until someone activates it. An install cut short before it made
		// one makes it Active.
		state := cpmsv1.ControlPlaneMachineSetStateActive
		if _, err := os.Stat(installed); err == nil {
			state = cpmsv1.ControlPlaneMachineSetStateInactive
		}
		if err := c.ensureControlPlaneMachineSet(ctx, existing.Items, state); err != nil {
			return err
		}
		return os.WriteFile(installed, nil, 0o600)
	}
	infra := "capstan-" + sim.RandomSuffix()
	zones := sim.DefaultZones
	for i := range c.opts.ControlPlaneNodes {
		zone := zones[i%len(zones)]
		m := &machinev1.Machine{
			ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("%s-master-%d", infra, i), Namespace: ns,
				Labels: map[string]string{machine.ClusterIDLabel: infra, machine.MachineRoleLabel: "master", machine.MachineTypeLabel: "master"},
			},
			Spec: machinev1.MachineSpec{ProviderSpec: machinev1.ProviderSpec{Value: machine.RawProviderSpec(providerSpecFor(c.opts.MasterSpec, zone))}},
		}
		if _, err := mc.MachineV1beta1().Machines(ns).Create(ctx, m, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating machine %s: %w", m.Name, err)
		}
	}
	created, err := mc.MachineV1beta1().Machines(ns).List(ctx, metav1.ListOptions{LabelSelector: machine.ClusterIDLabel})
	if err != nil {
		return fmt.Errorf("listing machines: %w", err)
	}
	if err := c.ensureControlPlaneMachineSet(ctx, created.Items, cpmsv1.ControlPlaneMachineSetStateActive); err != nil {
		return err
	}
	for i, zone := range zones {
		replicas := int32(c.opts.Workers / len(zones))
		if i < c.opts.Workers%len(zones) {
			replicas++
		}
		name := fmt.Sprintf("%s-worker-%s", infra, zone)
		sel := map[string]string{machine.ClusterIDLabel: infra, machine.MachineSetLabel: name}
		tmplLabels := map[string]string{machine.ClusterIDLabel: infra, machine.MachineSetLabel: name,
			machine.MachineRoleLabel: "worker", machine.MachineTypeLabel: "worker"}
		ms := &machinev1.MachineSet{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{machine.ClusterIDLabel: infra}},
			Spec: machinev1.MachineSetSpec{
				Replicas: ptr.To(replicas),
				Selector: metav1.LabelSelector{MatchLabels: sel},
				Template: machinev1.MachineTemplateSpec{
					ObjectMeta: machinev1.ObjectMeta{Labels: tmplLabels},
					Spec:       machinev1.MachineSpec{ProviderSpec: machinev1.ProviderSpec{Value: machine.RawProviderSpec(providerSpecFor(c.opts.WorkerSpec, zone))}},
				},
			},
		}
		if _, err := mc.MachineV1beta1().MachineSets(ns).Create(ctx, ms, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating machineset %s: %w", ms.Name, err)
		}
	}
	return os.WriteFile(installed, nil, 0o600)
}

// installedMarker is the file of a data dir whose machines the install
// made, ControlPlaneMachineSet included.
const installedMarker = "machines-installed"

// ensureControlPlaneMachineSet creates the ControlPlaneMachineSet named
// cluster, as the installer does, for a control plane of 3 or 5 machines
// (the sizes it supports), in state: its template is the control-plane
// machines' spec without their zone, which each index's failure domain
// sets. A cluster that has one keeps it.
func (c *Cluster) ensureControlPlaneMachineSet(ctx context.Context, machines []machinev1.Machine, state cpmsv1.ControlPlaneMachineSetState) error {
	if c.opts.ControlPlaneNodes != 3 && c.opts.ControlPlaneNodes != 5 {
		return nil
	}
	var master *machinev1.Machine
	for i := range machines {
		if m := &machines[i]; m.Labels[machine.MachineRoleLabel] == "master" && (master == nil || m.Name < master.Name) {
			master = m
		}
	}
	if master == nil {
		return nil
	}
	cs, err := c.MachineClient()
	if err != nil {
		return err
	}
	cpmsAPI := cs.MachineV1().ControlPlaneMachineSets(master.Namespace)
	if _, err := cpmsAPI.Get(ctx, machine.ControlPlaneMachineSetName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		return err
	}
	ps, err := machine.ParseProviderSpec(master.Spec.ProviderSpec)
	if err != nil {
		return fmt.Errorf("machine %s: %w", master.Name, err)
	}
	ps.Zone = ""
	infra := master.Labels[machine.ClusterIDLabel]
	sel := map[string]string{machine.ClusterIDLabel: infra, machine.MachineRoleLabel: "master", machine.MachineTypeLabel: "master"}
	cpms := &cpmsv1.ControlPlaneMachineSet{
		ObjectMeta: metav1.ObjectMeta{Name: machine.ControlPlaneMachineSetName, Namespace: master.Namespace},
		Spec: cpmsv1.ControlPlaneMachineSetSpec{
			State:    state,
			Replicas: ptr.To(int32(c.opts.ControlPlaneNodes)),
			Strategy: cpmsv1.ControlPlaneMachineSetStrategy{Type: cpmsv1.RollingUpdate},
			Selector: metav1.LabelSelector{MatchLabels: sel},
			Template: cpmsv1.ControlPlaneMachineSetTemplate{
				MachineType: cpmsv1.OpenShiftMachineV1Beta1MachineType,
				OpenShiftMachineV1Beta1Machine: &cpmsv1.OpenShiftMachineV1Beta1MachineTemplate{
					ObjectMeta: cpmsv1.ControlPlaneMachineSetTemplateObjectMeta{Labels: sel},
					// One failure domain per zone of the simulated cloud, as
					// the installer writes them.
					FailureDomains: simFailureDomains(),
					Spec:           machinev1.MachineSpec{ProviderSpec: machinev1.ProviderSpec{Value: machine.RawProviderSpec(*ps)}, Taints: master.Spec.Taints},
				},
			},
		},
	}
	if _, err := cpmsAPI.Create(ctx, cpms, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating controlplanemachineset %s: %w", cpms.Name, err)
	}
	return nil
}

// simFailureDomains are the simulated cloud's zones as failure domains, in
// the AWS shape (the simulated provider's machines are placed by zone).
func simFailureDomains() *cpmsv1.FailureDomains {
	var fds []cpmsv1.AWSFailureDomain
	for _, z := range sim.DefaultZones {
		fds = append(fds, cpmsv1.AWSFailureDomain{Placement: cpmsv1.AWSFailureDomainPlacement{AvailabilityZone: z}})
	}
	return &cpmsv1.FailureDomains{Platform: configv1.AWSPlatformType, AWS: &fds}
}

// providerSpecFor asks for spec's size: by instance type when one of the
// catalogue has exactly that size, else by cpu and memory.
func providerSpecFor(spec sim.InstanceSpec, zone string) machine.ProviderSpec {
	ps := machine.ProviderSpec{Region: sim.DefaultRegion, Zone: zone, Pods: spec.Pods, GPU: spec.GPU}
	if t, ok := machine.InstanceTypeOf(spec.CPU, spec.Memory, spec.GPU); ok {
		ps.InstanceType = t
	} else {
		ps.CPU, ps.Memory = ptr.To(spec.CPU), ptr.To(spec.Memory)
	}
	return ps
}

// WaitMachinesReady waits until every machine of the cluster that is not
// being deleted or failed is Running with a Ready node (or one an injected
// fault keeps from being Ready), and there are at least want of them.
func (c *Cluster) WaitMachinesReady(ctx context.Context, want int, timeout time.Duration) error {
	if c.opts.MachineAPI == nil {
		return errNoMachineAPI
	}
	mc, err := c.MachineClient()
	if err != nil {
		return err
	}
	ns := c.opts.MachineAPI.Namespace
	err = waitfor.Poll(ctx, 250*time.Millisecond, timeout, waitfor.Simple(func(ctx context.Context) (bool, string) {
		list, err := mc.MachineV1beta1().Machines(ns).List(ctx, metav1.ListOptions{LabelSelector: machine.ClusterIDLabel})
		if err != nil {
			return false, fmt.Sprintf("listing machines: %v", err)
		}
		nodeList, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, fmt.Sprintf("listing nodes: %v", err)
		}
		ready := map[string]bool{}
		for i := range nodeList.Items {
			n := &nodeList.Items[i]
			ready[n.Name] = nodes.Ready(n) || sim.FaultKeepsNotReady(n)
		}
		var pending []string
		count := 0
		for i := range list.Items {
			m := &list.Items[i]
			phase := ptr.Deref(m.Status.Phase, "")
			if m.DeletionTimestamp != nil || phase == machinev1.PhaseFailed {
				continue
			}
			count++
			if phase != machinev1.PhaseRunning || m.Status.NodeRef == nil || !ready[m.Status.NodeRef.Name] {
				pending = append(pending, fmt.Sprintf("%s (%s)", m.Name, ptr.Deref(m.Status.Phase, "no phase")))
			}
		}
		if count < want {
			pending = append(pending, fmt.Sprintf("%d of %d machines created", count, want))
		}
		sort.Strings(pending)
		return len(pending) == 0, "waiting for " + strings.Join(pending, ", ")
	}))
	if err != nil {
		return fmt.Errorf("machines not Running with Ready nodes: %w", err)
	}
	return nil
}

var errNoMachineAPI = errors.New("the Machine API is not running in this cluster")
