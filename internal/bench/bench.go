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
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"

	"github.com/capstan-dev/capstan/internal/cluster"
)

// PeakRSS returns the process's peak resident set size in bytes (VmHWM).
func PeakRSS() (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
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
	return 0, fmt.Errorf("no VmHWM in /proc/self/status")
}

// MiB formats bytes as MiB.
func MiB(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// GiB formats bytes as GiB.
func GiB(b int64) string { return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30)) }

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
