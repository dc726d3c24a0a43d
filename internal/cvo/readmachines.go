package cvo

import (
	"context"

	mcfgclient "github.com/openshift/client-go/machineconfiguration/clientset/versioned"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// ReadMachines reads the pools, the nodes and the MachineConfigs the
// nodes run or are told to run; nil when the cluster has no
// MachineConfigPools API.
func ReadMachines(ctx context.Context, kube kubernetes.Interface, cfg *rest.Config) (*Machines, error) {
	mcfg, err := mcfgclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	pools, err := mcfg.MachineconfigurationV1().MachineConfigPools().List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	m := &Machines{Pools: pools.Items, Nodes: nodes.Items}
	seen := map[string]bool{}
	for _, n := range nodes.Items {
		for _, key := range []string{mcCurrentConfig, mcDesiredConfig} {
			name := n.Annotations[key]
			if name == "" || seen[name] {
				continue
			}
			seen[name] = true
			mc, err := mcfg.MachineconfigurationV1().MachineConfigs().Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return nil, err
			}
			m.MachineConfigs = append(m.MachineConfigs, *mc)
		}
	}
	return m, nil
}
