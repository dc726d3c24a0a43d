package cvo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	configv1 "github.com/openshift/api/config/v1"
	configclient "github.com/openshift/client-go/config/clientset/versioned"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/capstan-dev/capstan/internal/cvo"
	"github.com/capstan-dev/capstan/internal/release"
	"github.com/capstan-dev/capstan/internal/release/signature"
	"github.com/capstan-dev/capstan/internal/testenv"
)

func configClient(t *testing.T) configclient.Interface {
	t.Helper()
	c, err := configclient.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func clusterVersion(t *testing.T) *configv1.ClusterVersion {
	t.Helper()
	cv, err := configClient(t).ConfigV1().ClusterVersions().Get(context.Background(), cvo.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cv
}

// waitClusterVersion waits until the ClusterVersion exists (the CVO
// creates it on a new cluster) and satisfies done.
func waitClusterVersion(t *testing.T, done func(*configv1.ClusterVersion) bool) *configv1.ClusterVersion {
	t.Helper()
	var cv *configv1.ClusterVersion
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		var err error
		if cv, err = configClient(t).ConfigV1().ClusterVersions().Get(context.Background(), cvo.Name, metav1.GetOptions{}); err != nil {
			return false, err.Error()
		}
		return done(cv), "status: " + retrievedUpdates(cv)
	})
	return cv
}

func patchClusterVersion(t *testing.T, patch string) {
	t.Helper()
	if _, err := configClient(t).ConfigV1().ClusterVersions().Patch(context.Background(), cvo.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func retrievedUpdates(cv *configv1.ClusterVersion) string {
	for _, c := range cv.Status.Conditions {
		if c.Type == configv1.RetrievedUpdates {
			return fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
		}
	}
	return "no RetrievedUpdates condition"
}

func setChannel(t *testing.T, channel string) {
	t.Helper()
	patchClusterVersion(t, fmt.Sprintf(`{"spec":{"channel":%q}}`, channel))
}

// The chapter's starting point: a cluster at 4.10.22 in fast-4.11 sees
// 4.10.23 to 4.10.26 recommended and 4.11.0 offered with a known risk; the
// release images in capstan's registry are signed with the key the
// cluster's verification ConfigMap names, and the signatures are in both
// stores. Changing the channel asks the update service again at once.
func TestClusterVersionRecommendations(t *testing.T) {
	cv := waitClusterVersion(t, func(cv *configv1.ClusterVersion) bool {
		return len(cv.Status.AvailableUpdates) == 4 && len(cv.Status.ConditionalUpdates) == 1
	})
	if cv.Status.Desired.Version != "4.10.22" || cv.Spec.Channel != "fast-4.11" {
		t.Fatalf("desired %s in channel %s, want 4.10.22 in fast-4.11", cv.Status.Desired.Version, cv.Spec.Channel)
	}
	var got []string
	for _, r := range cv.Status.AvailableUpdates {
		got = append(got, r.Version)
	}
	if strings.Join(got, ",") != "4.10.26,4.10.25,4.10.24,4.10.23" {
		t.Errorf("available updates %v", got)
	}
	cu := cv.Status.ConditionalUpdates[0]
	if cu.Release.Version != "4.11.0" || len(cu.Risks) != 1 || cu.Risks[0].Name != "RPMOSTreeTimeout" {
		t.Errorf("conditional update %+v", cu)
	}
	// The risk's PromQL, asked of capstan's own metrics endpoint, finds
	// the platform it names: 4.11.0 is not recommended, as in the chapter.
	if c := meta.FindStatusCondition(cu.Conditions, cvo.RecommendedCondition); c == nil || c.Status != metav1.ConditionFalse || c.Reason != "RPMOSTreeTimeout" ||
		c.Message != "Nodes with substantial numbers of containers and CPU contention may not reconcile machine configuration https://bugzilla.redhat.com/show_bug.cgi?id=2111817#c22" {
		t.Errorf("Recommended of 4.11.0: %+v", c)
	}
	if got := strings.Join(cv.Status.Desired.Channels, ","); got != "candidate-4.10,candidate-4.11,eus-4.10,fast-4.10,fast-4.11,stable-4.10" {
		t.Errorf("channels of 4.10.22: %s", got)
	}

	// Every release is signed: verified with the keys of the installed
	// release's own verification manifest, by the signature store it
	// names and by the cluster's signature ConfigMaps.
	ctx := context.Background()
	ref, err := release.ParseRef(cv.Status.Desired.Image)
	if err != nil {
		t.Fatal(err)
	}
	img, err := release.Read(ctx, ref)
	if err != nil || img.Payload.Metadata.Version != "4.10.22" {
		t.Fatalf("reading the installed release: %v", err)
	}
	verifier, err := cvo.VerifierOf(img.Payload, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(verifier.Keyrings) != 1 || len(verifier.Stores) != 1 || verifier.Stores[0].String() != env.ReleasesURL+"/signatures" {
		t.Errorf("the installed release trusts keyrings %v and stores %v", verifier.Keyrings, verifier.Stores)
	}
	_, digest, _ := strings.Cut(cv.Status.Desired.Image, "@")
	if err := verifier.Verify(ctx, digest); err != nil {
		t.Errorf("the installed release by its HTTP store: %v", err)
	}
	inCluster := &signature.Verifier{Keyrings: verifier.Keyrings, Stores: []signature.Store{&signature.ConfigMapStore{Client: env.Client}}}
	for _, r := range append(cv.Status.AvailableUpdates, cu.Release) {
		_, d, _ := strings.Cut(r.Image, "@")
		if err := inCluster.Verify(ctx, d); err != nil {
			t.Errorf("release %s by its ConfigMap: %v", r.Version, err)
		}
	}
	if err := inCluster.Verify(ctx, "sha256:"+strings.Repeat("0", 64)); !errors.Is(err, signature.ErrNoSignatures) {
		t.Errorf("an unsigned digest: %v", err)
	}

	// A channel without the version, then none at all.
	t.Cleanup(func() { setChannel(t, "fast-4.11") })
	setChannel(t, "stable-4.12")
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		s := retrievedUpdates(clusterVersion(t))
		return s == `False VersionNotFound: Unable to retrieve available updates: currently reconciling cluster version 4.10.22 not found in the "stable-4.12" channel`, s
	})
	setChannel(t, "")
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		cv := clusterVersion(t)
		s := retrievedUpdates(cv)
		return s == "False NoChannel: The update channel has not been configured." && len(cv.Status.AvailableUpdates) == 0, s
	})
	// An upstream nobody answers at.
	t.Cleanup(func() { patchClusterVersion(t, `{"spec":{"upstream":null}}`) })
	patchClusterVersion(t, `{"spec":{"channel":"fast-4.11","upstream":"http://127.0.0.1:1/graph"}}`)
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		s := retrievedUpdates(clusterVersion(t))
		return strings.HasPrefix(s, `False RemoteFailed: Unable to retrieve available updates: Get "http://127.0.0.1:1/graph?arch=amd64&channel=fast-4.11&id=`), s
	})
}

// capstan adm upgrade against the live cluster: the chapter's listing,
// then a requested update written to spec.desiredUpdate as oc writes it,
// then cancelled.
func TestAdmUpgrade(t *testing.T) {
	waitClusterVersion(t, func(cv *configv1.ClusterVersion) bool {
		return len(cv.Status.AvailableUpdates) == 4 && cv.Spec.Channel == "fast-4.11"
	})
	out := capstanOK(t, "adm", "upgrade", "--include-not-recommended", "--kubeconfig", env.Kubeconfig)
	for _, want := range []string{
		"Cluster version is 4.10.22\n\nUpstream is unset, so the cluster will use an appropriate default.\nChannel: fast-4.11 (available channels: candidate-4.10, candidate-4.11, eus-4.10, fast-4.10, fast-4.11, stable-4.10)\n\nRecommended updates:\n\n  VERSION     IMAGE\n  4.10.26     ",
		"\nUpdates with known issues:\n\n  Version: 4.11.0\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("capstan adm upgrade --include-not-recommended:\n%s\nlacks:\n%s", out, want)
		}
	}
	out, err := capstan(t, "adm", "upgrade", "--to", "4.11.0", "--kubeconfig", env.Kubeconfig)
	if err == nil || !strings.Contains(out, "error: the update 4.11.0 is not one of the recommended updates, but is available as a conditional update.") {
		t.Errorf("--to a conditional update: %v\n%s", err, out)
	}
	// The console's Cluster Settings refuse an unknown channel with oc's
	// message, and write nothing.
	tab := consoleTab(t)
	tab.Go(env.Cluster.ConsoleURL + "/#/updates")
	tab.WaitText("main", "Recommended updates", 30*time.Second)
	tab.Fill("#channel", "no-such-channel")
	tab.Click(`section[aria-labelledby="ch-title"] button[type=submit]`)
	tab.WaitText("#channel-result", `the requested channel "no-such-channel" is not one of the available channels (candidate-4.10, candidate-4.11, eus-4.10, fast-4.10, fast-4.11, stable-4.10)`, 30*time.Second)
	if cv := clusterVersion(t); cv.Spec.Channel != "fast-4.11" {
		t.Errorf("a refused channel was written: %q", cv.Spec.Channel)
	}
	// Requesting an update, and cancelling one, are in TestUpdates: a
	// request here would start one.
	if out := capstanOK(t, "adm", "upgrade", "--clear", "--kubeconfig", env.Kubeconfig); out != "info: No update in progress\n" {
		t.Errorf("--clear without a request said %q", out)
	}
}

// capstan adm release new builds, signs and publishes a release as a user
// would, with a key of their own: into an OCI layout, a signature store
// directory and the cluster's signature ConfigMaps; info and extract read
// it back.
func TestAdmReleaseNewSignsAndPublishes(t *testing.T) {
	dir := t.TempDir()
	key, err := openpgp.NewEntity("e2e release signer", "", "e2e@capstan.dev", nil)
	if err != nil {
		t.Fatal(err)
	}
	var priv, pub bytes.Buffer
	w, _ := armor.Encode(&priv, openpgp.PrivateKeyType, nil)
	if err := key.SerializePrivate(w, nil); err != nil {
		t.Fatal(err)
	}
	w.Close()
	w, _ = armor.Encode(&pub, openpgp.PublicKeyType, nil)
	if err := key.Serialize(w); err != nil {
		t.Fatal(err)
	}
	w.Close()
	keyFile := filepath.Join(dir, "key.asc")
	src := filepath.Join(dir, "payload")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		keyFile: priv.String(),
		filepath.Join(src, "0000_50_e2e_00_ns.yaml"): "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: e2e-release\n",
	} {
		if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	layout, store := filepath.Join(dir, "layout"), filepath.Join(dir, "signatures")
	out := capstanOK(t, "adm", "release", "new", "--from-dir", src, "--version", "4.10.99", "--previous", "4.10.26",
		"--metadata", `{"url":"https://example.com/4.10.99"}`, "--to-dir", layout,
		"--sign-key", keyFile, "--signature-store-dir", store, "--to-cluster", "--kubeconfig", env.Kubeconfig)
	_, digest, ok := strings.Cut(strings.SplitN(out, "Digest: ", 2)[1], "sha256:")
	if !ok {
		t.Fatalf("release new said:\n%s", out)
	}
	digest = "sha256:" + strings.TrimSpace(strings.SplitN(digest, "\n", 2)[0])
	if !strings.Contains(out, "Signed "+digest+" as oci:"+layout+":4.10.99") {
		t.Errorf("release new said:\n%s", out)
	}
	ring, err := signature.ReadKeyring(pub.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	fileStore, err := signature.NewStore("file://" + store)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []signature.Store{fileStore, &signature.ConfigMapStore{Client: env.Client}} {
		v := &signature.Verifier{Keyrings: map[string]openpgp.EntityList{signature.KeyringPrefix + "e2e": ring}, Stores: []signature.Store{s}}
		if err := v.Verify(context.Background(), digest); err != nil {
			t.Errorf("verifying by %s: %v", s, err)
		}
	}
	info := capstanOK(t, "adm", "release", "info", "oci:"+layout+":4.10.99")
	for _, want := range []string{"Name:      4.10.99\n", "Digest:    " + digest + "\n", "  Upgrades: 4.10.26\n", "    url: https://example.com/4.10.99\n"} {
		if !strings.Contains(info, want) {
			t.Errorf("release info lacks %q:\n%s", want, info)
		}
	}
	to := filepath.Join(dir, "extracted")
	if out := capstanOK(t, "adm", "release", "extract", "oci:"+layout+":4.10.99", "--to", to); !strings.HasPrefix(out, "Extracted release payload from digest "+digest+" created at ") {
		t.Errorf("release extract said %q", out)
	}
	if _, err := os.Stat(filepath.Join(to, "0000_50_e2e_00_ns.yaml")); err != nil {
		t.Error(err)
	}
	if _, err := capstan(t, "adm", "release", "new", "--from-dir", src, "--version", "4.10.99", "--to-dir", layout, "--sign-key", keyFile); err == nil {
		t.Error("--sign-key with nowhere to publish was accepted")
	}
}
