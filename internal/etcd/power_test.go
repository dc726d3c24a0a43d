package etcd_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/capstan-dev/capstan/internal/etcd"
	"github.com/capstan-dev/capstan/internal/powerfs"
)

// etcd on a disk whose power is cut: every write it acknowledged is there
// after the cut, since etcd syncs before it answers. The same etcd run
// with --unsafe-no-fsync loses acknowledged writes at the cut: the cut
// drops what was not synced, so the check can fail.
func TestAPowerCutLosesNothingAcknowledged(t *testing.T) {
	if err := powerfs.Available(); err != nil {
		t.Skipf("no power cuts on this machine: %v", err)
	}
	t.Parallel()
	for _, tc := range []struct {
		name    string
		noFsync bool
	}{{"synced", false}, {"unsafe-no-fsync", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			cfg := testConfig(t)
			// The members' data on the powerfs; the certificates beside.
			backing := t.TempDir()
			mnt := filepath.Join(cfg.DataDir, "disk")
			if err := os.Mkdir(mnt, 0o700); err != nil {
				t.Fatal(err)
			}
			disk, err := powerfs.Mount(backing, mnt)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = disk.Unmount() })
			cfg.NoFsync = tc.noFsync
			cfg.Bootstrap.Dir = "disk"
			if tc.noFsync {
				// Without fsync bbolt does not grow its file before it maps
				// it, and on powerfs a member may die at its first start
				// of a SIGBUS in that map (3 runs of 8 on 2026-12-07): a
				// defect of powerfs under mmap, not yet found. The synced
				// case, the guarantee, never met it.
				if c, err := etcd.Start(ctx, cfg); err != nil {
					if raw, _ := os.ReadFile(cfg.LogFile); strings.Contains(string(raw), "signal SIGBUS") {
						t.Skipf("etcd without fsync died of a SIGBUS in bbolt's map on powerfs at its first start (a known defect): %v", err)
					}
					t.Fatalf("the first start: %v", err)
				} else {
					c.Stop()
				}
			}
			c := start(t, cfg, "the first start")
			cl := proxyClient(t, cfg, c)
			const writes = 200
			for i := range writes {
				if _, err := cl.Put(ctx, fmt.Sprintf("/registry/acked-%03d", i), "x"); err != nil {
					t.Fatal(err)
				}
			}
			// The power goes: the processes first, then what was not
			// synced.
			c.Stop()
			if err := disk.Cut(); err != nil {
				t.Fatal(err)
			}
			disk, err = powerfs.Mount(backing, mnt)
			if err != nil {
				t.Fatal(err)
			}
			// Without fsync the data is gone, and the start fails: no need
			// to wait the whole minute for it.
			timeout := time.Minute
			if tc.noFsync {
				timeout = 15 * time.Second
			}
			sctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			c, err = etcd.Start(sctx, cfg)
			if err != nil {
				if tc.noFsync {
					// Every acknowledged write went with the data.
					t.Logf("without fsync etcd does not start after the cut: %v", err)
					return
				}
				t.Fatalf("the start after the cut: %v", err)
			}
			t.Cleanup(c.Stop)
			resp, err := proxyClient(t, cfg, c).Get(ctx, "/registry/acked-", clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case !tc.noFsync && resp.Count != writes:
				t.Errorf("%d of the %d acknowledged writes after the cut, want all", resp.Count, writes)
			case tc.noFsync && resp.Count == writes:
				t.Errorf("all %d writes survived the cut without fsync: the cut dropped nothing", writes)
			}
			t.Logf("%d of %d acknowledged writes after the cut", resp.Count, writes)
		})
	}
}
