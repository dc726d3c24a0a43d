package controlplane

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/capstan-dev/capstan/internal/datadir"
	"github.com/capstan-dev/capstan/internal/etcd"
)

// SaveEtcdSnapshot saves a snapshot of the etcd of dataDir to path, with
// the client certificate capstan's own clients present (what OpenShift's
// cluster-backup.sh does with etcdctl snapshot save).
func SaveEtcdSnapshot(ctx context.Context, dataDir, path string) (etcd.SnapshotStatus, error) {
	if _, err := os.Stat(filepath.Join(dataDir, "etcd-members.json")); err != nil {
		return etcd.SnapshotStatus{}, fmt.Errorf("%s is not the data dir of a started capstan cluster: %w", dataDir, err)
	}
	return etcd.SaveSnapshot(ctx, dataDir, datadir.EtcdTLSFiles((&datadir.DataDir{Root: dataDir}).PKIDir()), path)
}

// RestoreEtcd restores the etcd of dataDir from the snapshot at from, as
// OpenShift's cluster-restore.sh does (see etcd.Restore). It holds the
// data dir's lock meanwhile, and refuses while capstan runs on it.
func RestoreEtcd(dataDir, from, member string) (etcd.RestoreResult, error) {
	return withStoppedEtcd(dataDir, func(d *datadir.DataDir) (etcd.RestoreResult, error) {
		return etcd.Restore(d.Root, from, member)
	})
}

// QuorumRestoreEtcd makes the etcd of dataDir a cluster of one surviving
// member from its own data, as OpenShift's quorum-restore.sh does (see
// etcd.QuorumRestore), holding the data dir's lock meanwhile.
func QuorumRestoreEtcd(ctx context.Context, dataDir, member string) (etcd.RestoreResult, error) {
	return withStoppedEtcd(dataDir, func(d *datadir.DataDir) (etcd.RestoreResult, error) {
		return etcd.QuorumRestore(ctx, d.Root, datadir.EtcdTLSFiles(d.PKIDir()), member)
	})
}

// withStoppedEtcd runs restore on dataDir with its lock held: capstan
// must not run on it.
func withStoppedEtcd(dataDir string, restore func(*datadir.DataDir) (etcd.RestoreResult, error)) (etcd.RestoreResult, error) {
	if _, err := os.Stat(filepath.Join(dataDir, "etcd-members.json")); err != nil {
		return etcd.RestoreResult{}, fmt.Errorf("%s is not the data dir of a started capstan cluster: %w", dataDir, err)
	}
	d, err := datadir.Open(dataDir)
	if err != nil {
		return etcd.RestoreResult{}, fmt.Errorf("stop capstan before restoring its etcd: %w", err)
	}
	defer d.Close()
	return restore(d)
}
