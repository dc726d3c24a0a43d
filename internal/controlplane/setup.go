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

	"github.com/capstan-dev/capstan/internal/etcd"
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
	ca, err := LoadOrCreateCA(filepath.Join(pki, "ca.crt"), filepath.Join(pki, "ca.key"), "capstan-ca")
	if err != nil {
		return err
	}
	serving := LeafSpec{
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
	if _, err := EnsureEtcdPKI(pki); err != nil {
		return err
	}
	if err := EnsureKey(filepath.Join(pki, "sa.key"), filepath.Join(pki, "sa.pub")); err != nil {
		return err
	}
	// The aggregator's own identity towards aggregated API servers (the
	// metrics API): a client certificate of a CA of its own, which those
	// servers trust only for the requestheader users it vouches for.
	frontProxy, err := LoadOrCreateCA(filepath.Join(pki, "front-proxy-ca.crt"), filepath.Join(pki, "front-proxy-ca.key"), "front-proxy-ca")
	if err != nil {
		return err
	}
	if err := frontProxy.EnsureLeaf(filepath.Join(pki, "front-proxy-client.crt"), filepath.Join(pki, "front-proxy-client.key"),
		LeafSpec{CommonName: FrontProxyClientName, Client: true}); err != nil {
		return err
	}

	cp.serverURL = "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(cp.cfg.Port))
	adminCert, adminKey, err := ca.Issue(LeafSpec{CommonName: AdminUser, Organization: []string{"system:masters"}, Client: true})
	if err != nil {
		return err
	}
	if err := writeKubeconfig(cp.dataDir.KubeconfigPath(), cp.serverURL, ca.CertPEM, adminCert, adminKey, "admin"); err != nil {
		return err
	}
	kcmCert, kcmKey, err := ca.Issue(LeafSpec{CommonName: controllerManagerUser, Client: true})
	if err != nil {
		return err
	}
	if err := writeKubeconfig(filepath.Join(pki, "controller-manager.kubeconfig"), cp.serverURL, ca.CertPEM, kcmCert, kcmKey, controllerManagerUser); err != nil {
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
	certPEM, keyPEM, err := cp.ca.Issue(LeafSpec{CommonName: user, Organization: groups, Client: true})
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
			"v":               strconv.Itoa(cp.cfg.LogVerbosity),
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

// EnsureEtcdPKI creates, or reuses, etcd's own certificate authorities
// and certificates in pki (kubeadm's layout, OpenShift's signers): etcd
// trusts only its signer, pki/etcd/ca.crt, which signs nothing but the
// members' serving and peer certificates and the client certificate of
// kube-apiserver (which capstan's etcd operator and tools present too); a
// peer must also present the peer certificate's name. A second signer,
// pki/etcd/metrics-ca.crt (OpenShift's etcd-metric-signer), signs the
// members' metrics serving certificate and the one client that may read
// their metrics, Prometheus. So no component's certificate from the
// cluster CA is anything to etcd.
func EnsureEtcdPKI(pki string) (etcd.TLSFiles, error) {
	files := EtcdTLSFiles(pki)
	if err := os.MkdirAll(filepath.Join(pki, "etcd"), 0o700); err != nil {
		return etcd.TLSFiles{}, err
	}
	signer, err := LoadOrCreateCA(files.CA, filepath.Join(pki, "etcd", "ca.key"), "etcd-signer")
	if err != nil {
		return etcd.TLSFiles{}, err
	}
	metrics, err := LoadOrCreateCA(files.MetricsCA, filepath.Join(pki, "etcd", "metrics-ca.key"), "etcd-metric-signer")
	if err != nil {
		return etcd.TLSFiles{}, err
	}
	loopback := LeafSpec{DNSNames: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true}
	for _, l := range []struct {
		ca        *CertificateAuthority
		cert, key string
		spec      LeafSpec
	}{
		{signer, files.ServingCert, files.ServingKey, withName(loopback, "etcd-server", nil)},
		{signer, files.PeerCert, files.PeerKey, withClient(withName(loopback, etcd.PeerCommonName, []string{"system:etcd-peers"}))},
		{signer, files.ClientCert, files.ClientKey, LeafSpec{CommonName: "system:etcd-client", Organization: []string{"system:etcd"}, Client: true}},
		{metrics, files.MetricsServingCert, files.MetricsServingKey, withName(loopback, "etcd-metrics", nil)},
		{metrics, files.MetricsClientCert, files.MetricsClientKey, LeafSpec{CommonName: "system:etcd-metric-client", Client: true}},
	} {
		if err := l.ca.EnsureLeaf(l.cert, l.key, l.spec); err != nil {
			return etcd.TLSFiles{}, err
		}
	}
	// The certificates of before etcd had a signer of its own, signed by
	// the cluster CA, which etcd no longer trusts.
	for _, old := range []string{"etcd.crt", "etcd.key", "etcd-client.crt", "etcd-client.key"} {
		_ = os.Remove(filepath.Join(pki, old))
	}
	return files, nil
}

func withName(s LeafSpec, cn string, orgs []string) LeafSpec {
	s.CommonName, s.Organization = cn, orgs
	return s
}

func withClient(s LeafSpec) LeafSpec {
	s.Client = true
	return s
}

// EtcdTLSFiles are where etcd's certificates are in pki.
func EtcdTLSFiles(pki string) etcd.TLSFiles {
	e := func(name string) string { return filepath.Join(pki, "etcd", name) }
	return etcd.TLSFiles{
		CA:          e("ca.crt"),
		ServingCert: e("server.crt"), ServingKey: e("server.key"),
		PeerCert: e("peer.crt"), PeerKey: e("peer.key"),
		ClientCert: filepath.Join(pki, "apiserver-etcd-client.crt"), ClientKey: filepath.Join(pki, "apiserver-etcd-client.key"),
		MetricsCA:          e("metrics-ca.crt"),
		MetricsServingCert: e("metrics-server.crt"), MetricsServingKey: e("metrics-server.key"),
		MetricsClientCert: e("metrics-client.crt"), MetricsClientKey: e("metrics-client.key"),
	}
}
