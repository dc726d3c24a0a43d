package cli

import (
	"context"
	"os"
	"path/filepath"

	"k8s.io/klog/v2"

	"github.com/capstan-dev/capstan/internal/datadir"
	"github.com/capstan-dev/capstan/internal/etcd"
	"github.com/capstan-dev/capstan/internal/planted"
)

// plantedSnapshot is where the planted bug etcd/restore-on-start keeps
// the snapshot it takes when capstan is up.
const plantedSnapshot = "planted-restore-on-start.db"

// plantedRestore is the planted bug etcd/restore-on-start's start: etcd's
// data replaced by the snapshot the last start took once it was up. The
// writes acknowledged since are gone, which the campaign's
// acknowledged-writes invariant must report. Off, it does nothing.
func plantedRestore(dataDir string) {
	if !planted.On(planted.RestoreOnStart) {
		return
	}
	from := filepath.Join(dataDir, plantedSnapshot)
	if _, err := os.Stat(from); err != nil {
		return
	}
	if _, err := etcd.Restore(dataDir, from, ""); err != nil {
		klog.ErrorS(err, "planted bug: restoring etcd")
	}
}

// plantedSave takes the snapshot plantedRestore restores at the next
// start.
func plantedSave(ctx context.Context, d *datadir.DataDir) {
	if !planted.On(planted.RestoreOnStart) {
		return
	}
	tls := datadir.EtcdTLSFiles(d.PKIDir())
	if _, err := etcd.SaveSnapshot(ctx, d.Root, tls, d.Path(plantedSnapshot)); err != nil {
		klog.ErrorS(err, "planted bug: saving a snapshot of etcd")
	}
}
