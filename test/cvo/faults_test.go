package cvo

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	configv1 "github.com/openshift/api/config/v1"
	configclient "github.com/openshift/client-go/config/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/capstan-dev/capstan/internal/cvo"
	"github.com/capstan-dev/capstan/internal/failpoint"
	"github.com/capstan-dev/capstan/internal/mco"
	"github.com/capstan-dev/capstan/internal/operators"
	"github.com/capstan-dev/capstan/internal/sim"
	"github.com/capstan-dev/capstan/internal/testenv"
	"github.com/capstan-dev/capstan/internal/updateservice/demo"
)

// TestUpdateResumesAfterSIGKILL kills `capstan up` three times in the
// middle of the update to 4.10.26 (after run level 20, after run level
// 30, and in the reboot of the control-plane node that the new machine OS
// rolls): each time the update resumes where it was, no operator is
// updated ahead of a lower run level, the release is not retrieved again,
// the history keeps one entry for the update, and the node is rebooted
// once for its new configuration.
func TestUpdateResumesAfterSIGKILL(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--data-dir", dir, "--port", strconv.Itoa(testenv.FreePort(t)), "--nodes", "0", "--control-plane-nodes", "1",
		"--metrics-address", "", "--console-address", "", "--release-address", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))}
	up := testenv.StartUp(t, args...)
	up.WaitLine(t, "capstan is up", 3*time.Minute)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	cfg := testenv.Kubeconfig(t, kubeconfig)
	ctx := context.Background()
	kube := kubernetes.NewForConfigOrDie(cfg)
	config := configclient.NewForConfigOrDie(cfg)
	cvNow := func() *configv1.ClusterVersion {
		cv, err := config.ConfigV1().ClusterVersions().Get(ctx, cvo.Name, metav1.GetOptions{})
		if err != nil {
			return &configv1.ClusterVersion{}
		}
		return cv
	}
	testenv.Eventually(t, 3*time.Minute, func() (bool, string) {
		cv := cvNow()
		var available bool
		for _, r := range cv.Status.AvailableUpdates {
			available = available || r.Version == "4.10.26"
		}
		h := cv.Status.History
		return available && len(h) == 1 && h[0].State == configv1.CompletedUpdate, "not installed with 4.10.26 available: " + describeCV(cv)
	})
	// Every operator takes a few seconds, so the kills land mid-update.
	for _, op := range demo.Operators {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"3s"}}}`, operators.DelayAnnotation)
		if _, err := kube.CoreV1().Namespaces().Patch(ctx, op.Namespace, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rec := recordUpdateOf(t, kube, config, "4.10.26")
	if out := testenv.CLIOK(t, "adm", "upgrade", "--to", "4.10.26", "--kubeconfig", kubeconfig); out != "Requested update to 4.10.26\n" {
		t.Fatalf("adm upgrade said %q", out)
	}
	var early []string
	// restart keeps what the recorder saw of the process that ended, and
	// starts capstan up again on the same data, with env.
	restart := func(env ...string) {
		rec.stop()
		early = append(early, rec.outOfOrder()...)
		up = testenv.StartUpEnv(t, env, args...)
		up.WaitLine(t, "capstan is up", 3*time.Minute)
		rec = recordUpdateOf(t, kube, config, "4.10.26")
	}
	for i, level := range []string{"kube-apiserver", "machine-api"} {
		testenv.Eventually(t, 3*time.Minute, func() (bool, string) {
			return rec.seen(level), fmt.Sprintf("%s has not reported 4.10.26: %v", level, rec.updated())
		})
		if rec.seen("machine-config") {
			t.Fatalf("kill %d came too late: the update is through: %v", i+1, rec.updated())
		}
		up.Kill(t)
		if i == 0 {
			restart()
			continue
		}
		// The third kill lands in the reboot of the control-plane node,
		// the MCO's part of the update: the start after the second kill
		// is armed to die there itself (the API is down while the only
		// master reboots, so a test polling for the reboot would race it).
		restart(failpoint.Env + "=" + failpoint.Format(failpoint.Arm{Name: failpoint.MCDMidReboot, Hit: 1}))
	}
	up.WaitExit(t, 3*time.Minute)
	if !strings.Contains(up.Output(), failpoint.MCDMidReboot+" reached") {
		t.Fatalf("capstan up ended without reaching %s:\n%s", failpoint.MCDMidReboot, up.Output())
	}
	// machine-config has not reported yet, and the node finishes its
	// update in one more boot, not two.
	master := func() *corev1.Node {
		nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "node-role.kubernetes.io/master"})
		if err != nil || len(nodes.Items) != 1 {
			t.Fatalf("the control-plane node: %v (%d nodes)", err, len(nodes.Items))
		}
		return &nodes.Items[0]
	}
	if rec.seen("machine-config") {
		t.Errorf("machine-config reported 4.10.26 while its node was rebooting")
	}
	restart()
	testenv.Eventually(t, 3*time.Minute, func() (bool, string) {
		cv := cvNow()
		h := cv.Status.History
		return len(h) > 0 && h[0].Version == "4.10.26" && h[0].State == configv1.CompletedUpdate, "not completed: " + describeCV(cv)
	})
	// machine-config reported, so the node had finished its update, in
	// the boot the kill left it in.
	if n := master(); n.Annotations[mco.CurrentConfigAnnotation] != n.Annotations[mco.DesiredConfigAnnotation] ||
		n.Annotations[mco.StateAnnotation] != mco.StateDone || n.Spec.Unschedulable {
		t.Errorf("%s has not finished its update: unschedulable %v, annotations %v", n.Name, n.Spec.Unschedulable, n.Annotations)
	}
	if n := master(); sim.Boot(n) != 1 {
		t.Errorf("%s booted %d times for its new configuration, want once", n.Name, sim.Boot(n))
	}
	early = append(early, rec.outOfOrder()...)
	if len(early) > 0 {
		t.Errorf("operators updated ahead of a lower run level across the kills: %v", early)
	}
	cv := cvNow()
	if h := cv.Status.History; len(h) != 2 || h[1].Version != "4.10.22" || !h[0].Verified {
		t.Errorf("history after two kills: %s", describeCV(cv))
	}
	cos, err := config.ConfigV1().ClusterOperators().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inRelease := map[string]bool{cvo.Name: true}
	for _, op := range demo.Operators {
		inRelease[op.Name] = true
	}
	for _, co := range cos.Items {
		if !inRelease[co.Name] {
			continue // etcd's operator is capstan's own, not the release's
		}
		if len(co.Status.Versions) == 0 || co.Status.Versions[0].Version != "4.10.26" {
			t.Errorf("cluster operator %s is at %v", co.Name, co.Status.Versions)
		}
	}
	jobs, err := kube.BatchV1().Jobs(cvo.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var retrievals []string
	for _, j := range jobs.Items {
		if strings.HasPrefix(j.Name, "version-4.10.26-") {
			retrievals = append(retrievals, j.Name)
		}
	}
	if len(retrievals) != 1 {
		t.Errorf("the release was retrieved %d times (%v), want once: the restarts should resume the accepted release", len(retrievals), retrievals)
	}
	up.Stop(t)
}
