// Package controlplane runs an embedded Kubernetes control plane in this
// process: etcd, kube-apiserver and kube-controller-manager from the upstream
// modules, with the PKI, kubeconfigs, admission configuration and OpenShift
// CRDs capstan keeps in a data dir.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/capstan-dev/capstan/internal/certs"
	"github.com/capstan-dev/capstan/internal/datadir"
	"github.com/capstan-dev/capstan/internal/etcd"
	"github.com/capstan-dev/capstan/internal/waitfor"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// Config is what `capstan up` (or a test harness) asks of the control plane.
type Config struct {
	// DataDir holds everything the cluster keeps between runs.
	DataDir string
	// BindAddress and Port are where kube-apiserver serves. Port 0 picks a
	// free port.
	BindAddress string
	Port        int

	// Node lifecycle controller timings and eviction rates (the
	// kube-controller-manager flags of the same names).
	NodeMonitorPeriod         time.Duration
	NodeMonitorGracePeriod    time.Duration
	NodeStartupGracePeriod    time.Duration
	NodeEvictionRate          float32
	SecondaryNodeEvictionRate float32
	LargeClusterSizeThreshold int32
	UnhealthyZoneThreshold    float32

	// DefaultTolerationSeconds admission plugin settings.
	DefaultNotReadyTolerationSeconds    int64
	DefaultUnreachableTolerationSeconds int64

	// EtcdNoFsync trades durability for speed (tests only).
	EtcdNoFsync bool
	// EtcdPartitionable serves every etcd member's peer port through a
	// proxy that the data dir's partition file controls: a fault
	// campaign cuts a member from the others with it.
	EtcdPartitionable bool
	// LogVerbosity is the klog level written to DATA_DIR/logs/capstan.log.
	LogVerbosity int
	// RedirectStderr points file descriptor 2 at the log file too: embedded
	// libraries (the etcd client, grpc) write there directly. Only a
	// command that kept its own copy of the terminal's stderr sets it.
	RedirectStderr bool

	// Admission are `capstan up` flags layered over the admission files.
	Admission AdmissionOverrides

	// BeforeControllers runs once the apiserver is ready and before the
	// controller manager starts: it starts what must serve before any
	// controller writes. capstan's admission webhooks fail closed, and a
	// controller whose write a webhook refused may never try again (the
	// deployment controller drops a failed scale-down until the next
	// event), so they serve first.
	BeforeControllers func(ctx context.Context, cp *ControlPlane) error

	// DisableAuditLog turns off the apiserver's audit log, on by default
	// in DATA_DIR/logs/audit.log.
	DisableAuditLog bool

	// KubernetesOnly serves Kubernetes' own APIs alone: the OpenShift
	// CRDs are not installed. What runs on capstan needs them; a plain
	// Kubernetes cluster to read, as a stand-in for one, does not.
	KubernetesOnly bool

	// Extra flags appended verbatim to the upstream components' flags.
	ExtraAPIServerFlags         []string
	ExtraControllerManagerFlags []string
}

// DefaultConfig returns upstream's defaults for every timing, and capstan's
// defaults for the rest.
func DefaultConfig() Config {
	return Config{
		DataDir:                             ".capstan",
		BindAddress:                         "127.0.0.1",
		Port:                                6443,
		NodeMonitorPeriod:                   5 * time.Second,
		NodeMonitorGracePeriod:              50 * time.Second,
		NodeStartupGracePeriod:              time.Minute,
		NodeEvictionRate:                    0.1,
		SecondaryNodeEvictionRate:           0.01,
		LargeClusterSizeThreshold:           50,
		UnhealthyZoneThreshold:              0.55,
		DefaultNotReadyTolerationSeconds:    300,
		DefaultUnreachableTolerationSeconds: 300,
	}
}

// ControlPlane is a running embedded control plane.
type ControlPlane struct {
	cfg     Config
	dataDir *datadir.DataDir

	cancel    context.CancelFunc
	etcd      *etcd.Cluster
	apiDone   <-chan error
	kcmDone   <-chan error
	adminREST *rest.Config
	ca        *certs.CertificateAuthority
	// nodeTokens sign and check the simulated kubelets' credentials.
	nodeTokens *nodeTokens
	serverURL  string
	logFile    *os.File
	stopped    chan struct{}
	stopResult error
	// Warnings are problems found at start that did not stop it, such as
	// an admission file that does not parse.
	Warnings []string
}

// Start brings the control plane up and returns once the apiserver is ready,
// the controller manager runs and the CRDs are established. Every failure
// before that point releases what was started, leaving the data dir as it
// was apart from files capstan itself creates (PKI, configs, etcd data).
func Start(ctx context.Context, cfg Config) (_ *ControlPlane, err error) {
	if err := validateConfig(cfg); err != nil {
		return nil, err
	}
	d, err := datadir.Open(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{cfg: cfg, dataDir: d, stopped: make(chan struct{})}
	runCtx, cancel := context.WithCancel(context.Background())
	cp.cancel = cancel
	defer func() {
		if err != nil {
			cp.Stop()
		}
	}()

	listener, err := net.Listen("tcp", net.JoinHostPort(cfg.BindAddress, strconv.Itoa(cfg.Port)))
	if err != nil {
		return nil, fmt.Errorf("port %d on %s is not available: %w", cfg.Port, cfg.BindAddress, unwrapOpError(err))
	}
	cp.cfg.Port = listener.Addr().(*net.TCPAddr).Port
	if err := cp.setupLogging(); err != nil {
		listener.Close()
		return nil, err
	}
	if err := cp.ensurePKI(); err != nil {
		listener.Close()
		return nil, fmt.Errorf("preparing certificates: %w", err)
	}
	if cp.Warnings, err = prepareAdmission(d.AdmissionDir(), cfg.Admission); err != nil {
		listener.Close()
		return nil, fmt.Errorf("admission configuration: %w", err)
	}
	cp.Warnings = append(d.Warnings, cp.Warnings...)
	for _, w := range cp.Warnings {
		klog.Warning(w)
	}
	clientPort, peerPort, err := d.EtcdPorts()
	if err != nil {
		listener.Close()
		return nil, err
	}
	pki := d.PKIDir()
	cp.etcd, err = etcd.Start(ctx, etcd.Config{DataDir: d.Root, LogFile: d.Path("logs", "etcd.log"), NoFsync: cfg.EtcdNoFsync, Partitionable: cfg.EtcdPartitionable,
		TLS:       datadir.EtcdTLSFiles(pki),
		Bootstrap: etcd.MemberSpec{Name: etcd.BootstrapName, Dir: "etcd", ClientPort: clientPort, PeerPort: peerPort}})
	if err != nil {
		listener.Close()
		return nil, err
	}
	klog.InfoS("Started etcd", "url", cp.etcd.URL())
	cp.Warnings = append(cp.Warnings, cp.etcd.Warnings...)

	if cp.apiDone, err = cp.runAPIServer(runCtx, cp.etcd.URL(), listener); err != nil {
		listener.Close()
		return nil, err
	}
	if err := cp.waitReady(ctx); err != nil {
		return nil, err
	}
	if cfg.BeforeControllers != nil {
		if err := cfg.BeforeControllers(ctx, cp); err != nil {
			return nil, err
		}
	}
	klog.InfoS("Starting kube-controller-manager")
	if cp.kcmDone, err = cp.runControllerManager(runCtx); err != nil {
		return nil, err
	}
	if !cfg.KubernetesOnly {
		if err := InstallCRDs(ctx, cp.adminREST); err != nil {
			return nil, fmt.Errorf("installing OpenShift CRDs: %w", err)
		}
	}
	if err := cp.controllerManagerRuns(); err != nil {
		return nil, err
	}
	return cp, nil
}

// controllerManagerRuns fails when kube-controller-manager has stopped
// already: its Run returns an error on what it cannot set up (a
// configuration registered twice in the process, say), and a control
// plane without it runs no controller at all.
func (cp *ControlPlane) controllerManagerRuns() error {
	select {
	case err := <-cp.kcmDone:
		// Stop reads the result again.
		done := make(chan error, 1)
		done <- err
		cp.kcmDone = done
		return fmt.Errorf("kube-controller-manager stopped as it started: %v", err)
	default:
		return nil
	}
}

func validateConfig(cfg Config) error {
	var errs []error
	if cfg.DataDir == "" {
		errs = append(errs, errors.New("--data-dir must not be empty"))
	}
	if cfg.Port < 0 || cfg.Port > 65535 {
		errs = append(errs, fmt.Errorf("--port %d is not a TCP port (0-65535)", cfg.Port))
	}
	if net.ParseIP(cfg.BindAddress) == nil {
		errs = append(errs, fmt.Errorf("--bind-address %q is not an IP address", cfg.BindAddress))
	}
	for name, d := range map[string]time.Duration{
		"--node-monitor-period":       cfg.NodeMonitorPeriod,
		"--node-monitor-grace-period": cfg.NodeMonitorGracePeriod,
		"--node-startup-grace-period": cfg.NodeStartupGracePeriod,
	} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %s", name, d))
		}
	}
	if cfg.NodeMonitorGracePeriod > 0 && cfg.NodeMonitorPeriod >= cfg.NodeMonitorGracePeriod {
		errs = append(errs, fmt.Errorf("--node-monitor-period (%s) must be shorter than --node-monitor-grace-period (%s)", cfg.NodeMonitorPeriod, cfg.NodeMonitorGracePeriod))
	}
	if cfg.NodeEvictionRate <= 0 || cfg.SecondaryNodeEvictionRate < 0 {
		errs = append(errs, fmt.Errorf("--node-eviction-rate must be positive and --secondary-node-eviction-rate not negative"))
	}
	if cfg.UnhealthyZoneThreshold <= 0 || cfg.UnhealthyZoneThreshold > 1 {
		errs = append(errs, fmt.Errorf("--unhealthy-zone-threshold %v must be in (0, 1]", cfg.UnhealthyZoneThreshold))
	}
	if cfg.DefaultNotReadyTolerationSeconds < 0 || cfg.DefaultUnreachableTolerationSeconds < 0 {
		errs = append(errs, errors.New("default toleration seconds must not be negative"))
	}
	return errors.Join(errs...)
}

// waitReady polls /readyz until the apiserver reports ready.
func (cp *ControlPlane) waitReady(ctx context.Context) error {
	client, err := kubernetes.NewForConfig(cp.adminREST)
	if err != nil {
		return err
	}
	err = waitfor.Poll(ctx, 100*time.Millisecond, 3*time.Minute, func(ctx context.Context) (bool, string, error) {
		select {
		case err := <-cp.apiDone:
			return false, "", fmt.Errorf("kube-apiserver exited while starting: %v (see %s)", err, cp.dataDir.Path("logs", "capstan.log"))
		default:
		}
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return false, fmt.Sprintf("%v: %s", err, body), nil
		}
		return true, "", nil
	})
	if err != nil {
		return fmt.Errorf("kube-apiserver did not become ready: %w", err)
	}
	return err
}

// AdminConfig returns a client configuration with cluster-admin rights
// (system:masters), for capstan's own in-process components.
func (cp *ControlPlane) AdminConfig() *rest.Config { return rest.CopyConfig(cp.adminREST) }

// KubeconfigPath is where the admin kubeconfig was written.
func (cp *ControlPlane) KubeconfigPath() string { return cp.dataDir.KubeconfigPath() }

// ServerURL is the apiserver's URL.
func (cp *ControlPlane) ServerURL() string { return cp.serverURL }

// DataDir is the data dir the control plane runs on.
func (cp *ControlPlane) DataDir() *datadir.DataDir { return cp.dataDir }

// Stop shuts everything down in reverse order and releases the data dir.
// It is safe to call more than once.
func (cp *ControlPlane) Stop() error {
	select {
	case <-cp.stopped:
		return cp.stopResult
	default:
	}
	cp.cancel()
	var errs []error
	waitFor := func(name string, ch <-chan error) {
		if ch == nil {
			return
		}
		select {
		case err := <-ch:
			if err != nil && !errors.Is(err, context.Canceled) {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		case <-time.After(90 * time.Second):
			errs = append(errs, fmt.Errorf("%s did not stop within 90s", name))
		}
	}
	waitFor("kube-controller-manager", cp.kcmDone)
	waitFor("kube-apiserver", cp.apiDone)
	if cp.etcd != nil {
		cp.etcd.Stop()
	}
	klog.Flush()
	cp.dataDir.Close()
	cp.stopResult = errors.Join(errs...)
	close(cp.stopped)
	return cp.stopResult
}

func unwrapOpError(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		var se *os.SyscallError
		if errors.As(oe.Err, &se) {
			return se.Err
		}
		return oe.Err
	}
	return err
}

// Etcd is the control plane's etcd: its members and their membership.
func (cp *ControlPlane) Etcd() *etcd.Cluster { return cp.etcd }

// WaitWritable waits until the API has written something to etcd: a
// "Started" event in the default namespace. The apiserver reports ready
// once etcd answers, but a leader elected among members that started
// together may be replaced a moment later, and a write in that moment
// fails; a client told the cluster is up must find it taking writes.
func (cp *ControlPlane) WaitWritable(ctx context.Context, timeout time.Duration) error {
	client, err := kubernetes.NewForConfig(cp.adminREST)
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	now := time.Now()
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("capstan.%x", now.UnixNano()), Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "Namespace", Name: metav1.NamespaceDefault},
		Reason:         "Started",
		Message:        fmt.Sprintf("capstan is up (pid %d on %s)", os.Getpid(), host),
		Source:         corev1.EventSource{Component: "capstan", Host: host},
		Type:           corev1.EventTypeNormal,
		Count:          1,
		FirstTimestamp: metav1.NewTime(now), LastTimestamp: metav1.NewTime(now),
		ReportingController: "capstan", ReportingInstance: host,
	}
	err = waitfor.Poll(ctx, 100*time.Millisecond, timeout, func(ctx context.Context) (bool, string, error) {
		_, err := client.CoreV1().Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return false, err.Error(), nil
		}
		return true, "", nil
	})
	if err != nil {
		return fmt.Errorf("the API takes no writes: %w", err)
	}
	return nil
}
