package controlplane

import (
	"fmt"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/capstan-dev/capstan/internal/atomicfile"
)

// ClusterName is the cluster and context name in the kubeconfigs capstan writes.
const ClusterName = "capstan"

// writeKubeconfig writes a kubeconfig that authenticates to server as the
// given client certificate.
func writeKubeconfig(path, server string, caPEM, certPEM, keyPEM []byte, user string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[ClusterName] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts[ClusterName] = &clientcmdapi.Context{Cluster: ClusterName, AuthInfo: user, Namespace: "default"}
	cfg.CurrentContext = ClusterName
	raw, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("encoding kubeconfig %s: %w", path, err)
	}
	return atomicfile.Write(path, raw, 0o600)
}
