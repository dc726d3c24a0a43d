package chaos

import (
	"fmt"
	"os"
	"sync"

	"github.com/capstan-dev/capstan/internal/powerfs"
)

// powerScenario is the machineset scenario on a disk whose power each
// kill cuts: capstan's whole data dir (etcd's members, its registry, the
// logs) is a powerfs, and after each kill, once every process of the
// killed capstan is gone, what was written and not synced is dropped, as
// a machine's power loss drops its page cache. Nothing acknowledged may be
// lost: the acknowledged writes, the linearizability clients' history and
// the storage's watch say.
func powerScenario() *Scenario {
	s := machineSetOp(false)
	s.Name = "power"
	s.Doc = "the machineset scenario with capstan's data dir on a disk whose power every kill cuts (a FUSE filesystem that keeps " +
		"unsynced writes in memory and drops them at the cut, as Jepsen's lazyfs): nothing acknowledged lost, the clients' " +
		"operations linearizable, exactly 3 machines and 3 instances ever made, each node drained before its instance goes"
	var mu sync.Mutex
	var disk *powerfs.FS
	backingOf := func(dir string) string { return dir + ".disk" }
	s.Requires = powerfs.Available
	s.Prepare = func(r *Run) (func(), error) {
		dir := r.DataDir
		backing := backingOf(dir)
		if err := os.MkdirAll(backing, 0o755); err != nil {
			return nil, err
		}
		fs, err := powerfs.Mount(backing, dir)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		disk = fs
		mu.Unlock()
		return func() {
			mu.Lock()
			defer mu.Unlock()
			if disk != nil {
				_ = disk.Unmount()
				disk = nil
			}
			// The data goes back where the run keeps it (or removes it).
			if err := os.Remove(dir); err == nil {
				_ = os.Rename(backing, dir)
			} else {
				_ = os.RemoveAll(backing)
			}
		}, nil
	}
	s.AfterKill = func(dir string) error {
		mu.Lock()
		defer mu.Unlock()
		if disk == nil {
			return fmt.Errorf("the power scenario's disk is not mounted")
		}
		if err := disk.Cut(); err != nil {
			return err
		}
		fs, err := powerfs.Mount(backingOf(dir), dir)
		if err != nil {
			return err
		}
		disk = fs
		return nil
	}
	return s
}
