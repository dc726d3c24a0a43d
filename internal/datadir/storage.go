package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/capstan-dev/capstan/internal/etcd"
)

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

// StorageClient connects to the etcd members of a data dir with the client
// certificate capstan's own clients present: for tools that read the
// cluster's storage itself, such as `capstan chaos`, which records every
// revision of the objects it checks. The members are those the data dir
// lists now (they change as control-plane machines come and go); a member
// that is down is skipped by the client.
func StorageClient(dataDir string) (*clientv3.Client, error) {
	endpoints, err := StorageEndpoints(dataDir)
	if err != nil {
		return nil, err
	}
	pki := (&DataDir{Root: dataDir}).PKIDir()
	files := EtcdTLSFiles(pki)
	tlsInfo := transport.TLSInfo{CertFile: files.ClientCert, KeyFile: files.ClientKey, TrustedCAFile: files.CA}
	tlsConfig, err := tlsInfo.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("the etcd client certificate of %s: %w", dataDir, err)
	}
	return clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: tlsConfig, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
}

// StorageEndpoints are the client URLs of the etcd members a data dir
// lists now.
func StorageEndpoints(dataDir string) ([]string, error) {
	d := &DataDir{Root: dataDir}
	members, err := etcd.ReadRegistry(dataDir)
	if err != nil {
		return nil, fmt.Errorf("reading the etcd members of %s: %w", dataDir, err)
	}
	var endpoints []string
	for _, m := range members {
		if !m.Adding {
			endpoints = append(endpoints, m.ClientURL())
		}
	}
	if len(endpoints) == 0 {
		// The bootstrap member alone, before any registry.
		st, err := d.readState()
		if errors.Is(err, os.ErrNotExist) || err == nil && st.EtcdClientPort == 0 {
			return nil, fmt.Errorf("data dir %s has no etcd yet", dataDir)
		}
		if err != nil {
			return nil, err
		}
		endpoints = []string{"https://127.0.0.1:" + strconv.Itoa(st.EtcdClientPort)}
	}
	return endpoints, nil
}
