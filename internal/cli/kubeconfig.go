package cli

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/capstan-dev/capstan/internal/etcdretry"
)

// clientFlags are the connection flags of every command that talks to a
// cluster.
type clientFlags struct {
	kubeconfig string
	dataDir    string
	// component: the command runs one of capstan's components, as its
	// own identity: only an explicit --kubeconfig or a pod's config, and
	// not system:masters unless asAdmin.
	component bool
	asAdmin   bool
}

func (f *clientFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster to use (default: DATA_DIR/kubeconfig, then $KUBECONFIG)")
	fs.StringVar(&f.dataDir, "data-dir", defaultDataDir(), "data dir of the capstan cluster to use when --kubeconfig is not given")
}

// addComponent adds the connection flags of a component's command: it
// acts as its own identity, never as whoever runs it, so nothing is
// picked for it (no data dir's admin kubeconfig, no $KUBECONFIG).
func (f *clientFlags) addComponent(fs *pflag.FlagSet) {
	f.component = true
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig of the component's own identity (its ServiceAccount's); required outside a pod, where the pod's ServiceAccount is used")
	fs.BoolVar(&f.asAdmin, "as-admin", false, "accept a kubeconfig of system:masters (the cluster's admin, beyond RBAC): for trying a component out, never for running it")
}

// path is the kubeconfig these flags name (see resolveKubeconfig).
func (f *clientFlags) path() string { return resolveKubeconfig(f.kubeconfig, f.dataDir) }

// resolveKubeconfig is the one place that picks a kubeconfig: the explicit
// one, else the capstan cluster's in dataDir; "" leaves the choice to the
// usual client-go rules ($KUBECONFIG, ~/.kube/config, in-cluster).
func resolveKubeconfig(explicit, dataDir string) string {
	if explicit != "" {
		return explicit
	}
	p := filepath.Join(dataDir, "kubeconfig")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	return ""
}

func (f *clientFlags) restConfig() (*rest.Config, error) {
	if f.component {
		cfg, err := f.componentConfig()
		if err != nil {
			return nil, err
		}
		cfg.QPS, cfg.Burst = 200, 400
		return etcdretry.Wrap(cfg), nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if p := f.path(); p != "" {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", p, err)
		}
		rules.ExplicitPath = p
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("no cluster to talk to (run `capstan up`, or pass --kubeconfig): %w", err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	return etcdretry.Wrap(cfg), nil
}

func (f *clientFlags) client() (kubernetes.Interface, *rest.Config, error) {
	cfg, err := f.restConfig()
	if err != nil {
		return nil, nil, err
	}
	c, err := kubernetes.NewForConfig(cfg)
	return c, cfg, err
}

// componentConfig is a component's identity: --kubeconfig, else the
// pod's; refused when it is system:masters and --as-admin is not given.
func (f *clientFlags) componentConfig() (*rest.Config, error) {
	if f.kubeconfig == "" {
		if !inCluster() {
			return nil, errors.New("no --kubeconfig, and not in a pod: a component acts as its own identity (its ServiceAccount's kubeconfig), never as whoever runs it")
		}
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("the pod's ServiceAccount: %w", err)
		}
		return cfg, nil
	}
	if _, err := os.Stat(f.kubeconfig); err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", f.kubeconfig, err)
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(&clientcmd.ClientConfigLoadingRules{ExplicitPath: f.kubeconfig}, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", f.kubeconfig, err)
	}
	if !f.asAdmin {
		masters, err := isMasters(cfg)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", f.kubeconfig, err)
		}
		if masters {
			return nil, fmt.Errorf("--kubeconfig %s is system:masters (the cluster's admin, beyond RBAC): a component acts as its own identity; pass its ServiceAccount's kubeconfig, or --as-admin to try it out as admin", f.kubeconfig)
		}
	}
	return cfg, nil
}

// isMasters reports whether a config's client certificate puts it in
// system:masters.
func isMasters(cfg *rest.Config) (bool, error) {
	raw := cfg.CertData
	if len(raw) == 0 && cfg.CertFile != "" {
		var err error
		if raw, err = os.ReadFile(cfg.CertFile); err != nil {
			return false, err
		}
	}
	for len(raw) > 0 {
		var block *pem.Block
		block, raw = pem.Decode(raw)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return false, fmt.Errorf("its client certificate: %w", err)
		}
		if slices.Contains(cert.Subject.Organization, "system:masters") {
			return true, nil
		}
	}
	return false, nil
}
