package mco

import (
	"strings"
	"testing"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	mcfglisters "github.com/openshift/client-go/machineconfiguration/listers/machineconfiguration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// TestOperatorWaitsForRequiredPoolsOnly: machine-config is at a version
// once the master pool runs that release's configuration on every node;
// the worker pool is not waited for, but a degraded one makes the
// operator not upgradeable, and a degraded master pool degrades it.
func TestOperatorWaitsForRequiredPoolsOnly(t *testing.T) {
	pools := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	configs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	c := &Controller{pools: mcfglisters.NewMachineConfigPoolLister(pools), configs: mcfglisters.NewMachineConfigLister(configs)}
	if s := c.Operator("4.10.26"); s.Done {
		t.Fatal("done before the controllers started")
	}
	c.synced.Store(true)
	for _, mc := range []struct{ name, version string }{{"rendered-master-a", "4.10.22"}, {"rendered-master-b", "4.10.26"}, {"rendered-worker-b", "4.10.26"}} {
		_ = configs.Add(&mcfgv1.MachineConfig{ObjectMeta: metav1.ObjectMeta{Name: mc.name, Annotations: map[string]string{ReleaseImageVersionAnnotation: mc.version}}})
	}
	pool := func(name, target, current string, updated, degraded bool) *mcfgv1.MachineConfigPool {
		p := &mcfgv1.MachineConfigPool{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
		if name == "master" {
			p.Labels[RequiredForUpgradeLabel] = ""
		}
		p.Spec.Configuration.Name = target
		p.Status.Configuration.Name = current
		p.Status.MachineCount, p.Status.ReadyMachineCount, p.Status.UpdatedMachineCount = 3, 2, 1
		status := func(b bool) corev1.ConditionStatus {
			if b {
				return corev1.ConditionTrue
			}
			return corev1.ConditionFalse
		}
		p.Status.Conditions = []mcfgv1.MachineConfigPoolCondition{
			{Type: mcfgv1.MachineConfigPoolUpdated, Status: status(updated)},
			{Type: mcfgv1.MachineConfigPoolDegraded, Status: status(degraded), Message: "Node master-1 is reporting: \"disk full\""},
		}
		return p
	}
	set := func(ps ...*mcfgv1.MachineConfigPool) {
		for _, o := range pools.List() {
			_ = pools.Delete(o)
		}
		for _, p := range ps {
			_ = pools.Add(p)
		}
	}

	// The masters still run 4.10.22's configuration.
	set(pool("master", "rendered-master-a", "rendered-master-a", true, false), pool("worker", "rendered-worker-b", "rendered-worker-b", true, false))
	if s := c.Operator("4.10.26"); s.Done || !strings.Contains(s.Progressing, "MachineConfigPool master is not yet targeting the configuration of 4.10.26") {
		t.Errorf("masters on the old release: %+v", s)
	}
	// Targeted, rolling.
	set(pool("master", "rendered-master-b", "rendered-master-a", false, false), pool("worker", "rendered-worker-b", "rendered-worker-b", true, false))
	s := c.Operator("4.10.26")
	if s.Done || s.Progressing != "Working towards 4.10.26: MachineConfigPool master is not ready, retrying. Status: (pool degraded: false total: 3, ready 2, updated: 1, unavailable: 0, reason: )" {
		t.Errorf("masters rolling: %+v", s)
	}
	// The masters are done; the workers still roll: done.
	set(pool("master", "rendered-master-b", "rendered-master-b", true, false), pool("worker", "rendered-worker-b", "rendered-worker-a", false, false))
	if s := c.Operator("4.10.26"); !s.Done || s.DegradedReason != "" || s.NotUpgradeableReason != "" {
		t.Errorf("masters done, workers rolling: %+v", s)
	}
	// A degraded worker pool: still done, but not upgradeable.
	set(pool("master", "rendered-master-b", "rendered-master-b", true, false), pool("worker", "rendered-worker-b", "rendered-worker-a", false, true))
	if s := c.Operator("4.10.26"); !s.Done || s.NotUpgradeableReason != "DegradedPool" || s.DegradedReason != "" {
		t.Errorf("a degraded worker pool: %+v", s)
	}
	// A degraded master pool holds the version and degrades the operator.
	set(pool("master", "rendered-master-b", "rendered-master-a", false, true), pool("worker", "rendered-worker-b", "rendered-worker-b", true, false))
	s = c.Operator("4.10.26")
	if s.Done || s.DegradedReason != "RequiredPoolsFailed" || !strings.HasPrefix(s.DegradedMessage, "Unable to apply 4.10.26: error during syncRequiredMachineConfigPools: MachineConfigPool master is not ready") ||
		!strings.Contains(s.DegradedMessage, `reason: Node master-1 is reporting: "disk full"`) || s.NotUpgradeableReason != "DegradedPool" {
		t.Errorf("a degraded master pool: %+v", s)
	}
}
