// Package bench measures capstan on its own embedded control plane. The
// figures it prints are the ones the issues ask for; nothing here asserts a
// timing.
package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"

	"github.com/capstan-dev/capstan/internal/cluster"
)

// PeakRSS returns the peak resident set size (VmHWM) of this process plus
// those of the processes it started that still run (the etcd members, one
// process each), in bytes.
func PeakRSS() (int64, error) {
	total, err := vmField("/proc/self/status", "VmHWM:")
	if err != nil {
		return 0, err
	}
	for _, pid := range descendants(os.Getpid()) {
		// A child that ended meanwhile has no status any more.
		if kb, err := vmField(fmt.Sprintf("/proc/%d/status", pid), "VmHWM:"); err == nil {
			total += kb
		}
	}
	return total, nil
}

// vmField reads a size field (VmHWM:, VmRSS:) of a /proc status file, in
// bytes.
func vmField(path, field string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field); ok {
			fields := strings.Fields(v)
			if len(fields) == 0 {
				break
			}
			kb, err := strconv.ParseInt(fields[0], 10, 64)
			if err != nil {
				return 0, err
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("no %s in %s", strings.TrimSuffix(field, ":"), path)
}

// descendants lists the processes below pid, from /proc.
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parens.
		rest := string(raw)
		if i := strings.LastIndexByte(rest, ')'); i >= 0 {
			rest = rest[i+1:]
		}
		fields := strings.Fields(rest)
		if len(fields) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(fields[1]); err == nil {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		out = append(out, children[p]...)
		queue = append(queue, children[p]...)
	}
	return out
}

// MiB formats bytes as MiB.
func MiB(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// GiB formats bytes as GiB.
func GiB(b int64) string { return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30)) }

// dataDir is keep when set, kept afterwards; otherwise a new temporary
// directory (named from prefix) that remove removes.
func dataDir(keep, prefix string) (dir string, remove func(), err error) {
	if keep != "" {
		return keep, func() {}, nil
	}
	if dir, err = os.MkdirTemp("", prefix); err != nil {
		return "", nil, err
	}
	return dir, func() { _ = os.RemoveAll(dir) }, nil
}

// clusterOptions are the options of a benchmark's fresh cluster in dir: any
// free port, no boot nodes, logs to the data dir.
func clusterOptions(dir string, etcdNoFsync bool) cluster.Options {
	opts := cluster.DefaultOptions()
	opts.ControlPlane.DataDir = dir
	opts.ControlPlane.Port = 0
	opts.ControlPlane.EtcdNoFsync = etcdNoFsync
	opts.ControlPlane.RedirectStderr = true
	opts.ControlPlaneNodes, opts.Workers = 0, 0
	opts.BootFromMachines = false
	return opts
}

// startCluster starts the benchmark's cluster in dir.
func startCluster(ctx context.Context, opts cluster.Options, dir string, log io.Writer) (*cluster.Cluster, error) {
	if err := opts.SetLeaseDuration(); err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "Starting a control plane in %s ...\n", dir)
	return cluster.Start(ctx, opts)
}

// StartCPUProfile writes a CPU profile of this process to path until the
// returned function is called (once; later calls do nothing); an empty
// path profiles nothing.
func StartCPUProfile(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			f.Close()
		})
	}, nil
}
