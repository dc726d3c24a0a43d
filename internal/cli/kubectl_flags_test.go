package cli

import (
	"os"
	"path/filepath"
	"testing"
)

func TestEmbeddedKubectlIsNotThrottledToClientGoDefaults(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443"}
users:
- name: u
  user: {token: t}
contexts:
- name: c
  context: {cluster: c, user: u}
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	flags := defaultConfigFlags()
	flags.KubeConfig = &kubeconfig
	cfg, err := flags.ToRESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.QPS != kubectlQPS || cfg.Burst != kubectlBurst {
		t.Errorf("kubectl's client: QPS %v, burst %d; want %v and %d (client-go's 5 and 10 pace a large list's pages)", cfg.QPS, cfg.Burst, float32(kubectlQPS), kubectlBurst)
	}
	cfg.QPS, cfg.Burst = 7, 9
	if got := raiseClientRateLimits(cfg); got.QPS != 7 || got.Burst != 9 {
		t.Errorf("limits a caller set were changed to QPS %v, burst %d", got.QPS, got.Burst)
	}
}
