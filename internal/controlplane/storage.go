package controlplane

import (
	"context"
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

// SaveEtcdSnapshot saves a snapshot of the etcd of dataDir to path, with
// the client certificate capstan's own clients present (what OpenShift's
// cluster-backup.sh does with etcdctl snapshot save).
func SaveEtcdSnapshot(ctx context.Context, dataDir, path string) (etcd.SnapshotStatus, error) {
	if _, err := os.Stat(filepath.Join(dataDir, "etcd-members.json")); err != nil {
		return etcd.SnapshotStatus{}, fmt.Errorf("%s is not the data dir of a started capstan cluster: %w", dataDir, err)
	}
	return etcd.SaveSnapshot(ctx, dataDir, EtcdTLSFiles((&DataDir{Root: dataDir}).PKIDir()), path)
}

// RestoreEtcd restores the etcd of dataDir from the snapshot at from, as
// OpenShift's cluster-restore.sh does (see etcd.Restore). It holds the
// data dir's lock meanwhile, and refuses while capstan runs on it.
func RestoreEtcd(dataDir, from, member string) (etcd.RestoreResult, error) {
	if _, err := os.Stat(filepath.Join(dataDir, "etcd-members.json")); err != nil {
		return etcd.RestoreResult{}, fmt.Errorf("%s is not the data dir of a started capstan cluster: %w", dataDir, err)
	}
	d, err := OpenDataDir(dataDir)
	if err != nil {
		return etcd.RestoreResult{}, fmt.Errorf("stop capstan before restoring its etcd: %w", err)
	}
	defer d.Close()
	return etcd.Restore(d.Root, from, member)
}
