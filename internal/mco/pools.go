package mco

import (
	"context"
	"fmt"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	mcfgclient "github.com/openshift/client-go/machineconfiguration/clientset/versioned"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// EnsurePools creates the pools every OpenShift cluster has, master and
// worker, each selecting its nodes by role and its MachineConfigs by the
// role label, and their base configurations 00-master and 00-worker.
func EnsurePools(ctx context.Context, mcfg mcfgclient.Interface) error {
	for _, role := range []string{"master", "worker"} {
		pool := &mcfgv1.MachineConfigPool{
			ObjectMeta: metav1.ObjectMeta{Name: role, Labels: map[string]string{
				"machineconfiguration.openshift.io/mco-built-in":           "",
				"pools.operator.machineconfiguration.openshift.io/" + role: ""}},
			Spec: mcfgv1.MachineConfigPoolSpec{
				MachineConfigSelector: &metav1.LabelSelector{MatchLabels: map[string]string{RoleLabel: role}},
				NodeSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{"node-role.kubernetes.io/" + role: ""}},
			},
		}
		if role == "master" {
			pool.Labels[RequiredForUpgradeLabel] = ""
		}
		if _, err := mcfg.MachineconfigurationV1().MachineConfigPools().Create(ctx, pool, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating MachineConfigPool %s: %w", role, err)
		}
		base := &mcfgv1.MachineConfig{
			ObjectMeta: metav1.ObjectMeta{Name: "00-" + role, Labels: map[string]string{RoleLabel: role},
				Annotations: map[string]string{GeneratedByAnnotation: "capstan"}},
			Spec: mcfgv1.MachineConfigSpec{Config: runtime.RawExtension{Raw: []byte(fmt.Sprintf(
				`{"ignition":{"version":"3.5.0"},"storage":{"files":[{"path":"/etc/node-role","mode":420,"contents":{"source":"data:,%s"}}]}}`, role))}},
		}
		if _, err := mcfg.MachineconfigurationV1().MachineConfigs().Create(ctx, base, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating MachineConfig %s: %w", base.Name, err)
		}
	}
	return nil
}
