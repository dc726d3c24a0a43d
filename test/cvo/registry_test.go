package cvo

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/release"
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
}
