package controlplane

import (
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/capstan-dev/capstan/internal/certs"
	"github.com/capstan-dev/capstan/internal/etcdretry"
)

// Identities capstan issues client certificates for.
const (
	AdminUser             = "capstan-admin"
	controllerManagerUser = "system:kube-controller-manager"
	// FrontProxyClientName is the common name of the aggregator's client
	// certificate (kubeadm's name).
	FrontProxyClientName = "front-proxy-client"
)

// ensurePKI creates, or reuses, the cluster CA and every certificate, key
// and kubeconfig the components need.
func (cp *ControlPlane) ensurePKI() error {
	pki := cp.dataDir.PKIDir()
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return err
	}
	ca, err := certs.LoadOrCreateCA(filepath.Join(pki, "ca.crt"), filepath.Join(pki, "ca.key"), "capstan-ca")
	if err != nil {
		return err
	}
	serving := certs.LeafSpec{
		CommonName: "kube-apiserver",
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
		IPs:    []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")},
		Server: true,
	}
	if host, err := os.Hostname(); err == nil && host != "" {
		serving.DNSNames = append(serving.DNSNames, host)
	}
	if ip := net.ParseIP(cp.cfg.BindAddress); ip != nil && !ip.IsUnspecified() && !ip.IsLoopback() {
		serving.IPs = append(serving.IPs, ip)
	}
	if err := ca.EnsureLeaf(filepath.Join(pki, "apiserver.crt"), filepath.Join(pki, "apiserver.key"), serving); err != nil {
		return err
	}
	if _, err := certs.EnsureEtcdPKI(pki); err != nil {
		return err
	}
	if err := certs.EnsureKey(filepath.Join(pki, "sa.key"), filepath.Join(pki, "sa.pub")); err != nil {
		return err
	}
	// The aggregator's own identity towards aggregated API servers (the
	// metrics API): a client certificate of a CA of its own, which those
	// servers trust only for the requestheader users it vouches for.
	frontProxy, err := certs.LoadOrCreateCA(filepath.Join(pki, "front-proxy-ca.crt"), filepath.Join(pki, "front-proxy-ca.key"), "front-proxy-ca")
	if err != nil {
		return err
	}
	if err := frontProxy.EnsureLeaf(filepath.Join(pki, "front-proxy-client.crt"), filepath.Join(pki, "front-proxy-client.key"),
		certs.LeafSpec{CommonName: FrontProxyClientName, Client: true}); err != nil {
		return err
	}

	cp.serverURL = "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(cp.cfg.Port))
	adminCert, adminKey, err := ca.Issue(certs.LeafSpec{CommonName: AdminUser, Organization: []string{"system:masters"}, Client: true})
	if err != nil {
		return err
	}
	if err := writeKubeconfig(cp.dataDir.KubeconfigPath(), cp.serverURL, ca.CertPEM, adminCert, adminKey, "admin"); err != nil {
		return err
	}
	kcmCert, kcmKey, err := ca.Issue(certs.LeafSpec{CommonName: controllerManagerUser, Client: true})
	if err != nil {
		return err
	}
	if err := writeKubeconfig(filepath.Join(pki, "controller-manager.kubeconfig"), cp.serverURL, ca.CertPEM, kcmCert, kcmKey, controllerManagerUser); err != nil {
		return err
	}
	if cp.nodeTokens, err = loadOrCreateNodeTokens(filepath.Join(pki, nodeTokenKeyFile)); err != nil {
		return err
	}
	cp.ca = ca
	cp.adminREST = cp.clientConfig(adminCert, adminKey)
	return nil
}

// clientConfig is a client configuration presenting a client
// certificate. Every in-process component rides out etcd's leader
// elections; capstan's act for many objects at once, so the client-side
// limiter allows bursts (API priority and fairness still applies on the
// server to everyone outside system:masters).
func (cp *ControlPlane) clientConfig(certPEM, keyPEM []byte) *rest.Config {
	return etcdretry.Wrap(&rest.Config{
		Host: cp.serverURL,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   cp.ca.CertPEM,
			CertData: certPEM,
			KeyData:  keyPEM,
		},
		QPS:   2000,
		Burst: 4000,
	})
}

// ClientConfigFor is a client configuration acting as user, a member of
// groups, with a client certificate the cluster CA signs now (it is not
// kept: every start issues new ones). No group may be system:masters:
// an identity given this way gets exactly what RBAC grants it.
func (cp *ControlPlane) ClientConfigFor(user string, groups ...string) (*rest.Config, error) {
	for _, g := range groups {
		if g == "system:masters" {
			return nil, fmt.Errorf("identity %s: system:masters bypasses authorization and is not given out", user)
		}
	}
	certPEM, keyPEM, err := cp.ca.Issue(certs.LeafSpec{CommonName: user, Organization: groups, Client: true})
	if err != nil {
		return nil, err
	}
	return cp.clientConfig(certPEM, keyPEM), nil
}

// WriteKubeconfigFor writes a kubeconfig for cfg, a configuration
// ClientConfigFor returned, for components that read one from a file.
func (cp *ControlPlane) WriteKubeconfigFor(path, user string, cfg *rest.Config) error {
	return writeKubeconfig(path, cp.serverURL, cp.ca.CertPEM, cfg.CertData, cfg.KeyData, user)
}

var logSetup sync.Once

// setupLogging sends klog (used by every upstream component) to
// DATA_DIR/logs/capstan.log, so the terminal shows capstan's own output.
// klog is process-global: the first control plane of a process decides.
func (cp *ControlPlane) setupLogging() error {
	dir := cp.dataDir.LogDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating log dir: %w", err)
	}
	var err error
	logSetup.Do(func() {
		var f *os.File
		f, err = os.OpenFile(filepath.Join(dir, "capstan.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			return
		}
		fs := flag.NewFlagSet("klog", flag.ContinueOnError)
		klog.InitFlags(fs)
		for k, v := range map[string]string{
			"logtostderr":     "false",
			"alsologtostderr": "false",
			"stderrthreshold": "FATAL",
			// Each line once: otherwise klog writes a warning to the
			// INFO and WARNING outputs, an error to three, and
			// SetOutput makes them all this one file.
			"one_output": "true",
			"v":          strconv.Itoa(cp.cfg.LogVerbosity),
		} {
			if serr := fs.Set(k, v); serr != nil {
				err = serr
				return
			}
		}
		klog.SetOutput(f)
		cp.logFile = f
		if cp.cfg.RedirectStderr {
			err = unix.Dup2(int(f.Fd()), 2)
		}
	})
	return err
}
