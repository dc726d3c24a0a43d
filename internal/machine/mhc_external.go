package machine

import (
	"context"
	"fmt"
	"strings"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// External remediation, as the Machine API's MachineHealthCheck controller
// does it: with a remediationTemplate, an unhealthy machine gets a
// remediation request made from the template (named after the machine,
// owned by it) for another controller to act on, and is not deleted; the
// request is deleted once the machine is healthy again. Without one, the
// remediation-strategy annotation external-baremetal has the machine
// annotated for the bare-metal operator instead.
const (
	// RemediationStrategyAnnotation on a MachineHealthCheck chooses
	// annotation-based external remediation.
	RemediationStrategyAnnotation = "machine.openshift.io/remediation-strategy"
	// RemediationStrategyExternal is its value for the bare-metal operator.
	RemediationStrategyExternal = "external-baremetal"
	// ExternalRemediationAnnotation asks the bare-metal operator to
	// remediate a machine's host.
	ExternalRemediationAnnotation = "host.metal3.io/external-remediation"
	// ClonedFromNameAnnotation and ClonedFromGroupKindAnnotation name the
	// template a remediation request was made from.
	ClonedFromNameAnnotation      = "machine.openshift.io/cloned-from-name"
	ClonedFromGroupKindAnnotation = "machine.openshift.io/cloned-from-groupkind"

	EventExternalAnnotationFailed = "ExternalAnnotationFailed"
	EventExternalAnnotationAdded  = "ExternalAnnotationAdded"

	templateSuffix = "Template"
)

// remediationRequestRef is the remediation request of a machine under a
// check with a remediation template.
func remediationRequestRef(mhc *machinev1.MachineHealthCheck, machine string) *unstructured.Unstructured {
	t := mhc.Spec.RemediationTemplate
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(t.APIVersion)
	u.SetKind(strings.TrimSuffix(t.Kind, templateSuffix))
	u.SetNamespace(mhc.Namespace)
	u.SetName(machine)
	return u
}

// externalRemediation creates the machine's remediation request from the
// template unless it has one.
func (r *mhcReconciler) externalRemediation(ctx context.Context, mhc *machinev1.MachineHealthCheck, t healthTarget) error {
	m := t.machine
	ref := mhc.Spec.RemediationTemplate
	req := remediationRequestRef(mhc, m.Name)
	err := r.client.Get(ctx, client.ObjectKeyFromObject(req), req)
	switch {
	case err == nil:
		return nil
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("error retrieving external remediation %v %q for machine %q in namespace %q: %w", ref.GroupVersionKind(), ref.Name, m.Name, m.Namespace, err)
	}
	tmpl := &unstructured.Unstructured{}
	tmpl.SetAPIVersion(ref.APIVersion)
	tmpl.SetKind(ref.Kind)
	ns := ref.Namespace
	if ns == "" {
		ns = m.Namespace
	}
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: ref.Name}, tmpl); err != nil {
		mhc.Status.Conditions = setCondition(mhc.Status.Conditions, falseCondition(machinev1.ExternalRemediationTemplateAvailable,
			machinev1.ExternalRemediationTemplateNotFound, machinev1.ConditionSeverityError, "%s", err.Error()), metav1.NewTime(timeNow()))
		return fmt.Errorf("error retrieving remediation template %v %q for machine %q in namespace %q: %w", ref.GroupVersionKind(), ref.Name, m.Name, m.Namespace, err)
	}
	spec, _, err := unstructured.NestedMap(tmpl.Object, "spec", "template", "spec")
	if err != nil {
		return fmt.Errorf("remediation template %s/%s: spec.template.spec: %w", ns, ref.Name, err)
	}
	req.Object["spec"] = spec
	if labels, _, _ := unstructured.NestedStringMap(tmpl.Object, "spec", "template", "metadata", "labels"); len(labels) > 0 {
		req.SetLabels(labels)
	}
	annotations, _, _ := unstructured.NestedStringMap(tmpl.Object, "spec", "template", "metadata", "annotations")
	if annotations == nil {
		annotations = map[string]string{}
	}
	gvk := schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind)
	annotations[ClonedFromNameAnnotation] = ref.Name
	annotations[ClonedFromGroupKindAnnotation] = gvk.GroupKind().String()
	req.SetAnnotations(annotations)
	req.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: machinev1.SchemeGroupVersion.String(), Kind: "Machine", Name: m.Name, UID: m.UID}})
	klog.FromContext(ctx).Info("Machine failed its health check: creating an external remediation request", "machine", klog.KObj(m), "kind", req.GetKind())
	if err := r.client.Create(ctx, req); err != nil && !apierrors.IsAlreadyExists(err) {
		mhc.Status.Conditions = setCondition(mhc.Status.Conditions, falseCondition(machinev1.ExternalRemediationRequestAvailable,
			machinev1.ExternalRemediationRequestCreationFailed, machinev1.ConditionSeverityError, "%s", err.Error()), metav1.NewTime(timeNow()))
		return fmt.Errorf("error creating remediation request for machine %q in namespace %q: %w", m.Name, m.Namespace, err)
	}
	return nil
}

// cleanExternalRemediation deletes the remediation requests of machines
// healthy again: their remediation worked.
func (r *mhcReconciler) cleanExternalRemediation(ctx context.Context, mhc *machinev1.MachineHealthCheck, healthy []healthTarget) {
	if mhc.Spec.RemediationTemplate == nil {
		return
	}
	for _, t := range healthy {
		req := remediationRequestRef(mhc, t.machine.Name)
		if err := r.client.Get(ctx, client.ObjectKeyFromObject(req), req); err != nil {
			continue
		}
		if req.GetDeletionTimestamp() == nil {
			klog.FromContext(ctx).Info("Machine passed its health check: deleting its external remediation request", "machine", klog.KObj(t.machine))
			if err := r.client.Delete(ctx, req); err != nil && !apierrors.IsNotFound(err) {
				klog.FromContext(ctx).Error(err, "Deleting the external remediation request", "machine", klog.KObj(t.machine))
			}
		}
	}
}

// annotateForExternal asks the bare-metal operator to remediate the
// machine's host (the remediation-strategy external-baremetal).
func (r *mhcReconciler) annotateForExternal(ctx context.Context, id string, m *machinev1.Machine) error {
	if _, ok := m.Annotations[ExternalRemediationAnnotation]; ok {
		return nil
	}
	base := m.DeepCopy()
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[ExternalRemediationAnnotation] = ""
	if err := r.client.Patch(ctx, m, client.MergeFrom(base)); err != nil {
		r.recorder.Eventf(m, corev1.EventTypeWarning, EventExternalAnnotationFailed, "Requesting external remediation of node associated with machine %v failed: %v", id, err)
		return err
	}
	r.recorder.Eventf(m, corev1.EventTypeNormal, EventExternalAnnotationAdded, "Requesting external remediation of node associated with machine %v", id)
	return nil
}
