package cvo

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/random"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capstan-dev/capstan/internal/cvo"
	"github.com/capstan-dev/capstan/internal/release"
	"github.com/capstan-dev/capstan/internal/updateservice"
	"github.com/capstan-dev/capstan/internal/waitfor"
)

// The registry capstan up serves refuses anonymous pushes (review: anyone
// who could reach it could push a release); the credentials capstan up
// wrote push, through the library as through `capstan adm release new -a`.
func TestTheRegistryNeedsCredentialsToPush(t *testing.T) {
	host := strings.TrimPrefix(env.ReleasesURL, "http://")
	anonymous := mustRef(t, host+"/e2e/registry:anonymous")
	if _, err := release.Write(context.Background(), anonymous, buildRelease(t, "4.10.95", nil)); err == nil || !strings.Contains(err.Error(), "UNAUTHORIZED") {
		t.Fatalf("an anonymous push: %v, want UNAUTHORIZED", err)
	}
	if _, err := release.Read(context.Background(), anonymous); err == nil {
		t.Fatal("the refused push is served")
	}
	if _, err := release.Write(pushContext(t), mustRef(t, host+"/e2e/registry:library"), buildRelease(t, "4.10.95", nil)); err != nil {
		t.Fatalf("a push with capstan's credentials: %v", err)
	}
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "0000_50_e2e_00_ns.yaml"), []byte("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: e2e-registry\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"adm", "release", "new", "--from-dir", src, "--version", "4.10.96", "--to", host + "/e2e/registry:cli"}
	if out, err := capstan(t, append(args, "--registry-config", filepath.Join(t.TempDir(), "none.json"))...); err == nil {
		t.Errorf("a push with a registry config that does not exist succeeded:\n%s", out)
	}
	out := capstanOK(t, append(args, "-a", env.RegistryAuth)...)
	if !strings.Contains(out, "Built release 4.10.96 as "+host+"/e2e/registry:cli") {
		t.Errorf("release new said:\n%s", out)
	}
	if _, err := release.Read(context.Background(), mustRef(t, host+"/e2e/registry:cli")); err != nil {
		t.Errorf("the pushed release, pulled anonymously on loopback: %v", err)
	}

	// An image of the release repository that is not a release is left
	// out of the graph with a warning event; the service goes on.
	junk, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	digest, err := release.Write(pushContext(t), mustRef(t, host+"/ocp/release:e2e-not-a-release"), junk)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	err = waitfor.Poll(ctx, time.Second, 3*time.Minute, waitfor.Simple(func(ctx context.Context) (bool, string) {
		evs, err := env.Client.CoreV1().Events(cvo.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + updateservice.SkippedImageReason})
		if err != nil {
			return false, err.Error()
		}
		for _, ev := range evs.Items {
			if ev.Type == corev1.EventTypeWarning && ev.InvolvedObject.Kind == "ClusterVersion" && strings.Contains(ev.Message, digest.String()) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d %s events, none for %s", len(evs.Items), updateservice.SkippedImageReason, digest)
	}))
	if err != nil {
		t.Fatalf("the warning event for an image that is not a release: %v", err)
	}
	resp, err := http.Get(env.ReleasesURL + "/api/upgrades_info/v1/graph?channel=fast-4.11")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var g updateservice.Graph
	if err := json.NewDecoder(resp.Body).Decode(&g); err != nil || resp.StatusCode != http.StatusOK || len(g.Nodes) == 0 {
		t.Errorf("the graph beside an image that is not a release: %s, %d nodes, %v", resp.Status, len(g.Nodes), err)
	}
}
