package machine

import (
	"context"
	"fmt"
	"sync"

	"github.com/capstan-dev/capstan/internal/failpoint"
	"github.com/capstan-dev/capstan/internal/nodes"
	"github.com/capstan-dev/capstan/internal/planted"

	capdrain "github.com/capstan-dev/capstan/internal/drain"
	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// skipWaitForDeleteTimeoutSeconds: on an unreachable node pods never go
// away, so the drain does not wait for pods deleted longer ago than this.
const skipWaitForDeleteTimeoutSeconds = 1

// errDrainNotPermitted holds a control-plane drain while another
// control-plane node is cordoned.
type errDrainNotPermitted struct{ other string }

func (e *errDrainNotPermitted) Error() string {
	return fmt.Sprintf("drain not permitted: control plane node %s is already cordoned; control plane nodes drain one at a time", e.other)
}

// drainReconciler drains the Node of a Deleting machine once no preDrain
// hook holds it, and records the outcome in the Drained condition. Failed
// drains are retried with exponential backoff (the controller's rate
// limiter).
type drainReconciler struct {
	client client.Client
	// reader reads the API directly, past the cache.
	reader   client.Reader
	kube     kubernetes.Interface
	recorder record.EventRecorder
	opts     *Options
	// controlPlane serialises the check that no other control-plane node
	// is being drained with the cordon that starts a drain, so that
	// concurrent reconciles never drain two at once.
	controlPlane sync.Mutex
}

func (d *drainReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	m := &machinev1.Machine{}
	if err := d.client.Get(ctx, req.NamespacedName, m); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if m.DeletionTimestamp.IsZero() || phaseOf(m) != machinev1.PhaseDeleting || conditionTrue(m.Status.Conditions, machinev1.MachineDrained) {
		return reconcile.Result{}, nil
	}
	if hooks := m.Spec.LifecycleHooks.PreDrain; len(hooks) > 0 && !planted.On(planted.IgnorePreDrainHook) {
		klog.FromContext(ctx).V(2).Info("Not draining: lifecycle blocked by pre-drain hooks", "machine", klog.KObj(m), "hooks", hooks)
		d.recorder.Event(m, corev1.EventTypeNormal, EventDrainBlocked, "Drain blocked by pre-drain hook")
		return reconcile.Result{}, nil
	}
	done := trueCondition(machinev1.MachineDrained, "Drain finished successfully")
	// A machine deleted before nodelink linked its node still owns that
	// node: find it (by provider ID first) rather than skip its drain.
	var nodeNames []string
	if _, excluded := m.Annotations[ExcludeNodeDrainingAnnotation]; !excluded {
		var err error
		if nodeNames, err = nodesOfMachine(ctx, d.client, d.reader, m); err != nil {
			return reconcile.Result{}, fmt.Errorf("finding the node of machine %s: %w", m.Name, err)
		}
	}
	if planted.On(planted.DrainedBeforeEviction) && len(nodeNames) > 0 {
		// The planted window bug: the drain written down before it is
		// made, the termination held back meanwhile only by this
		// process's memory of the drain under way, which a restart
		// forgets.
		drainsUnderWay.Store(m.Name, true)
		defer drainsUnderWay.Delete(m.Name)
		if err := writeMachineStatus(ctx, d.client, m.DeepCopy(), m, machineFacts{drained: &done}); err != nil {
			return reconcile.Result{}, fmt.Errorf("recording the drain of machine %s: %w", m.Name, err)
		}
		// The drain is under way from here: a kill lands in the window.
		failpoint.Hit(failpoint.DrainStarted)
	}
	if len(nodeNames) == 0 {
		d.recorder.Event(m, corev1.EventTypeNormal, EventDrainSkipped, "Node drain skipped")
		done.Message = "Node drain skipped"
	} else {
		d.recorder.Event(m, corev1.EventTypeNormal, EventDrainProceeds, "Node drain proceeds")
		for _, name := range nodeNames {
			if err := d.drainNode(ctx, m, name); err != nil {
				drained := falseCondition(machinev1.MachineDrained, machinev1.MachineDrainError,
					machinev1.ConditionSeverityWarning, "could not drain machine: %v", err)
				d.recorder.Eventf(m, corev1.EventTypeNormal, EventDrainRequeued, "Node drain requeued: %v", err)
				if perr := writeMachineStatus(ctx, d.client, m.DeepCopy(), m, machineFacts{drained: &drained}); perr != nil && !apierrors.IsNotFound(perr) {
					klog.FromContext(ctx).Error(perr, "Recording the drain failure", "machine", klog.KObj(m))
				}
				// An error, not a requeue: the rate limiter backs off.
				return reconcile.Result{}, err
			}
		}
		d.recorder.Event(m, corev1.EventTypeNormal, EventDrainSucceeded, "Node drain succeeded")
	}
	if err := writeMachineStatus(ctx, d.client, m.DeepCopy(), m, machineFacts{drained: &done}); err != nil {
		return reconcile.Result{}, fmt.Errorf("recording the drain of machine %s: %w", m.Name, err)
	}
	return reconcile.Result{}, nil
}

// drainsUnderWay are the machines whose drain the planted bug
// DrainedBeforeEviction wrote down before making it.
var drainsUnderWay sync.Map

// drainUnderWay reports whether this process is draining the machine
// after writing the drain down (the planted bug only).
func drainUnderWay(name string) bool {
	_, ok := drainsUnderWay.Load(name)
	return ok
}

// drainNode cordons the machine's Node and evicts its pods through the
// Eviction API, so PodDisruptionBudgets hold it back; DaemonSet pods stay,
// emptyDir data goes.
func (d *drainReconciler) drainNode(ctx context.Context, m *machinev1.Machine, nodeName string) error {
	log := klog.FromContext(ctx).WithValues("machine", klog.KObj(m))
	node, err := d.kube.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		log.Info("Node of the machine is already gone", "node", nodeName)
		return nil
	}
	if err != nil {
		return fmt.Errorf("unable to get node %q: %w", nodeName, err)
	}
	drainer := capdrain.New(ctx, d.kube, d.opts.DrainTimeout, log)
	if nodes.Unreachable(node) {
		log.Info("Node is unreachable: draining ignores grace periods; disruption budgets still hold", "node", node.Name)
		drainer.Helper.SkipWaitForDeleteTimeoutSeconds = skipWaitForDeleteTimeoutSeconds
		drainer.Helper.GracePeriodSeconds = 1
	}
	if err := d.cordon(ctx, drainer, node); err != nil {
		return err
	}
	if err := drainer.Evict(node.Name); err != nil {
		return err
	}
	log.Info("Drain successful", "node", node.Name)
	d.recorder.Eventf(m, corev1.EventTypeNormal, EventDeleted, "Node %q drained", node.Name)
	return nil
}

// cordon starts the drain of a node. Control-plane nodes drain one at a
// time: a cordoned control-plane node may be mid-drain, so another is not
// cordoned meanwhile (a node already cordoned continues its own drain).
// The check reads the API, not the cache, and it and the cordon happen
// under one lock, so two reconciles never both pass it.
func (d *drainReconciler) cordon(ctx context.Context, drainer *capdrain.Drainer, node *corev1.Node) error {
	if nodes.IsControlPlane(node) && !node.Spec.Unschedulable {
		d.controlPlane.Lock()
		defer d.controlPlane.Unlock()
		if other, err := d.cordonedControlPlaneNode(ctx, node.Name); err != nil {
			return err
		} else if other != "" {
			return &errDrainNotPermitted{other: other}
		}
	}
	return drainer.Cordon(node, true)
}

// cordonedControlPlaneNode names a cordoned control-plane node other than
// self, read from the API.
func (d *drainReconciler) cordonedControlPlaneNode(ctx context.Context, self string) (string, error) {
	for _, role := range []string{nodes.LabelRoleControlPlane, nodes.LabelRoleMaster} {
		list, err := d.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: role})
		if err != nil {
			return "", fmt.Errorf("listing control plane nodes: %w", err)
		}
		for i := range list.Items {
			if n := &list.Items[i]; n.Name != self && n.Spec.Unschedulable {
				return n.Name, nil
			}
		}
	}
	return "", nil
}
