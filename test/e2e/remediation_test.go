package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/sim"
	"github.com/capstan-dev/capstan/internal/testenv"
)

// A MachineHealthCheck with a remediationTemplate hands an unhealthy
// machine to external remediation, as the Machine API does: a request made
// from the template, named after the machine and owned by it, which the
// simulated remediator acts on by power-cycling the host; the machine is
// kept, and the request deleted once it is healthy again. With the
// remediation-strategy annotation external-baremetal instead, the machine
// is annotated for the bare-metal operator and kept.
func TestMachineHealthCheckExternalRemediation(t *testing.T) {
	ms := newMachineSet(t, "e2e-mhc-ext", 1)
	m := waitMachinesRunning(t, ms.Name, 1)[0]
	node := m.Status.NodeRef.Name
	ctx := context.Background()
	gv := schema.GroupVersion{Group: "remediation.capstan.dev", Version: "v1alpha1"}
	templates := env.Dynamic.Resource(gv.WithResource("rebootremediationtemplates")).Namespace(machine.Namespace)
	requests := env.Dynamic.Resource(gv.WithResource("rebootremediations")).Namespace(machine.Namespace)
	tmpl := &unstructured.Unstructured{Object: map[string]any{"apiVersion": gv.String(), "kind": "RebootRemediationTemplate",
		"metadata": map[string]any{"name": "e2e-reboot"},
		"spec":     map[string]any{"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"e2e": "reboot"}}, "spec": map[string]any{}}}}}
	if _, err := templates.Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = templates.Delete(context.Background(), "e2e-reboot", metav1.DeleteOptions{}) })
	mhcAPI := machines(t).MachineV1beta1().MachineHealthChecks(machine.Namespace)
	check := func(name string, annotations map[string]string, template *corev1.ObjectReference) {
		t.Helper()
		mhc := &machinev1.MachineHealthCheck{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
			Spec: machinev1.MachineHealthCheckSpec{
				Selector: metav1.LabelSelector{MatchLabels: map[string]string{machine.MachineSetLabel: ms.Name}},
				// As OpenShift's documented checks: a node that stops
				// reporting soon, one NotReady (rebooting) only later.
				UnhealthyConditions: []machinev1.UnhealthyCondition{
					{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Timeout: metav1.Duration{Duration: 5 * time.Second}},
					{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Timeout: metav1.Duration{Duration: 5 * time.Minute}},
				},
				RemediationTemplate: template,
			},
		}
		if _, err := mhcAPI.Create(ctx, mhc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = mhcAPI.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	check("e2e-mhc-ext", nil, &corev1.ObjectReference{APIVersion: gv.String(), Kind: "RebootRemediationTemplate", Name: "e2e-reboot"})
	getNode := func() *corev1.Node {
		t.Helper()
		n, err := env.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	bootBefore := sim.Boot(getNode())
	capstanOK(t, "sim", "--kubeconfig", env.Kubeconfig, "node", "stop", node)

	// The request, made from the template.
	var req *unstructured.Unstructured
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		var err error
		req, err = requests.Get(ctx, m.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	if owners := req.GetOwnerReferences(); len(owners) != 1 || owners[0].Kind != "Machine" || owners[0].UID != m.UID {
		t.Errorf("the request's owners %+v, want the machine", owners)
	}
	if req.GetLabels()["e2e"] != "reboot" || req.GetAnnotations()[machine.ClonedFromNameAnnotation] != "e2e-reboot" ||
		req.GetAnnotations()[machine.ClonedFromGroupKindAnnotation] != "RebootRemediationTemplate.remediation.capstan.dev" {
		t.Errorf("the request's labels %v and annotations %v", req.GetLabels(), req.GetAnnotations())
	}
	// The remediator reboots the host, the node is Ready again, and the
	// check deletes the request; the machine is the same all along.
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		_, err := requests.Get(ctx, m.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("the request is still there: %v", err)
	})
	if b := sim.Boot(getNode()); b != bootBefore+1 {
		t.Errorf("node %s booted %d times, want once more than %d", node, b, bootBefore)
	}
	if got := getMachine(t, m.Name); got.UID != m.UID || got.DeletionTimestamp != nil {
		t.Fatalf("machine %s was deleted", m.Name)
	}
	eventMessage(t, machine.Namespace, m.Name, machine.EventRebooted, "Node "+node+" of machine "+m.Name+" is back up")

	// Annotation-based external remediation.
	_ = mhcAPI.Delete(ctx, "e2e-mhc-ext", metav1.DeleteOptions{})
	check("e2e-mhc-baremetal", map[string]string{machine.RemediationStrategyAnnotation: machine.RemediationStrategyExternal}, nil)
	capstanOK(t, "sim", "--kubeconfig", env.Kubeconfig, "node", "stop", node)
	t.Cleanup(func() { capstanOK(t, "sim", "--kubeconfig", env.Kubeconfig, "node", "start", node) })
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		got := getMachine(t, m.Name)
		_, ok := got.Annotations[machine.ExternalRemediationAnnotation]
		return ok, fmt.Sprintf("machine annotations %v", got.Annotations)
	})
	waitMachineEvents(t, m.Name, machine.EventExternalAnnotationAdded)
	if got := getMachine(t, m.Name); got.DeletionTimestamp != nil {
		t.Errorf("machine %s was deleted", m.Name)
	}
}
