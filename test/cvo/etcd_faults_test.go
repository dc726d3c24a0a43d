package cvo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	configv1 "github.com/openshift/api/config/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capstan-dev/capstan/internal/etcd"
	"github.com/capstan-dev/capstan/internal/sim"
	"github.com/capstan-dev/capstan/internal/testenv"
)

// deadMasterRightAfterUp is the dead-master flow of OpenShift's
// documentation, started the moment capstan up says it is up: a master
// stopped, then its Machine deleted. etcd had its three voting members
// then, the bootstrap member gone, so the API keeps serving writes; the
// quorum guard refuses a second master's drain while the first is down;
// the replacement ends with three healthy voters.
func (c *etcdCluster) deadMasterRightAfterUp(t *testing.T) {
	ctx := context.Background()
	names, _ := c.masters(t)
	if len(names) != 3 {
		t.Fatalf("control-plane machines %v at up, want 3", names)
	}
	dead := names[0]
	if err := sim.StopNode(ctx, c.kube, c.nodeOf(t, dead)); err != nil {
		t.Fatal(err)
	}
	t.Logf("stopped %s %s after capstan said it was up", dead, time.Since(c.upAt).Round(10*time.Millisecond))
	// What etcd itself says: the three masters' members vote, the
	// bootstrap member left before up was said.
	voting, _, _ := c.etcdStatus(t)
	if len(voting) != 3 || slices.Contains(voting, etcd.BootstrapName) || !slices.Equal(voting, names) {
		t.Fatalf("voting members %v when capstan said it was up, want the three masters' %v", voting, names)
	}
	w := startWriter(t, c.kube, "writes-up")
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		co, err := c.config.ConfigV1().ClusterOperators().Get(ctx, etcd.ClusterOperatorName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		d := condition(co.Status.Conditions, configv1.OperatorDegraded)
		return d.Status == configv1.ConditionTrue && strings.Contains(d.Message, dead+" is unhealthy"), fmt.Sprintf("Degraded %s %q", d.Status, d.Message)
	})
	c.guardRefusesDrain(t, dead, names[1])
	c.deleteMachine(t, dead)
	after := c.waitSettled(t, 4*time.Minute)
	acked, failed, longest := w.finish(t)
	t.Logf("replaced the dead %s; %d writes acknowledged, %d failed, longest outage %s", dead, acked, failed, longest.Round(10*time.Millisecond))
	if longest > maxOutage {
		t.Errorf("the API refused writes for %s, longer than a leader election", longest)
	}
	if slices.Contains(after, dead) {
		t.Errorf("the dead machine is still a member: %v", after)
	}
	if voting, healthy, _ := c.etcdStatus(t); len(voting) != 3 || healthy != 3 {
		t.Errorf("after the replacement etcd has voting members %v, %d healthy, want 3 healthy", voting, healthy)
	}
	// The guard follows the members: one ready pod per master again.
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		pdb, err := c.kube.PolicyV1().PodDisruptionBudgets(etcd.QuorumGuardNamespace).Get(ctx, etcd.QuorumGuardName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return pdb.Status.CurrentHealthy == 3 && pdb.Status.DisruptionsAllowed == 1,
			fmt.Sprintf("the quorum guard's budget: %d healthy, %d disruptions allowed", pdb.Status.CurrentHealthy, pdb.Status.DisruptionsAllowed)
	})
	c.checkControlPlaneMachineSet(t)
}

// guardRefusesDrain checks that, a master being down, the quorum guard's
// budget refuses the eviction a drain of master other would begin with.
func (c *etcdCluster) guardRefusesDrain(t *testing.T, dead, other string) {
	t.Helper()
	ctx := context.Background()
	ns := etcd.QuorumGuardNamespace
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		pdb, err := c.kube.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, etcd.QuorumGuardName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		// Two healthy of three: the down master's pod counted out. (Zero
		// allowed with one pod still starting, the down master's counted
		// in, would turn into one allowed once that pod is ready.)
		return pdb.Status.DisruptionsAllowed == 0 && pdb.Status.ExpectedPods == 3 && pdb.Status.CurrentHealthy == 2 &&
				!c.guardPodReady(t, dead) && c.guardPodReady(t, other),
			fmt.Sprintf("the quorum guard's budget: %d of %d healthy, %d disruptions allowed", pdb.Status.CurrentHealthy, pdb.Status.ExpectedPods, pdb.Status.DisruptionsAllowed)
	})
	pods, err := c.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: etcd.QuorumGuardLabel + "=" + etcd.QuorumGuardName,
		FieldSelector: "spec.nodeName=" + c.nodeOf(t, other)})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("the quorum guard pod of %s: %v (%d pods)", other, err, len(pods.Items))
	}
	pod := pods.Items[0]
	if !podIsReady(&pod) {
		t.Fatalf("the quorum guard pod %s of the healthy master %s is not ready", pod.Name, other)
	}
	err = c.kube.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: ns}})
	if !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "disruption budget") {
		t.Errorf("evicting the quorum guard pod of a second master while one is down: %v, want it refused by the disruption budget", err)
	}
}

// guardPodReady says whether the quorum guard pod on a master's node is
// ready.
func (c *etcdCluster) guardPodReady(t *testing.T, master string) bool {
	t.Helper()
	pods, err := c.kube.CoreV1().Pods(etcd.QuorumGuardNamespace).List(context.Background(), metav1.ListOptions{
		LabelSelector: etcd.QuorumGuardLabel + "=" + etcd.QuorumGuardName, FieldSelector: "spec.nodeName=" + c.nodeOf(t, master)})
	return err == nil && len(pods.Items) == 1 && podIsReady(&pods.Items[0])
}

func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// restoreAfterQuorumLoss saves a snapshot, loses the quorum for good
// (two masters' member data deleted while capstan is stopped) and brings
// the cluster back from the snapshot, as OpenShift's documentation does:
// the start without a quorum says what to do, the restore makes one
// member, the operator the other two; what was written before the
// snapshot is there, what came after is not.
func (c *etcdCluster) restoreAfterQuorumLoss(t *testing.T) {
	ctx := context.Background()
	write := func(name string) {
		t.Helper()
		if _, err := c.kube.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("writing %s: %v", name, err)
		}
	}
	masters := c.settledMasters(t)
	write("before-the-snapshot")
	snap := filepath.Join(t.TempDir(), "backup", "snapshot.db")
	if out := capstanOK(t, "etcd", "snapshot", "save", snap, "--data-dir", c.dir); !strings.Contains(out, "Snapshot saved at "+snap) ||
		!strings.Contains(out, "HASH") {
		t.Errorf("capstan etcd snapshot save said %q", out)
	}
	if out := capstanOK(t, "etcd", "snapshot", "status", snap); !strings.Contains(out, "TOTAL KEYS") {
		t.Errorf("capstan etcd snapshot status said %q", out)
	}
	write("after-the-snapshot")
	c.up.Stop(t)
	specs, err := etcd.ReadRegistry(c.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if s.Name == masters[1] || s.Name == masters[2] {
			if err := os.RemoveAll(filepath.Join(c.dir, s.Dir)); err != nil {
				t.Fatal(err)
			}
		}
	}
	code, out := testenv.RunCapstan(t, append([]string{"up"}, c.args...)...)
	if code == 0 || !strings.Contains(out, "etcd cannot form a quorum: the data of 2 of its 3 voting members is gone") ||
		!strings.Contains(out, "capstan etcd restore --from FILE") {
		t.Fatalf("capstan up with two members' data lost exited %d, want it to fail naming the restore:\n%s", code, out)
	}
	out = capstanOK(t, "etcd", "restore", "--from", snap, "--data-dir", c.dir)
	if !strings.Contains(out, "Restored etcd member "+masters[0]) {
		t.Errorf("capstan etcd restore said %q", out)
	}
	c.up = testenv.StartUp(c.parent, c.args...)
	c.up.WaitLine(t, "capstan is up", 4*time.Minute)
	if after := c.waitSettled(t, 3*time.Minute); !slices.Equal(after, masters) {
		t.Errorf("machines %v after the restore, want %v", after, masters)
	}
	if _, err := c.kube.CoreV1().ConfigMaps("default").Get(ctx, "before-the-snapshot", metav1.GetOptions{}); err != nil {
		t.Errorf("a write from before the snapshot after the restore: %v", err)
	}
	if _, err := c.kube.CoreV1().ConfigMaps("default").Get(ctx, "after-the-snapshot", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a write from after the snapshot after the restore: %v, want NotFound", err)
	}
	write("after-the-restore")
	c.up.Stop(t)
}
