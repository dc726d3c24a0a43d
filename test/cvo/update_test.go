package cvo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	configv1 "github.com/openshift/api/config/v1"
	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	mcfgclient "github.com/openshift/client-go/machineconfiguration/clientset/versioned"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/capstan-dev/capstan/internal/cvo"
	"github.com/capstan-dev/capstan/internal/mco"
	"github.com/capstan-dev/capstan/internal/operators"
	"github.com/capstan-dev/capstan/internal/release"
	"github.com/capstan-dev/capstan/internal/release/signature"
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
// Upgradeable=False and then let through, a refused rollback, and the
// verification bypasses of the review (keys from the cluster's ConfigMap,
// a layout named after a signed digest, content that does not hash to it).
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
			capstanOK(t, "adm", "upgrade", "--clear", "--kubeconfig", env.Kubeconfig)
			waitCompleted(t, "4.10.22")
			// A manifest that does not parse: refused before the release
			// is taken on, not while it is applied.
			corrupt := publishRelease(t, "4.10.29", func(p *release.Payload) {
				p.Manifests["0000_50_console-operator_99_broken.yaml"] = []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: [not, a, map\n")
			})
			capstanOK(t, "adm", "upgrade", "--to-image", corrupt, "--allow-explicit-upgrade", "--force", "--kubeconfig", env.Kubeconfig)
			cv = waitCV(t, time.Minute, "the corrupt manifest was not refused", func(cv *configv1.ClusterVersion) bool {
				return condition(cv.Status.Conditions, cvo.ReleaseAccepted).Reason == "LoadPayload"
			})
			if ra := condition(cv.Status.Conditions, cvo.ReleaseAccepted); ra.Status != configv1.ConditionFalse || !strings.Contains(ra.Message, "0000_50_console-operator_99_broken.yaml") {
				t.Errorf("ReleaseAccepted %s %q, want False naming the broken file", ra.Status, ra.Message)
			}
			if f := condition(cv.Status.Conditions, cvo.Failing); f.Status != configv1.ConditionTrue || f.Reason != "UpdatePayloadIntegrity" {
				t.Errorf("Failing %s %s %q", f.Status, f.Reason, f.Message)
			}
			if cv.Status.Desired.Version != "4.10.22" || len(cv.Status.History) != 1 || cv.Status.History[0].Version != "4.10.22" {
				t.Errorf("a corrupt release changed the desired release or the history: %s", describeCV(cv))
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
			// An alert that fires during the update is in its health, read
			// as oc reads it: through the thanos-querier Route, with the
			// kubeconfig's bearer token.
			annotateNamespace(t, "openshift-dns-operator", operators.UnavailableAnnotation, "DNSUnavailable: no DNS pod is running")
			env.WaitAlertFiring(t, "ClusterOperatorDown", map[string]string{"name": "dns"}, alertTimeout)
			testenv.Eventually(t, time.Minute, func() (bool, string) {
				out := capstanOK(t, "adm", "upgrade", "status", "--kubeconfig", env.Kubeconfig)
				for _, line := range strings.Split(out, "\n") {
					if strings.Contains(line, "Alert: Cluster operator has not been available for 10 minutes.") {
						return strings.Contains(line, "Critical") && strings.Contains(line, "Unknown"), out
					}
				}
				return false, out
			})
			annotateNamespace(t, "openshift-dns-operator", operators.UnavailableAnnotation, "")
			env.WaitAlertResolved(t, "ClusterOperatorDown", map[string]string{"name": "dns"}, alertTimeout)
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
		// Last: each refusal is events on the ClusterVersion, and the
		// event recorder's spam filter allows an object only so many; the
		// steps above read theirs.
		{"keys in the cluster's verification ConfigMap are not trusted", func(t *testing.T) {
			// Review S1: the keys came from openshift-config-managed/
			// release-verification, which anyone who may edit ConfigMaps
			// there can rewrite. Here an attacker's key replaces the
			// cluster's, and the attacker's release is signed by it and
			// published where signatures are looked for.
			evil := publishRelease(t, "4.10.27", nil)
			_, digest, _ := strings.Cut(evil, "@")
			attacker, pub := newKey(t, "attacker")
			sig, err := signature.Sign(attacker, digest, evil, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			sigs, err := signature.ConfigMap(digest, sig)
			if err != nil {
				t.Fatal(err)
			}
			cms := env.Client.CoreV1().ConfigMaps(signature.Namespace)
			if _, err := cms.Create(ctx, sigs, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cms.Delete(context.Background(), sigs.Name, metav1.DeleteOptions{}) })
			forged := &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: signature.VerificationConfigMapName, Namespace: signature.Namespace,
					Annotations: map[string]string{signature.VerificationConfigMapAnnotation: ""}},
				Data: map[string]string{signature.KeyringPrefix + "attacker": pub},
			}
			if cur, err := cms.Get(ctx, forged.Name, metav1.GetOptions{}); err == nil {
				forged.ResourceVersion = cur.ResourceVersion
				_, err = cms.Update(ctx, forged, metav1.UpdateOptions{})
				if err != nil {
					t.Fatal(err)
				}
			} else if _, err := cms.Create(ctx, forged, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			cv := refuseRelease(t, evil, "RetrievePayload")
			ra := condition(cv.Status.Conditions, cvo.ReleaseAccepted)
			if f := condition(cv.Status.Conditions, cvo.Failing); f.Reason != "ImageVerificationFailed" ||
				!strings.Contains(ra.Message, "against keyrings: "+signature.KeyringPrefix+"capstan") {
				t.Errorf("Failing %s; ReleaseAccepted %q: want ImageVerificationFailed by the release's own key", f.Reason, ra.Message)
			}
		}},
		{"a layout named after a signed digest is not that release", func(t *testing.T) {
			// Review S2: oci:DIR:x@sha256:H was read as the layout
			// "DIR:x@sha256" and its image named H, so the signature of a
			// genuine release H vouched for anyone's content.
			signed := demoImage(t, "4.10.26")
			_, digest, _ := strings.Cut(signed, "@")
			h, err := v1.NewHash(digest)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			evil := buildRelease(t, "4.10.27", nil)
			if _, err := release.Write(ctx, release.Ref{Layout: filepath.Join(dir, "l:x@sha256"), Tag: h.Hex}, evil); err != nil {
				t.Fatal(err)
			}
			// Read by its digest, it is the layout "DIR/l:x", which does not
			// exist: nothing to retrieve.
			cv := refuseRelease(t, "oci:"+filepath.Join(dir, "l:x")+"@"+digest, "RetrievePayload")
			if f := condition(cv.Status.Conditions, cvo.Failing); f.Reason != "UpdatePayloadRetrievalFailed" || !strings.Contains(f.Message, filepath.Join(dir, "l:x")+" is not an OCI layout") {
				t.Errorf("Failing %s %q: want UpdatePayloadRetrievalFailed, the layout DIR/l:x not found", f.Reason, f.Message)
			}

			// The attacker's manifest stored under the signed digest: read,
			// hashed, refused with both digests named.
			evilDigest, err := release.Write(ctx, release.Ref{Layout: filepath.Join(dir, "swapped"), Tag: "4.10.27"}, evil)
			if err != nil {
				t.Fatal(err)
			}
			swapDigest(t, filepath.Join(dir, "swapped"), evilDigest, h)
			cv = refuseRelease(t, "oci:"+filepath.Join(dir, "swapped")+"@"+digest, "LoadPayload")
			ra := condition(cv.Status.Conditions, cvo.ReleaseAccepted)
			if f := condition(cv.Status.Conditions, cvo.Failing); f.Reason != "UpdatePayloadIntegrity" ||
				!strings.Contains(ra.Message, "hashes to "+evilDigest.String()+", not the "+digest) {
				t.Errorf("Failing %s; ReleaseAccepted %q: want UpdatePayloadIntegrity naming %s and %s", f.Reason, ra.Message, evilDigest, digest)
			}
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
	mcfg, err := mcfgclient.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	// The worker pool is paused: the update completes with the control
	// plane's nodes, while the workers wait, as OpenShift does.
	waitPool(t, mcfg, "worker", "the worker pool is still rolling before the update", func(p *mcfgv1.MachineConfigPool) bool {
		return poolCondition(p, mcfgv1.MachineConfigPoolUpdated) == corev1.ConditionTrue
	})
	setPaused(t, mcfg, "worker", true)
	t.Cleanup(func() { setPaused(t, mcfg, "worker", false) })
	agents := startNodeAgents(t)
	before := boots(t)
	masters := watchRollout(t, "node-role.kubernetes.io/master")
	mcReported := watchMachineConfigReport(t, mcfg, "4.10.26")
	annotateNamespace(t, "openshift-ingress-operator", operators.NotUpgradeableAnnotation, "AdminAckRequired: the ingress needs an administrator's acknowledgement before 4.11")
	waitCV(t, time.Minute, "Upgradeable never went False", func(cv *configv1.ClusterVersion) bool {
		return condition(cv.Status.Conditions, configv1.OperatorUpgradeable).Status == configv1.ConditionFalse
	})
	annotateNamespace(t, "openshift-console-operator", operators.DelayAnnotation, "4s")
	rec := recordUpdate(t, "4.10.26")
	// The cluster as it is before the update, which a simulation of the
	// same update then replays.
	snap := filepath.Join(t.TempDir(), "snap.json")
	capstanOK(t, "simulate", "snapshot", "--kubeconfig", env.Kubeconfig, "-o", snap)
	// Started from the console's Cluster Settings, as the admin.
	tab := consoleTab(t)
	tab.Go(env.Cluster.ConsoleURL + "/#/updates")
	tab.WaitText("main", "Recommended updates", 30*time.Second)
	// A conditional update the cluster does not recommend is refused
	// unless its risk is accepted, and nothing is written.
	tab.WaitText(`section[aria-labelledby="cu-4-11-0"]`, "Recommended=False", 30*time.Second)
	tab.Click(`section[aria-labelledby="cu-4-11-0"] button[type=submit]`)
	tab.WaitText("dialog[open]", "Update the cluster to 4.11.0?", 30*time.Second)
	tab.Click("dialog[open] button[data-confirm]")
	tab.WaitText("#result", `the update 4.11.0 is not one of the recommended updates, but is available as a conditional update. To accept the Recommended=False risk and to proceed with the update, check "I accept the risks above".`, 30*time.Second)
	if cv := clusterVersion(t); cv.Spec.DesiredUpdate != nil {
		t.Errorf("a refused conditional update wrote %+v", cv.Spec.DesiredUpdate)
	}
	// Nothing is asked of the CVO before the dialog is confirmed; a
	// cancel asks nothing.
	tab.Click(`button[aria-label="Update to 4.10.26"]`)
	tab.WaitText("dialog[open]", "Update the cluster to 4.10.26?", 30*time.Second)
	tab.Click("dialog[open] button[data-cancel]")
	if cv := clusterVersion(t); cv.Spec.DesiredUpdate != nil {
		t.Errorf("a cancelled update wrote %+v", cv.Spec.DesiredUpdate)
	}
	tab.Click(`button[aria-label="Update to 4.10.26"]`)
	tab.WaitText("dialog[open]", "Update the cluster to 4.10.26?", 30*time.Second)
	tab.Click("dialog[open] button[data-confirm]")
	tab.WaitText("#result", "Requested update to 4.10.26", 30*time.Second)
	waitCV(t, 2*time.Minute, "the update never waited on the console", func(cv *configv1.ClusterVersion) bool {
		return strings.Contains(condition(cv.Status.Conditions, configv1.OperatorProgressing).Message, "waiting on console")
	})
	// The page follows: Progressing, and what the run levels wait on
	// (level 50, the slowed console's, among them).
	tab.WaitText("main", "Working towards 4.10.26", 30*time.Second)
	tab.WaitText(`tr[data-key="50"]`, "waiting on cluster operator ", 30*time.Second)
	tab.A11y("cluster settings")
	tab.Screenshot("updates")
	if out := capstanOK(t, "adm", "upgrade", "--kubeconfig", env.Kubeconfig); !strings.Contains(out, "info: An upgrade is in progress. Working towards 4.10.26: ") {
		t.Errorf("adm upgrade during the update:\n%s", out)
	}
	// The other operators of run level 50 finish rolling out a moment
	// before the slowed console: the status is read until console is the
	// one left (it stays so for its 4 s delay).
	var out string
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		out = capstanOK(t, "adm", "upgrade", "status", "--details=operators", "--kubeconfig", env.Kubeconfig)
		for _, want := range []string{"= Control Plane =\nAssessment:      Progressing\nTarget Version:  4.10.26 (from 4.10.22)\nUpdating:        console\nCompletion:      ",
			"Updating Cluster Operators\nNAME      SINCE   REASON      MESSAGE\nconsole   ", "= Update Health =\n"} {
			if !strings.Contains(out, want) {
				return false, fmt.Sprintf("adm upgrade status during the update:\n%s\nlacks:\n%s", out, want)
			}
		}
		return true, ""
	})
	cv := waitCompleted(t, "4.10.26")
	tab.WaitText("main", "Cluster version is 4.10.26", 30*time.Second)
	if got := tab.WaitText(`table:last-of-type tr[data-key="4.10.26"]`, "Completed", 30*time.Second); !strings.Contains(got, "yes") {
		t.Errorf("the page's history row of 4.10.26 is not verified: %q", got)
	}
	// The pools page: the masters rolled, the paused workers not.
	tab.Go(env.Cluster.ConsoleURL + "/#/pools")
	tab.WaitText(`section[aria-labelledby="pool-master"]`, "3 of 3 updated", time.Minute)
	tab.WaitText(`section[aria-labelledby="pool-worker"]`, "paused", 30*time.Second)
	tab.A11y("machine config pools")
	tab.Screenshot("pools")
	tab.Go(env.Cluster.ConsoleURL + "/#/overview")
	tab.WaitText("main", "4.10.26", 30*time.Second)
	tab.WaitText("main", "All available", 30*time.Second)
	tab.Screenshot("overview")
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
	// 6. The Machine Config Operator's part (the chapter's step 11): the
	// release's machine OS rendered into the master pool's configuration,
	// its nodes updated one at a time, each rebooted once, and only then
	// machine-config reported 4.10.26.
	masters.stop()
	if v, done := releaseOfPool(t, mcfg, "master"); v != "4.10.26" || !done {
		t.Errorf("the master pool at completion: configuration of %q, all nodes on it %v", v, done)
	}
	masters.mu.Lock()
	if masters.maxUnavailable != 1 || len(masters.targeted) != 3 {
		t.Errorf("control-plane nodes: at most %d unavailable at once (want 1), targeted %v (want all 3)", masters.maxUnavailable, masters.targeted)
	}
	masters.mu.Unlock()
	after := boots(t)
	for _, n := range []string{"master-0", "master-1", "master-2"} {
		if after[n] != before[n]+1 {
			t.Errorf("%s booted %d times in the update, want once", n, after[n]-before[n])
		}
	}
	if why := mcReported(); why != "" {
		t.Error(why)
	}
	masters.mu.Lock()
	masterOrder := slices.Clone(masters.targeted)
	masters.mu.Unlock()
	checkSimulatedUpdate(t, snap, "4.10.26", rec.updated(), masterOrder)
	// The workers are not required: the update is complete while they
	// still run 4.10.22, and `adm upgrade status` says so.
	if v, _ := releaseOfPool(t, mcfg, "worker"); v != "4.10.26" || after["worker-0"] != before["worker-0"] || getPool(t, mcfg, "worker").Status.UpdatedMachineCount != 0 {
		t.Errorf("the paused worker pool: configuration of %q, worker-0 rebooted %d times, status %+v", v, after["worker-0"]-before["worker-0"], getPool(t, mcfg, "worker").Status)
	}
	out = capstanOK(t, "adm", "upgrade", "status", "--kubeconfig", env.Kubeconfig)
	for _, want := range []string{"= Control Plane =\nUpdate to 4.10.26 successfully completed at ", "\nAll control plane nodes successfully updated to 4.10.26\n",
		"= Worker Upgrade =\n\nWORKER POOL   ASSESSMENT   COMPLETION   STATUS\nworker        Excluded     0% (0/1)     1 Available, 0 Progressing, 0 Draining, 1 Excluded\n",
		"Worker Pool Nodes: worker\nNAME       ASSESSMENT   PHASE    VERSION   EST   MESSAGE\nworker-0   Excluded     Paused   4.10.22   -",
		"Warning   Update Stalled   Outdated nodes in a paused pool 'worker' will not be updated"} {
		if !strings.Contains(out, want) {
			t.Errorf("adm upgrade status with the workers paused:\n%s\nlacks:\n%s", out, want)
		}
	}
	// Resumed, the worker rolls too; the pods left on each node (its
	// DaemonSet's) restarted with its reboot.
	setPaused(t, mcfg, "worker", false)
	testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
		v, done := releaseOfPool(t, mcfg, "worker")
		return v == "4.10.26" && done, fmt.Sprintf("the worker pool: configuration of %q, done %v", v, done)
	})
	if b := boots(t)["worker-0"]; b != before["worker-0"]+1 {
		t.Errorf("worker-0 booted %d times, want once", b-before["worker-0"])
	}
	agents.restartedOnce(t)
	if out := capstanOK(t, "adm", "upgrade", "status", "--kubeconfig", env.Kubeconfig); out != "The cluster is not updating.\n" {
		t.Errorf("adm upgrade status after the update: %q", out)
	}
}

// watchMachineConfigReport watches the machine-config ClusterOperator and,
// when it first reports version, reads the master pool: it must already
// run the configuration of that release on every node. The returned
// function says what was wrong, "" if nothing.
func watchMachineConfigReport(t *testing.T, mcfg mcfgclient.Interface, version string) func() string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := configClient(t).ConfigV1().ClusterOperators().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=machine-config"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	result := "machine-config never reported " + version
	go func() {
		for ev := range w.ResultChan() {
			co, ok := ev.Object.(*configv1.ClusterOperator)
			if !ok || len(co.Status.Versions) == 0 || co.Status.Versions[0].Version != version {
				continue
			}
			p, err := mcfg.MachineconfigurationV1().MachineConfigPools().Get(ctx, "master", metav1.GetOptions{})
			why := ""
			switch {
			case err != nil:
				why = err.Error()
			case p.Status.Configuration.Name != p.Spec.Configuration.Name || p.Status.UpdatedMachineCount != p.Status.MachineCount:
				why = fmt.Sprintf("machine-config reported %s before the master pool was updated: %+v", version, p.Status)
			}
			if why == "" {
				mc, err := mcfg.MachineconfigurationV1().MachineConfigs().Get(ctx, p.Status.Configuration.Name, metav1.GetOptions{})
				if err != nil || mc.Annotations[mco.ReleaseImageVersionAnnotation] != version {
					why = fmt.Sprintf("machine-config reported %s while the masters ran %s (%v)", version, p.Status.Configuration.Name, err)
				}
			}
			mu.Lock()
			result = why
			mu.Unlock()
			cancel()
			return
		}
	}()
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		return result
	}
}

// nodeAgents is a DaemonSet's pods, one per node, as they were before an
// update.
type nodeAgents map[string]types.UID

// startNodeAgents runs a DaemonSet on every node and waits for its pods.
func startNodeAgents(t *testing.T) nodeAgents {
	t.Helper()
	ctx := context.Background()
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "node-agent", Namespace: "default"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "node-agent"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "node-agent"}},
				Spec: corev1.PodSpec{Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{Name: "agent", Image: "registry.example/node-agent:1"}}}},
		},
	}
	if _, err := env.Client.AppsV1().DaemonSets("default").Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.AppsV1().DaemonSets("default").Delete(context.Background(), "node-agent", metav1.DeleteOptions{})
	})
	agents := nodeAgents{}
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		pods, err := env.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=node-agent"})
		if err != nil {
			return false, err.Error()
		}
		for _, p := range pods.Items {
			switch p.Spec.NodeName {
			case "master-0", "master-1", "master-2", "worker-0":
				if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
					agents[p.Spec.NodeName] = p.UID
				}
			}
		}
		return len(agents) == 4, fmt.Sprintf("node agents running on %v, want the cluster's 4 nodes", agents)
	})
	return agents
}

// restartedOnce checks that each node's agent is the same pod, restarted
// once by its node's reboot, as a kubelet reports it.
func (a nodeAgents) restartedOnce(t *testing.T) {
	t.Helper()
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		pods, err := env.Client.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: "app=node-agent"})
		if err != nil {
			return false, err.Error()
		}
		var bad []string
		seen := 0
		for _, p := range pods.Items {
			uid, ok := a[p.Spec.NodeName]
			if !ok || uid != p.UID {
				continue
			}
			seen++
			cs := p.Status.ContainerStatuses
			if len(cs) != 1 || cs[0].RestartCount != 1 || !cs[0].Ready || cs[0].LastTerminationState.Terminated == nil || cs[0].LastTerminationState.Terminated.ExitCode != 255 {
				bad = append(bad, fmt.Sprintf("%s on %s: %+v", p.Name, p.Spec.NodeName, cs))
			}
		}
		return seen == len(a) && len(bad) == 0, fmt.Sprintf("%d of %d agents kept; not restarted once: %v", seen, len(a), bad)
	})
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

// refuseRelease requests an update to image, written into
// spec.desiredUpdate as any client of the API can (capstan adm upgrade,
// as oc, takes only registry pull specs), waits for the CVO to refuse it
// at step (ReleaseAccepted=False with that reason), checks that the
// desired release and the history are as they were, then clears the
// request and waits for the cluster to be back where it was. It returns
// the ClusterVersion as refused.
func refuseRelease(t *testing.T, image, step string) *configv1.ClusterVersion {
	t.Helper()
	before := clusterVersion(t)
	desired, err := json.Marshal(map[string]any{"spec": map[string]any{"desiredUpdate": map[string]any{"image": image, "version": "", "force": false}}})
	if err != nil {
		t.Fatal(err)
	}
	patchClusterVersion(t, string(desired))
	cv := waitCV(t, time.Minute, image+" was not refused at "+step, func(cv *configv1.ClusterVersion) bool {
		ra := condition(cv.Status.Conditions, cvo.ReleaseAccepted)
		return ra.Status == configv1.ConditionFalse && ra.Reason == step && strings.Contains(ra.Message, image)
	})
	if !reflect.DeepEqual(cv.Status.Desired, before.Status.Desired) || len(cv.Status.History) != len(before.Status.History) {
		t.Errorf("a refused release changed the desired release or the history: %s", describeCV(cv))
	}
	capstanOK(t, "adm", "upgrade", "--clear", "--kubeconfig", env.Kubeconfig)
	waitCV(t, time.Minute, "--clear did not go back", func(cv *configv1.ClusterVersion) bool {
		return condition(cv.Status.Conditions, cvo.ReleaseAccepted).Status == configv1.ConditionTrue &&
			condition(cv.Status.Conditions, cvo.Failing).Status == configv1.ConditionFalse &&
			condition(cv.Status.Conditions, configv1.OperatorProgressing).Message == "Cluster version is "+before.Status.Desired.Version
	})
	return cv
}

// newKey makes an OpenPGP key and returns it with its armored public key.
func newKey(t *testing.T, name string) (*openpgp.Entity, string) {
	t.Helper()
	key, err := openpgp.NewEntity(name, "", name+"@capstan.dev", nil)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := signature.ArmorPublicKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return key, string(pub)
}

// swapDigest makes an OCI layout list the image stored under from as if
// it were to: its manifest blob moved to to's file, its index entry
// renamed. The bytes are untouched, so they still hash to from.
func swapDigest(t *testing.T, dir string, from, to v1.Hash) {
	t.Helper()
	if err := os.Rename(filepath.Join(dir, "blobs", from.Algorithm, from.Hex), filepath.Join(dir, "blobs", to.Algorithm, to.Hex)); err != nil {
		t.Fatal(err)
	}
	index := filepath.Join(dir, "index.json")
	raw, err := os.ReadFile(index)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw, []byte(from.String())) {
		t.Fatalf("%s does not list %s", index, from)
	}
	if err := os.WriteFile(index, bytes.ReplaceAll(raw, []byte(from.String()), []byte(to.String())), 0o644); err != nil {
		t.Fatal(err)
	}
}
