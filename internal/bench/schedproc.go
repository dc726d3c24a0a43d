package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/kubesched"
	"github.com/capstan-dev/capstan/internal/scheduler"
)

// SchedulerProcessOptions run one scheduler for the benchmark, in a process
// of its own so that its CPU and memory are its own.
type SchedulerProcessOptions struct {
	Scheduler  string
	Kubeconfig string
	// QPS and Burst are the client's rate limit; QPS <= 0 is unlimited.
	QPS   float32
	Burst int
}

// syncedPrefix starts the line a scheduler process prints once its caches
// have synced: the benchmark's clock starts then. cpuPrefix starts the
// line it prints on SIGUSR1: the CPU it has used so far, which a workload
// with init pods reads before its measured pods come.
const (
	syncedPrefix = "SYNCED "
	cpuPrefix    = "CPU "
)

// answerCPU prints the process's CPU on every SIGUSR1 until ctx ends.
func answerCPU(ctx context.Context, out io.Writer) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	go func() {
		defer signal.Stop(sig)
		for {
			select {
			case <-ctx.Done():
				return
			case <-sig:
				fmt.Fprintf(out, "%s%g\n", cpuPrefix, selfCPUSeconds())
			}
		}
	}()
}

// syncReport is what the scheduler process says when it is ready: the
// rate limit its client really has and the CPU it used to get there.
type syncReport struct {
	// ClientQPS is the QPS of the client's rate limiter; 0 means none.
	ClientQPS   float32 `json:"clientQPS"`
	ClientBurst int     `json:"clientBurst"`
	// StartupCPUSeconds is the user and system CPU used until synced.
	StartupCPUSeconds float64 `json:"startupCPUSeconds"`
}

// RunSchedulerProcess runs the chosen scheduler against the cluster of
// Kubeconfig until ctx ends, printing the sync report to out once ready.
func RunSchedulerProcess(ctx context.Context, o SchedulerProcessOptions, out io.Writer) error {
	answerCPU(ctx, out)
	qps := o.QPS
	if qps <= 0 {
		qps = -1 // client-go: no rate limiter
	}
	switch o.Scheduler {
	case SchedulerCapstan:
		cfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
		if err != nil {
			return err
		}
		cfg.QPS, cfg.Burst = qps, o.Burst
		client, err := kubernetes.NewForConfig(cluster.ProtobufConfig(cfg))
		if err != nil {
			return err
		}
		s, err := scheduler.New(client, scheduler.Config{Name: scheduler.DefaultSchedulerName, Seed: 1})
		if err != nil {
			return err
		}
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		select {
		case <-s.Synced():
		case err := <-done:
			return fmt.Errorf("capstan scheduler stopped before it synced: %v", err)
		}
		if err := reportSynced(out, client.CoreV1().RESTClient().GetRateLimiter(), cfg.Burst); err != nil {
			return err
		}
		return <-done
	case SchedulerKube:
		// Upstream kube-scheduler in its default configuration; only
		// the client's rate limit is set.
		dir, err := os.MkdirTemp("", "capstan-bench-kube-scheduler-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		s, err := kubesched.Setup(ctx, kubesched.Options{Kubeconfig: o.Kubeconfig, QPS: o.QPS, Burst: o.Burst, Dir: dir})
		if err != nil {
			return err
		}
		limiter, burst := s.RateLimit()
		if err := reportSynced(out, limiter, burst); err != nil {
			return err
		}
		return s.Run(ctx)
	}
	return fmt.Errorf("scheduler %q: want %s or %s", o.Scheduler, SchedulerCapstan, SchedulerKube)
}

func reportSynced(out io.Writer, limiter flowcontrol.RateLimiter, burst int) error {
	r := syncReport{StartupCPUSeconds: selfCPUSeconds()}
	if limiter != nil {
		r.ClientQPS, r.ClientBurst = limiter.QPS(), burst
	}
	raw, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s%s\n", syncedPrefix, raw)
	if f, ok := out.(*os.File); ok {
		_ = f.Sync()
	}
	return err
}

// selfCPUSeconds is the user and system CPU this process has used.
func selfCPUSeconds() float64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return tvSeconds(ru.Utime) + tvSeconds(ru.Stime)
}

func tvSeconds(tv unix.Timeval) float64 { return float64(tv.Sec) + float64(tv.Usec)/1e6 }
