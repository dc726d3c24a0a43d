package etcd

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// The etcd quorum guard, as OpenShift deploys it: one pod per master,
// ready while its master's etcd member is (its readiness probe asks the
// member's /readyz), and a PodDisruptionBudget allowing one of them
// unavailable. A drain evicts the guard pod of its node: while another
// master's member is down, the budget refuses, and the drain (the machine
// config daemon's before a reboot, the Machine API's before a deletion)
// waits. It cannot stop a second machine from failing; it stops anyone
// from taking one down on purpose.
const (
	QuorumGuardNamespace = "openshift-etcd"
	QuorumGuardName      = "etcd-quorum-guard"
	// QuorumGuardLabel selects the guard pods (k8s-app=etcd-quorum-guard).
	QuorumGuardLabel = "k8s-app"
	// ReadyzPort is the port of a master where its etcd member's
	// /readyz answers (OpenShift's etcd-readyz container's).
	ReadyzPort = 9980
	// quorumGuardImage names the guard's image; a simulated kubelet
	// pulls nothing.
	quorumGuardImage = "quay.io/openshift/origin-cli:latest"
)

// QuorumGuardDeployment is the guard's Deployment for a control plane of
// replicas machines.
func QuorumGuardDeployment(replicas int32) *appsv1.Deployment {
	labels := map[string]string{QuorumGuardLabel: QuorumGuardName, "name": QuorumGuardName}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: QuorumGuardName, Namespace: QuorumGuardNamespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{QuorumGuardLabel: QuorumGuardName}},
			// Never more guard pods than masters, one replaced at a time.
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ptr.To(intstr.FromInt32(0)), MaxUnavailable: ptr.To(intstr.FromInt32(1))}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					HostNetwork: true,
					Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
							LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
								Key: QuorumGuardLabel, Operator: metav1.LabelSelectorOpIn, Values: []string{QuorumGuardName}}}},
							TopologyKey: corev1.LabelHostname,
						}},
					}},
					NodeSelector:                  map[string]string{"node-role.kubernetes.io/master": ""},
					PriorityClassName:             "system-cluster-critical",
					TerminationGracePeriodSeconds: ptr.To[int64](3),
					Tolerations: []corev1.Toleration{
						{Key: "node-role.kubernetes.io/master", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
						{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](120)},
						{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](120)},
					},
					Containers: []corev1.Container{{
						Name:    "guard",
						Image:   quorumGuardImage,
						Command: []string{"/bin/bash", "-c", "trap 'jobs -p | xargs -r kill; exit 0' TERM; sleep infinity & wait"},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
								Path: "/readyz", Port: intstr.FromInt32(ReadyzPort), Scheme: corev1.URISchemeHTTPS}},
							PeriodSeconds: 5, TimeoutSeconds: 5, FailureThreshold: 3, SuccessThreshold: 1,
						},
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("5Mi")}},
						TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
					}},
				},
			},
		},
	}
}

// QuorumGuardPDB is the guard's budget: one guard pod unavailable at most.
func QuorumGuardPDB() *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: QuorumGuardName, Namespace: QuorumGuardNamespace},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{QuorumGuardLabel: QuorumGuardName}},
		},
	}
}

// quorumGuardEvery is how often the operator makes sure the guard is as
// it should be (and at once when the control plane's size changes).
const quorumGuardEvery = 30 * time.Second

// ensureQuorumGuard creates the guard's Deployment and budget when they
// are missing, and keeps the Deployment at one pod per master.
func (o *Operator) ensureQuorumGuard(ctx context.Context, desired int) error {
	if o.guardReplicas == desired && time.Since(o.guardChecked) < quorumGuardEvery {
		return nil
	}
	deployments := o.Kube.AppsV1().Deployments(QuorumGuardNamespace)
	d, err := deployments.Get(ctx, QuorumGuardName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := deployments.Create(ctx, QuorumGuardDeployment(int32(desired)), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the etcd quorum guard: %w", err)
		}
	case err != nil:
		return fmt.Errorf("reading the etcd quorum guard: %w", err)
	case ptr.Deref(d.Spec.Replicas, 1) != int32(desired):
		d.Spec.Replicas = ptr.To(int32(desired))
		if _, err := deployments.Update(ctx, d, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("scaling the etcd quorum guard to %d: %w", desired, err)
		}
	}
	pdbs := o.Kube.PolicyV1().PodDisruptionBudgets(QuorumGuardNamespace)
	if _, err := pdbs.Get(ctx, QuorumGuardName, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		if _, err := pdbs.Create(ctx, QuorumGuardPDB(), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the etcd quorum guard's budget: %w", err)
		}
	} else if err != nil {
		return fmt.Errorf("reading the etcd quorum guard's budget: %w", err)
	}
	o.guardReplicas, o.guardChecked = desired, time.Now()
	return nil
}
