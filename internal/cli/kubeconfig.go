package cli

import (
	"fmt"
	"os"
	"path/filepath"

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
}

func (f *clientFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster to use (default: DATA_DIR/kubeconfig, then $KUBECONFIG)")
	fs.StringVar(&f.dataDir, "data-dir", defaultDataDir(), "data dir of the capstan cluster to use when --kubeconfig is not given")
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
