package cvo

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	configv1 "github.com/openshift/api/config/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/capstan-dev/capstan/internal/cvo"
	"github.com/capstan-dev/capstan/internal/operators"
	"github.com/capstan-dev/capstan/internal/release"
	"github.com/capstan-dev/capstan/internal/testenv"
	"github.com/capstan-dev/capstan/internal/updateservice/demo"
)

var releaseNotes = schema.GroupVersionResource{Group: "demo.capstan.dev", Version: "v1", Resource: "releasenotes"}

// TestUpdates walks the chapter's update workflow on the live cluster,
// from the installed 4.10.22, one step after another (each leaves the
// cluster where the next begins): refused releases, the patch update to
// 4.10.26 with every step observed in order, drift put back, a forced
// unsigned update, an operator that degrades and one that is slow, a
// manifest that cannot be applied, a minor update held by an operator's
// Upgradeable=False and then let through, and a refused rollback.
func TestUpdates(t *testing.T) {
	ctx := context.Background()
	for _, step := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"an unverified release is refused, and --clear goes back", func(t *testing.T) {
			unsigned := publishRelease(t, "4.10.27", nil)
			out := capstanOK(t, "adm", "upgrade", "--to-image", unsigned, "--allow-explicit-upgrade", "--kubeconfig", env.Kubeconfig)
			if !strings.Contains(out, "Requested update to release image "+unsigned) {
				t.Errorf("adm upgrade --to-image said:\n%s", out)
			}
			cv := waitCV(t, time.Minute, "the unsigned release was not refused", func(cv *configv1.ClusterVersion) bool {
				ra, f := condition(cv.Status.Conditions, cvo.ReleaseAccepted), condition(cv.Status.Conditions, cvo.Failing)
				return ra.Status == configv1.ConditionFalse && ra.Reason == "RetrievePayload" && f.Reason == "ImageVerificationFailed"
			})
			ra := condition(cv.Status.Conditions, cvo.ReleaseAccepted)
			if !strings.HasPrefix(ra.Message, `Retrieving payload failed version="" image="`+unsigned+`" failure=The update cannot be verified: `) ||
				!strings.Contains(ra.Message, "no signatures found") {
				t.Errorf("ReleaseAccepted message %q", ra.Message)
			}
			if p := condition(cv.Status.Conditions, configv1.OperatorProgressing); p.Message != "Unable to apply "+unsigned+": the image may not be safe to use" {
				t.Errorf("Progressing %q", p.Message)
			}
			if cv.Status.Desired.Version != "4.10.22" || len(cv.Status.History) != 1 {
				t.Errorf("a refused release changed the desired release or the history: %s", describeCV(cv))
			}
			out = capstanOK(t, "adm", "upgrade", "--kubeconfig", env.Kubeconfig)
			if !strings.Contains(out, "Failing=True:\n\n  Reason: ImageVerificationFailed\n  Message: The update cannot be verified: ") ||
				!strings.Contains(out, "ReleaseAccepted=False\n\n  Reason: RetrievePayload\n") {
				t.Errorf("adm upgrade while refused:\n%s", out)
			}
			if out := capstanOK(t, "adm", "upgrade", "--clear", "--kubeconfig", env.Kubeconfig); out != "Cancelled requested upgrade to "+unsigned+"\n" {
				t.Errorf("--clear said %q", out)
			}
			waitCV(t, time.Minute, "--clear did not go back to 4.10.22", func(cv *configv1.ClusterVersion) bool {
				return condition(cv.Status.Conditions, cvo.ReleaseAccepted).Status == configv1.ConditionTrue &&
					condition(cv.Status.Conditions, cvo.Failing).Status == configv1.ConditionFalse &&
					condition(cv.Status.Conditions, configv1.OperatorProgressing).Message == "Cluster version is 4.10.22"
			})
		}},
		{"a payload that names another version is refused", func(t *testing.T) {
			bad := publishRelease(t, "4.10.28", func(p *release.Payload) { p.ImageReferences.Name = "4.10.99" })
			capstanOK(t, "adm", "upgrade", "--to-image", bad, "--allow-explicit-upgrade", "--force", "--kubeconfig", env.Kubeconfig)
			cv := waitCV(t, time.Minute, "the inconsistent payload was not refused", func(cv *configv1.ClusterVersion) bool {
				return condition(cv.Status.Conditions, cvo.ReleaseAccepted).Reason == "LoadPayload"
			})
			ra := condition(cv.Status.Conditions, cvo.ReleaseAccepted)
			if ra.Status != configv1.ConditionFalse || !strings.Contains(ra.Message, "version from image-references (4.10.99) differs from release-metadata (4.10.28)") {
				t.Errorf("ReleaseAccepted %s %q", ra.Status, ra.Message)
			}
			if f := condition(cv.Status.Conditions, cvo.Failing); f.Status != configv1.ConditionTrue || f.Reason != "UpdatePayloadIntegrity" {
				t.Errorf("Failing %s %s %q", f.Status, f.Reason, f.Message)
			}
			// A version that is not the image's.
			patchClusterVersion(t, `{"spec":{"desiredUpdate":{"version":"4.10.26","image":"`+demoImage(t, "4.10.25")+`"}}}`)
			cv = waitCV(t, time.Minute, "the mismatched version was not refused", func(cv *configv1.ClusterVersion) bool {
				return condition(cv.Status.Conditions, cvo.ReleaseAccepted).Reason == "VerifyPayloadVersion"
			})
			if ra := condition(cv.Status.Conditions, cvo.ReleaseAccepted); !strings.HasSuffix(ra.Message, "failure=release image version 4.10.25 does not match the expected upstream version 4.10.26") {
				t.Errorf("ReleaseAccepted %q", ra.Message)
			}
			capstanOK(t, "adm", "upgrade", "--clear", "--kubeconfig", env.Kubeconfig)
			waitCompleted(t, "4.10.22")
		}},
		{"the patch update to 4.10.26, step by step", func(t *testing.T) { patchUpdate(t) }},
		{"drift is put back while reconciling", func(t *testing.T) {
			if _, err := env.Dynamic.Resource(releaseNotes).Patch(ctx, "cluster", types.MergePatchType, []byte(`{"spec":{"version":"edited by hand"}}`), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := env.Client.AppsV1().Deployments("openshift-console-operator").Patch(ctx, "console-operator", types.MergePatchType, []byte(`{"spec":{"replicas":3}}`), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, time.Minute, func() (bool, string) {
				note, err := env.Dynamic.Resource(releaseNotes).Get(ctx, "cluster", metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				d, err := env.Client.AppsV1().Deployments("openshift-console-operator").Get(ctx, "console-operator", metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				v := note.Object["spec"].(map[string]any)["version"]
				return v == "4.10.26" && *d.Spec.Replicas == 1, fmt.Sprintf("ReleaseNote version %v, console-operator replicas %d", v, *d.Spec.Replicas)
			})
		}},
		{"a forced unsigned update records that it is not verified", func(t *testing.T) {
			unsigned := publishRelease(t, "4.10.27", nil)
			out := capstanOK(t, "adm", "upgrade", "--to-image", unsigned, "--allow-explicit-upgrade", "--force", "--kubeconfig", env.Kubeconfig)
			if !strings.Contains(out, cvo.ForceWarning) {
				t.Errorf("--force did not warn:\n%s", out)
			}
			cv := waitCompleted(t, "4.10.27")
			h := cv.Status.History[0]
			if h.Verified || !strings.Contains(h.AcceptedRisks, `Target release version="" image="`+unsigned+`" cannot be verified, but continuing anyway because the update was forced: `) {
				t.Errorf("history[0] verified=%v acceptedRisks %q", h.Verified, h.AcceptedRisks)
			}
		}},
		{"a degraded operator holds its run level, a slow one is reported", func(t *testing.T) {
			annotateNamespace(t, "openshift-dns-operator", operators.DegradedAnnotation, "CoreDNSCrashLooping: coredns pods are crash looping")
			annotateNamespace(t, "openshift-dns-operator", operators.StuckAnnotation, "true")
			next := publishRelease(t, "4.10.29", nil)
			capstanOK(t, "adm", "upgrade", "--to-image", next, "--allow-explicit-upgrade", "--force", "--kubeconfig", env.Kubeconfig)
			cv := waitCV(t, 2*time.Minute, "the update did not wait on the degraded dns", func(cv *configv1.ClusterVersion) bool {
				return strings.HasSuffix(condition(cv.Status.Conditions, configv1.OperatorProgressing).Message, ", waiting up to 40 minutes on dns")
			})
			if f := condition(cv.Status.Conditions, cvo.Failing); f.Status != configv1.ConditionFalse {
				t.Errorf("a degraded operator failed the update before 40 minutes: %s %q", f.Reason, f.Message)
			}
			checkNotUpdated(t, "4.10.29", "machine-config")
			if out := capstanOK(t, "adm", "upgrade", "status", "--kubeconfig", env.Kubeconfig); !strings.Contains(out, "Available but degraded") {
				t.Errorf("adm upgrade status does not show the degraded operator:\n%s", out)
			}
			// Degraded no more, but still not reporting the new version.
			annotateNamespace(t, "openshift-dns-operator", operators.DegradedAnnotation, "")
			cv = waitCV(t, 2*slowOperatorAfter+time.Minute, "the slow dns was not reported", func(cv *configv1.ClusterVersion) bool {
				return condition(cv.Status.Conditions, cvo.Failing).Reason == "SlowClusterOperator"
			})
			f := condition(cv.Status.Conditions, cvo.Failing)
			if f.Status != configv1.ConditionUnknown || f.Message != "waiting on dns over 20s which is longer than expected" {
				t.Errorf("Failing %s %q", f.Status, f.Message)
			}
			checkNotUpdated(t, "4.10.29", "machine-config")
			annotateNamespace(t, "openshift-dns-operator", operators.StuckAnnotation, "")
			waitCompleted(t, "4.10.29")
		}},
		{"a manifest that cannot be applied holds the update at its run level", func(t *testing.T) {
			broken := publishRelease(t, "4.10.30", func(p *release.Payload) {
				editFile(p, "0000_50_console-operator_05_deployment.yaml", "replicas: 1", "replicas: -1")
			})
			capstanOK(t, "adm", "upgrade", "--to-image", broken, "--allow-explicit-upgrade", "--force", "--kubeconfig", env.Kubeconfig)
			cv := waitCV(t, 2*time.Minute, "the invalid manifest was not reported", func(cv *configv1.ClusterVersion) bool {
				return condition(cv.Status.Conditions, cvo.Failing).Reason == "UpdatePayloadResourceInvalid"
			})
			f := condition(cv.Status.Conditions, cvo.Failing)
			if f.Status != configv1.ConditionTrue || !strings.Contains(f.Message, `Could not update deployment "openshift-console-operator/console-operator"`) {
				t.Errorf("Failing %s %q", f.Status, f.Message)
			}
			if p := condition(cv.Status.Conditions, configv1.OperatorProgressing); p.Message != "Unable to apply 4.10.30: some cluster configuration is invalid" {
				t.Errorf("Progressing %q", p.Message)
			}
			checkNotUpdated(t, "4.10.30", "dns", "machine-config")
		}},
		{"a minor update is held by Upgradeable=False, then let through", func(t *testing.T) {
			annotateNamespace(t, "openshift-ingress-operator", operators.NotUpgradeableAnnotation, "AdminAckRequired: the ingress needs an administrator's acknowledgement before 4.11")
			waitCV(t, time.Minute, "Upgradeable never went False", func(cv *configv1.ClusterVersion) bool {
				return condition(cv.Status.Conditions, configv1.OperatorUpgradeable).Reason == "AdminAckRequired"
			})
			// A new target also gets the cluster out of the broken 4.10.30.
			minor := demoImage(t, "4.11.0")
			capstanOK(t, "adm", "upgrade", "--to-image", minor, "--allow-explicit-upgrade", "--allow-upgrade-with-warnings", "--kubeconfig", env.Kubeconfig)
			cv := waitCV(t, time.Minute, "the minor update was not held", func(cv *configv1.ClusterVersion) bool {
				return condition(cv.Status.Conditions, cvo.ReleaseAccepted).Reason == "PreconditionChecks"
			})
			ra := condition(cv.Status.Conditions, cvo.ReleaseAccepted)
			if ra.Status != configv1.ConditionFalse || !strings.Contains(ra.Message, `Precondition "ClusterVersionUpgradeable" failed because of "AdminAckRequired": Cluster operator ingress should not be upgraded between minor or major versions: the ingress needs`) {
				t.Errorf("ReleaseAccepted %s %q", ra.Status, ra.Message)
			}
			if f := condition(cv.Status.Conditions, cvo.Failing); f.Reason != "UpgradePreconditionCheckFailed" {
				t.Errorf("Failing %s %q", f.Reason, f.Message)
			}
			annotateNamespace(t, "openshift-ingress-operator", operators.NotUpgradeableAnnotation, "")
			cv = waitCompleted(t, "4.11.0")
			if h := cv.Status.History; len(h) < 2 || h[1].Version != "4.10.30" || h[1].State != configv1.PartialUpdate || h[1].CompletionTime == nil {
				t.Errorf("the abandoned 4.10.30 is not a closed Partial entry: %s", describeCV(cv))
			}
		}},
		{"a rollback is refused", func(t *testing.T) {
			capstanOK(t, "adm", "upgrade", "--to-image", demoImage(t, "4.10.26"), "--allow-explicit-upgrade", "--kubeconfig", env.Kubeconfig)
			cv := waitCV(t, time.Minute, "the rollback was not refused", func(cv *configv1.ClusterVersion) bool {
				return condition(cv.Status.Conditions, cvo.ReleaseAccepted).Reason == "PreconditionChecks"
			})
			if ra := condition(cv.Status.Conditions, cvo.ReleaseAccepted); !strings.Contains(ra.Message, `Precondition "ClusterVersionRollback" failed because of "LowDesiredVersion": 4.10.26 is less than the current target 4.11.0`) {
				t.Errorf("ReleaseAccepted %q", ra.Message)
			}
			capstanOK(t, "adm", "upgrade", "--clear", "--kubeconfig", env.Kubeconfig)
			waitCompleted(t, "4.11.0")
		}},
	} {
		if !t.Run(step.name, step.run) {
			return
		}
	}
}

// checkNotUpdated fails if any of the operators reports version: the
// update must not have got past their run levels.
func checkNotUpdated(t *testing.T, version string, names ...string) {
	t.Helper()
	for _, n := range names {
		co, err := configClient(t).ConfigV1().ClusterOperators().Get(context.Background(), n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range co.Status.Versions {
			if v.Version == version {
				t.Errorf("cluster operator %s (run level %s) already reports %s", n, runLevels()[n], version)
			}
		}
	}
}

// patchUpdate is the chapter's update: 4.10.22 to 4.10.26, with an
// operator holding minor updates (which a patch update ignores) and one
// slowed down so the update can be watched half way.
func patchUpdate(t *testing.T) {
	ctx := context.Background()
	annotateNamespace(t, "openshift-ingress-operator", operators.NotUpgradeableAnnotation, "AdminAckRequired: the ingress needs an administrator's acknowledgement before 4.11")
	waitCV(t, time.Minute, "Upgradeable never went False", func(cv *configv1.ClusterVersion) bool {
		return condition(cv.Status.Conditions, configv1.OperatorUpgradeable).Status == configv1.ConditionFalse
	})
	annotateNamespace(t, "openshift-console-operator", operators.DelayAnnotation, "4s")
	rec := recordUpdate(t, "4.10.26")
	if out := capstanOK(t, "adm", "upgrade", "--to", "4.10.26", "--kubeconfig", env.Kubeconfig); out != "Requested update to 4.10.26\n" {
		t.Errorf("adm upgrade --to 4.10.26 said %q", out)
	}
	waitCV(t, 2*time.Minute, "the update never waited on the console", func(cv *configv1.ClusterVersion) bool {
		return strings.Contains(condition(cv.Status.Conditions, configv1.OperatorProgressing).Message, "waiting on console")
	})
	if out := capstanOK(t, "adm", "upgrade", "--kubeconfig", env.Kubeconfig); !strings.Contains(out, "info: An upgrade is in progress. Working towards 4.10.26: ") {
		t.Errorf("adm upgrade during the update:\n%s", out)
	}
	out := capstanOK(t, "adm", "upgrade", "status", "--details=operators", "--kubeconfig", env.Kubeconfig)
	for _, want := range []string{"= Control Plane =\nAssessment:      Progressing\nTarget Version:  4.10.26 (from 4.10.22)\nUpdating:        console\nCompletion:      ",
		"Updating Cluster Operators\nNAME      SINCE   REASON      MESSAGE\nconsole   ", "= Update Health =\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("adm upgrade status during the update:\n%s\nlacks:\n%s", out, want)
		}
	}
	cv := waitCompleted(t, "4.10.26")
	// 1. The steps, in order, as the CVO's events (sent on their own, so
	// the last may follow the status that says the update is complete).
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		got, want := rec.reasons(), []string{"RetrievePayload", "LoadPayload", "PreconditionsPassed", "PayloadLoaded", "UpgradeComplete"}
		return inOrder(got, want), fmt.Sprintf("events %v, want in order %v", got, want)
	})
	rec.stop()
	// 2. ReleaseAccepted while retrieving, then the release desired with
	// a Partial, verified history entry, progress reported, completion.
	var retrieving, partial, working bool
	for _, s := range rec.snapshots() {
		ra := condition(s.Status.Conditions, cvo.ReleaseAccepted)
		retrieving = retrieving || (ra.Status == configv1.ConditionUnknown && ra.Reason == "RetrievePayload" && strings.Contains(ra.Message, `version="4.10.26"`))
		if h := s.Status.History; len(h) > 0 && h[0].Version == "4.10.26" && h[0].State == configv1.PartialUpdate {
			partial = partial || (retrieving && h[0].Verified && s.Status.Desired.Version == "4.10.26")
		}
		p := condition(s.Status.Conditions, configv1.OperatorProgressing)
		working = working || (p.Status == configv1.ConditionTrue && strings.HasPrefix(p.Message, "Working towards 4.10.26: ") && strings.Contains(p.Message, "% complete)"))
	}
	if !retrieving || !partial || !working {
		t.Errorf("not seen in order: retrieving %v, a verified Partial entry after it %v, progress %v", retrieving, partial, working)
	}
	// 3. The Job that prepared the release ran to completion on a node.
	jobs, err := env.Client.BatchV1().Jobs(cvo.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var job *batchv1.Job
	for i := range jobs.Items {
		if strings.HasPrefix(jobs.Items[i].Name, "version-4.10.26-") {
			job = &jobs.Items[i]
		}
	}
	if job == nil || job.Status.Succeeded != 1 {
		t.Errorf("no completed Job version-4.10.26-*: %+v", jobs.Items)
	}
	// 4. Run levels in order, the CVO's own first, every operator updated.
	order := rec.updated()
	if early := rec.outOfOrder(); len(early) > 0 {
		t.Errorf("operators updated ahead of a lower run level: %v (order %v)", early, order)
	}
	if len(order) != len(demo.Operators)+1 || order[0] != cvo.Name {
		t.Errorf("operators updated %v, want the CVO first and all %d", order, len(demo.Operators)+1)
	}
	// 5. The history and the conditions of a completed update.
	h := cv.Status.History
	if len(h) != 2 || h[0].Version != "4.10.26" || !h[0].Verified || h[0].CompletionTime == nil || h[1].Version != "4.10.22" || h[1].State != configv1.CompletedUpdate {
		t.Errorf("history: %s", describeCV(cv))
	}
	if a := condition(cv.Status.Conditions, configv1.OperatorAvailable); a.Status != configv1.ConditionTrue || a.Message != "Done applying 4.10.26" {
		t.Errorf("Available %s %q", a.Status, a.Message)
	}
	// A CRD of an early run level came before its custom resource.
	note, err := env.Dynamic.Resource(releaseNotes).Get(ctx, "cluster", metav1.GetOptions{})
	if err != nil || note.Object["spec"].(map[string]any)["version"] != "4.10.26" {
		t.Errorf("ReleaseNote cluster: %v %v", err, note)
	}
	d, err := env.Client.AppsV1().Deployments(cvo.Namespace).Get(ctx, cvo.DeploymentName, metav1.GetOptions{})
	if err != nil || !runsVersion(d, "4.10.26") {
		t.Errorf("the CVO's Deployment does not run 4.10.26: %v", err)
	}
	if out := capstanOK(t, "adm", "upgrade", "status", "--kubeconfig", env.Kubeconfig); out != "The cluster is not updating.\n" {
		t.Errorf("adm upgrade status after the update: %q", out)
	}
}

func runsVersion(d *appsv1.Deployment, v string) bool {
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == cvo.VersionEnv && e.Value == v {
				return true
			}
		}
	}
	return false
}
