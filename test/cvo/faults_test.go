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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/capstan-dev/capstan/internal/cvo"
	"github.com/capstan-dev/capstan/internal/operators"
	"github.com/capstan-dev/capstan/internal/testenv"
	"github.com/capstan-dev/capstan/internal/updateservice/demo"
)

// TestUpdateResumesAfterSIGKILL kills `capstan up` twice in the middle of
// the update to 4.10.26 (after run level 20, then after run level 30):
// each time the update resumes where it was, no operator is updated
// ahead of a lower run level, the release is not retrieved again, and the
// history keeps one entry for the update.
func TestUpdateResumesAfterSIGKILL(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--data-dir", dir, "--port", strconv.Itoa(testenv.FreePort(t)), "--nodes", "0", "--control-plane-nodes", "1",
		"--metrics-address", "", "--release-address", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))}
	up := testenv.StartUp(t, args...)
	up.WaitLine(t, "capstan is up", 3*time.Minute)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
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
	for i, level := range []string{"kube-apiserver", "machine-api"} {
		testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
			return rec.seen(level), fmt.Sprintf("%s has not reported 4.10.26: %v", level, rec.updated())
		})
		if rec.seen("machine-config") {
			t.Fatalf("kill %d came too late: the update is through: %v", i+1, rec.updated())
		}
		up.Kill(t)
		rec.stop()
		early = append(early, rec.outOfOrder()...)
		up = testenv.StartUp(t, args...)
		up.WaitLine(t, "capstan is up", 3*time.Minute)
		rec = recordUpdateOf(t, kube, config, "4.10.26")
	}
	testenv.Eventually(t, 3*time.Minute, func() (bool, string) {
		cv := cvNow()
		h := cv.Status.History
		return len(h) > 0 && h[0].Version == "4.10.26" && h[0].State == configv1.CompletedUpdate, "not completed: " + describeCV(cv)
	})
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
	for _, co := range cos.Items {
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
