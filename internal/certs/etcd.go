package certs

import (
	"net"
	"os"
	"path/filepath"

	"github.com/capstan-dev/capstan/internal/datadir"
	"github.com/capstan-dev/capstan/internal/etcd"
)

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
	files := datadir.EtcdTLSFiles(pki)
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
