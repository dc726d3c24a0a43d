package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capstan-dev/capstan/internal/etcd"
)

// The disk-full scenario's disk: a tmpfs of diskSize under the etcd
// members' data dirs, filled for diskFullFor.
const (
	diskSize    = 512 << 20
	diskFullFor = 10 * time.Second
	// fillerName is the file that fills the disk, in its root.
	fillerName = "chaos-filler"
	// freedMarker, in the run's data dir, says the campaign freed the
	// disk (the filler is gone for good).
	freedMarker = "chaos-disk-freed"
)

// etcdDiskFullScenario fills the disk under etcd's data dir while the
// campaign writes, and frees it after diskFullFor.
func etcdDiskFullScenario() *Scenario {
	return &Scenario{
		Name: "etcd-disk-full",
		Doc: fmt.Sprintf("the disk under etcd's data dir (a tmpfs of %d MiB) filled to the last byte for %s while the campaign writes, "+
			"then freed: etcd meets ENOSPC, nothing acknowledged is lost, the API takes writes again once the space is back",
			diskSize>>20, diskFullFor),
		Args: []string{"--control-plane-nodes", "1", "--nodes", "1"},
		Span: faultSpan,
		// The API may refuse writes while the disk is full, and for
		// etcd's restart after.
		MaxOutage: diskFullFor + time.Minute,
		Timeout:   settleTime,
		Prepare:   mountEtcdDisk,
		Requires:  canMount,
		Progress:  etcdDiskFullProgress,
		Check:     checkDiskFull,
	}
}

// diskRoot is the mount point: the members' data dirs.
func diskRoot(dataDir string) string { return filepath.Join(dataDir, etcd.MembersDir) }

// mountEtcdDisk mounts a tmpfs of diskSize where the members keep their
// data, before capstan's first start, and unmounts it after the run.
func mountEtcdDisk(r *Run) (func(), error) {
	root := diskRoot(r.DataDir)
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	if err := syscall.Mount("tmpfs", root, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", diskSize)); err != nil {
		return nil, fmt.Errorf("the %s scenario mounts a size-limited tmpfs on %s and needs the right to (root, CAP_SYS_ADMIN): %w",
			"etcd-disk-full", root, err)
	}
	stop := make(chan struct{})
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		keepDisk(r, stop)
	}()
	return func() {
		close(stop)
		<-kept
		_ = syscall.Unmount(root, syscall.MNT_DETACH)
	}, nil
}

// keepDisk frees the disk once it has been full for diskFullFor of the
// operation's time, on its own: the scenario's progress may be waiting on
// an API that does not answer while the disk is full. While capstan is
// not up (killed, or starting after a kill) the disk is freed too, and
// the progress fills it again once capstan is up, for what is left: a
// start on a full disk is a fault of its own, and the operation's time
// stands still meanwhile.
func keepDisk(r *Run, stop <-chan struct{}) {
	filler := filepath.Join(diskRoot(r.DataDir), fillerName)
	freed := filepath.Join(r.DataDir, freedMarker)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	// fullFrom is the operation's time when the disk was first filled.
	fullFrom := time.Duration(-1)
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		if _, err := os.Stat(freed); err == nil {
			continue
		}
		if _, err := os.Stat(filler); err != nil {
			continue
		}
		if fullFrom < 0 {
			fullFrom = r.opTime()
		}
		switch {
		case r.opTime()-fullFrom >= diskFullFor:
			if os.WriteFile(freed, []byte(time.Now().Format(time.RFC3339Nano)), 0o600) == nil {
				_ = os.Remove(filler)
			}
		case !r.alive():
			_ = os.Remove(filler)
		}
	}
}

// canMount reports why this process may not mount the disk-full
// scenario's filesystem (nil when it may).
func canMount() error {
	dir, err := os.MkdirTemp("", "capstan-mount-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		return fmt.Errorf("mounting a tmpfs needs root (CAP_SYS_ADMIN): %w", err)
	}
	return syscall.Unmount(dir, 0)
}

// etcdDiskFullProgress goes through the phases full (the disk filled,
// then written to until etcd meets the full disk) and
// freed (once keepDisk freed it and etcd took the phase's write).
func etcdDiskFullProgress(ctx context.Context, r *Run) (bool, string, error) {
	filler := filepath.Join(diskRoot(r.DataDir), fillerName)
	freed := filepath.Join(r.DataDir, freedMarker)
	ph, err := phase(ctx, r)
	if err != nil {
		return false, "", err
	}
	_, freedErr := os.Stat(freed)
	switch {
	case ph == "":
		if !r.alive() {
			return false, "waiting for capstan to be up", nil
		}
		// The load's namespace, apart from the acknowledged writes the
		// campaign lists after each kill; then the phase, which may not be
		// written once the disk is full.
		_, err := r.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: loadNamespace}}, metav1.CreateOptions{})
		if created(err) != nil {
			return false, "", err
		}
		return false, "filling the disk", setPhase(ctx, r, "full")
	case ph == "full" && freedErr != nil:
		if _, err := os.Stat(filler); err != nil {
			if !r.alive() {
				return false, "the disk is freed while capstan starts", nil
			}
			n, err := fill(filler)
			if err != nil {
				return false, "", err
			}
			return false, fmt.Sprintf("the disk is full (%d MiB written)", n>>20), nil
		}
		// Writes as a busy cluster makes them: etcd's preallocated log
		// segment and its database's free pages run out, and it meets
		// the full disk.
		return false, "the disk is full: " + loadWrites(ctx, r, 8), nil
	case ph == "full":
		return false, "the disk is freed", setPhase(ctx, r, "freed")
	case ph == "freed":
		// The phase's write went through: etcd takes writes again.
		return true, "", nil
	}
	return false, "", fmt.Errorf("phase %q is not one of the disk-full scenario's", ph)
}

// loadNamespace holds the disk-full scenario's load.
const loadNamespace = "capstan-chaos-load"

// loadSize is the size of each of loadWrites' ConfigMaps: most of what
// etcd takes in one request.
const loadSize = 900 << 10

// loadWrites creates n ConfigMaps of loadSize in loadNamespace and says how many etcd took. They are load, not acknowledged writes the
// campaign checks: etcd may refuse them while its disk is full.
func loadWrites(ctx context.Context, r *Run, n int) string {
	data := strings.Repeat("x", loadSize)
	took := 0
	var last error
	for i := range n {
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("load-%d-%d", time.Now().UnixNano(), i), Namespace: loadNamespace},
			Data: map[string]string{"load": data}}
		_, last = r.Kube.CoreV1().ConfigMaps(loadNamespace).Create(wctx, cm, metav1.CreateOptions{})
		cancel()
		if last != nil {
			break
		}
		took++
	}
	if last != nil {
		return fmt.Sprintf("%d of %d load writes taken (%v)", took, n, last)
	}
	return fmt.Sprintf("%d load writes taken", took)
}

// fill writes path until the file system has no byte left, and returns
// how much it wrote. Anything but ENOSPC is the campaign's own failure.
func fill(path string) (int64, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			return 0, nil
		}
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var n int64
	for {
		w, err := f.Write(buf)
		n += int64(w)
		if errors.Is(err, syscall.ENOSPC) {
			break
		}
		if err != nil {
			return n, err
		}
	}
	// The last pages, smaller than the buffer.
	for size := len(buf) / 2; size >= 512; size /= 2 {
		for {
			w, err := f.Write(buf[:size])
			n += int64(w)
			if err != nil {
				break
			}
		}
	}
	return n, nil
}

// checkDiskFull checks that the fault happened as planned: the disk was
// full (the filler met ENOSPC) and then freed, and that etcd met the full
// disk (its log says so). Lost acknowledged writes and the outage bound are
// the campaign's own checks.
func checkDiskFull(_ context.Context, r *Run) []Violation {
	var out []Violation
	if _, err := os.Stat(filepath.Join(r.DataDir, freedMarker)); err != nil {
		out = append(out, Violation{"disk full", "the campaign never freed the disk: there was no full disk to recover from"})
	}
	f, err := os.Open(filepath.Join(r.DataDir, "logs", "etcd.log"))
	if err != nil {
		return append(out, Violation{"disk full", fmt.Sprintf("etcd's log: %v", err)})
	}
	defer f.Close()
	raw, err := io.ReadAll(f)
	if err != nil {
		return append(out, Violation{"disk full", fmt.Sprintf("etcd's log: %v", err)})
	}
	if !strings.Contains(string(raw), "no space left on device") {
		out = append(out, Violation{"disk full", "etcd's log never mentions the full disk (no space left on device): the fault did not reach etcd"})
	}
	return out
}
