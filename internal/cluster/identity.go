package cluster

import (
	"context"
	"fmt"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	configclient "github.com/openshift/client-go/config/clientset/versioned"

	"github.com/capstan-dev/capstan/deploy"
)

// identity is how a component reaches the API server: as its
// ServiceAccount, with the rights its deploy/COMPONENT/rbac.yaml grants.
type identity struct {
	// cfg is its client configuration (JSON: custom resources need it).
	cfg *rest.Config
	// kube speaks protobuf; config is the config.openshift.io clientset.
	kube   kubernetes.Interface
	config configclient.Interface
}

// as returns a component's identity, applying its rbac.yaml first (as an
// installer would, with the admin's rights). No controller of capstan up
// acts as the admin: what one does shows in the audit log under its own
// name, and a bug in it has its rights only.
func (c *Cluster) as(ctx context.Context, component string) (*identity, error) {
	comp, err := deploy.Lookup(component)
	if err != nil {
		return nil, err
	}
	c.identMu.Lock()
	defer c.identMu.Unlock()
	if id := c.identities[component]; id != nil {
		return id, nil
	}
	dyn, err := dynamic.NewForConfig(c.ControlPlane.AdminConfig())
	if err != nil {
		return nil, err
	}
	if err := deploy.ApplyRBAC(ctx, dyn, component); err != nil {
		return nil, err
	}
	cfg, err := c.ControlPlane.ClientConfigFor(comp.Username(), comp.Groups()...)
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "capstan-" + component
	id := &identity{cfg: cfg}
	if id.kube, err = kubernetes.NewForConfig(ProtobufConfig(cfg)); err != nil {
		return nil, err
	}
	if id.config, err = configclient.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if c.identities == nil {
		c.identities = map[string]*identity{}
	}
	c.identities[component] = id
	return id, nil
}

// componentKubeconfig writes a kubeconfig acting as a component, for one
// that reads its credentials from a file, and returns its path.
func (c *Cluster) componentKubeconfig(ctx context.Context, component string) (string, error) {
	id, err := c.as(ctx, component)
	if err != nil {
		return "", err
	}
	comp, _ := deploy.Lookup(component)
	path := c.ControlPlane.DataDir().Path("pki", component+".kubeconfig")
	if err := c.ControlPlane.WriteKubeconfigFor(path, comp.Username(), id.cfg); err != nil {
		return "", fmt.Errorf("kubeconfig of %s: %w", component, err)
	}
	return path, nil
}
