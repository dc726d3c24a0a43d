package machine

import (
	"context"
	"fmt"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/capstan-dev/capstan/internal/sim"
)

// RebootRemediationKind is capstan's simulated external remediation
// request (remediation.capstan.dev/v1alpha1), which a MachineHealthCheck
// makes from a RebootRemediationTemplate.
var RebootRemediationKind = schema.GroupVersionKind{Group: "remediation.capstan.dev", Version: "v1alpha1", Kind: "RebootRemediation"}

// Phases of a RebootRemediation and the remediator's events.
const (
	RemediationRebooting = "Rebooting"
	RemediationRebooted  = "Rebooted"
	RemediationFailed    = "Failed"

	EventRebootStarted = "RebootStarted"
	EventRebooted      = "Rebooted"
)

// remediator power-cycles the simulated host of each RebootRemediation's
// Machine, as a fencing remediator (Self Node Remediation, Fence Agents
// Remediation) reboots a real one: the node goes down for RebootDuration
// and comes back without the faults that made it unhealthy. The Machine
// is kept; its MachineHealthCheck deletes the request once it is healthy.
type remediator struct {
	client   client.Client
	kube     kubernetes.Interface
	recorder record.EventRecorder
	down     time.Duration
}

func (r *remediator) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	rr := &unstructured.Unstructured{}
	rr.SetGroupVersionKind(RebootRemediationKind)
	if err := r.client.Get(ctx, req.NamespacedName, rr); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if rr.GetDeletionTimestamp() != nil {
		return reconcile.Result{}, nil
	}
	phase, _, _ := unstructured.NestedString(rr.Object, "status", "phase")
	node, _, _ := unstructured.NestedString(rr.Object, "status", "node")
	switch phase {
	case "":
		m := &machinev1.Machine{}
		err := r.client.Get(ctx, req.NamespacedName, m)
		if apierrors.IsNotFound(err) || (err == nil && m.Status.NodeRef == nil) {
			return reconcile.Result{}, r.setStatus(ctx, rr, RemediationFailed, "", fmt.Sprintf("machine %s has no node to reboot", req.Name))
		}
		if err != nil {
			return reconcile.Result{}, err
		}
		node = m.Status.NodeRef.Name
		if err := sim.PowerCycle(ctx, r.kube, node); err != nil {
			return reconcile.Result{}, err
		}
		r.recorder.Eventf(rr, corev1.EventTypeNormal, EventRebootStarted, "Power-cycling node %s of machine %s", node, req.Name)
		klog.FromContext(ctx).Info("Rebooting an unhealthy machine's node", "machine", req.Name, "node", node)
		if err := r.setStatus(ctx, rr, RemediationRebooting, node, ""); err != nil {
			return reconcile.Result{}, err
		}
		return reconcile.Result{RequeueAfter: r.down}, nil
	case RemediationRebooting:
		started, _, _ := unstructured.NestedString(rr.Object, "status", "startTime")
		if t, err := time.Parse(time.RFC3339, started); err == nil && timeNow().Sub(t) < r.down {
			return reconcile.Result{RequeueAfter: r.down - timeNow().Sub(t)}, nil
		}
		if err := sim.FinishReboot(ctx, r.kube, node); err != nil {
			return reconcile.Result{}, err
		}
		r.recorder.Eventf(rr, corev1.EventTypeNormal, EventRebooted, "Node %s of machine %s is back up", node, req.Name)
		return reconcile.Result{}, r.setStatus(ctx, rr, RemediationRebooted, node, "")
	}
	return reconcile.Result{}, nil
}

func (r *remediator) setStatus(ctx context.Context, rr *unstructured.Unstructured, phase, node, message string) error {
	base := rr.DeepCopy()
	status := map[string]any{"phase": phase}
	if phase == RemediationRebooting {
		status["startTime"] = timeNow().UTC().Format(time.RFC3339)
	} else if t, ok, _ := unstructured.NestedString(rr.Object, "status", "startTime"); ok {
		status["startTime"] = t
	}
	if node != "" {
		status["node"] = node
	}
	if message != "" {
		status["message"] = message
	}
	rr.Object["status"] = status
	if err := r.client.Status().Patch(ctx, rr, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("updating the status of %s %s: %w", rr.GetKind(), rr.GetName(), err)
	}
	return nil
}
