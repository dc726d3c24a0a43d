package etcd

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/etcdhttp"
	"go.uber.org/zap"

	"github.com/capstan-dev/capstan/internal/failpoint"
	"github.com/capstan-dev/capstan/internal/memlimit"
)

// A member runs in its own process, as each control-plane machine's
// kubelet runs etcd as a static pod: `capstan etcd member --name ...`. The
// process prints "ready" on its standard output once it serves, stops
// cleanly on SIGTERM (a leader hands its leadership to a peer first), at
// once on SIGINT (the whole cluster stops), and, started by capstan, dies
// with capstan (the
// kernel's parent-death signal, and the end of its standard input as a
// second warning).

// memberEnv marks a process that capstan started to run one member: any
// binary that links this package (capstan, and the test binaries that
// start clusters) runs the member from its arguments before anything else
// (see init), so the member is always the same code as its supervisor.
const memberEnv = "CAPSTAN_ETCD_MEMBER"

// memberReady is the line a member prints once it serves.
const memberReady = "ready"

func init() {
	if os.Getenv(memberEnv) != "1" || len(os.Args) < 3 || os.Args[1] != "etcd" || os.Args[2] != "member" {
		return
	}
	os.Exit(MemberMain(os.Args[3:], os.Stdout, os.Stderr))
}

// memberArgs are the flags of `capstan etcd member` for this member.
func (c memberConfig) memberArgs() []string {
	args := []string{"etcd", "member",
		"--name", c.spec.Name,
		"--data-dir", c.dir,
		"--client-port", strconv.Itoa(c.spec.ClientPort),
		"--peer-port", strconv.Itoa(c.spec.PeerPort),
		"--trusted-ca-file", c.tls.CA,
		"--cert-file", c.tls.ServingCert,
		"--key-file", c.tls.ServingKey,
		"--peer-cert-file", c.tls.PeerCert,
		"--peer-key-file", c.tls.PeerKey,
		"--metrics-port", strconv.Itoa(c.spec.MetricsPort),
		"--metrics-ca-file", c.tls.MetricsCA,
		"--metrics-cert-file", c.tls.MetricsServingCert,
		"--metrics-key-file", c.tls.MetricsServingKey,
		"--log-file", c.logFile,
		"--exit-with-parent",
	}
	if c.initialCluster != "" {
		args = append(args, "--initial-cluster", c.initialCluster, "--initial-cluster-state", c.state)
	}
	if c.quota > 0 {
		args = append(args, "--quota-backend-bytes", strconv.FormatInt(c.quota, 10))
	}
	if c.forceNewCluster {
		args = append(args, "--force-new-cluster")
	}
	if c.token != "" {
		args = append(args, "--initial-cluster-token", c.token)
	}
	if c.noFsync {
		args = append(args, "--unsafe-no-fsync")
	}
	if c.partitionFile != "" {
		args = append(args, "--partition-file", c.partitionFile)
	}
	return args
}

// MemberMain runs one etcd member from its command-line flags until it is
// stopped (SIGTERM or SIGINT: exit 0) or fails (exit 1); 2 is a usage
// error. It prints "ready" to stdout once the member serves.
func MemberMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("capstan etcd member", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		c                     memberConfig
		exitWithParent        bool
		initialCluster, state string
	)
	fs.StringVar(&c.spec.Name, "name", "", "the member's name (its machine's)")
	fs.StringVar(&c.dir, "data-dir", "", "the member's data dir")
	fs.IntVar(&c.spec.ClientPort, "client-port", 0, "loopback port serving clients")
	fs.IntVar(&c.spec.PeerPort, "peer-port", 0, "loopback port serving peers")
	fs.StringVar(&c.tls.CA, "trusted-ca-file", "", "etcd's signer: the CA of clients and peers")
	fs.StringVar(&c.tls.ServingCert, "cert-file", "", "serving certificate for clients")
	fs.StringVar(&c.tls.ServingKey, "key-file", "", "its key")
	fs.StringVar(&c.tls.PeerCert, "peer-cert-file", "", "peer certificate (server and client), named "+PeerCommonName)
	fs.StringVar(&c.tls.PeerKey, "peer-key-file", "", "its key")
	fs.IntVar(&c.spec.MetricsPort, "metrics-port", 0, "loopback port serving /metrics (to clients of the metrics CA) and /health, /readyz, /livez")
	fs.StringVar(&c.tls.MetricsCA, "metrics-ca-file", "", "the metrics signer: the CA of the metrics' clients")
	fs.StringVar(&c.tls.MetricsServingCert, "metrics-cert-file", "", "serving certificate of the metrics port")
	fs.StringVar(&c.tls.MetricsServingKey, "metrics-key-file", "", "its key")
	fs.StringVar(&c.logFile, "log-file", "", "where the member logs (default: standard error)")
	fs.StringVar(&initialCluster, "initial-cluster", "", "name=peerURL,... of a member without data")
	fs.StringVar(&state, "initial-cluster-state", "existing", "new or existing, for a member without data")
	fs.Int64Var(&c.quota, "quota-backend-bytes", 0, "the database quota, past which etcd raises a NOSPACE alarm (default 8 GiB)")
	fs.BoolVar(&c.forceNewCluster, "force-new-cluster", false, "make the member a cluster of its own, from its own data (capstan etcd restore --quorum)")
	fs.StringVar(&c.token, "initial-cluster-token", "", "the token a new cluster's IDs derive from (default: a new one)")
	fs.BoolVar(&c.noFsync, "unsafe-no-fsync", false, "skip fsync (tests only)")
	fs.StringVar(&c.partitionFile, "partition-file", "", "serve the peer port through a proxy that cuts the members this file lists from the others (fault campaigns)")
	fs.BoolVar(&exitWithParent, "exit-with-parent", false, "exit at once when standard input ends (the parent died)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var missing []string
	for flagName, v := range map[string]string{"name": c.spec.Name, "data-dir": c.dir, "trusted-ca-file": c.tls.CA,
		"cert-file": c.tls.ServingCert, "key-file": c.tls.ServingKey, "peer-cert-file": c.tls.PeerCert, "peer-key-file": c.tls.PeerKey,
		"metrics-ca-file": c.tls.MetricsCA, "metrics-cert-file": c.tls.MetricsServingCert, "metrics-key-file": c.tls.MetricsServingKey} {
		if v == "" {
			missing = append(missing, "--"+flagName)
		}
	}
	for flagName, p := range map[string]int{"client-port": c.spec.ClientPort, "peer-port": c.spec.PeerPort, "metrics-port": c.spec.MetricsPort} {
		if p <= 0 || p > 65535 {
			missing = append(missing, fmt.Sprintf("--%s (a TCP port, not %d)", flagName, p))
		}
	}
	if state != "new" && state != "existing" {
		missing = append(missing, fmt.Sprintf("--initial-cluster-state (new or existing, not %q)", state))
	}
	if len(missing) > 0 || fs.NArg() > 0 {
		fmt.Fprintf(stderr, "capstan etcd member: missing or wrong flags: %v; unexpected arguments: %v\n", missing, fs.Args())
		return 2
	}
	if initialCluster == "" {
		initialCluster = c.spec.Name + "=" + c.spec.PeerURL()
	}
	c.initialCluster, c.state = initialCluster, state
	if exitWithParent {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			fmt.Fprintf(stderr, "etcd member %s: capstan went away; exiting\n", c.spec.Name)
			os.Exit(1)
		}()
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	cfg := c.embedConfig()
	var inner url.URL
	if c.partitionFile != "" {
		var err error
		if inner, err = partitionableListenURL(); err != nil {
			fmt.Fprintf(stderr, "etcd member %s: %v\n", c.spec.Name, err)
			return 1
		}
		cfg.ListenPeerUrls = []url.URL{inner}
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "etcd member %s: %v\n", c.spec.Name, err)
		return 1
	}
	if c.partitionFile != "" {
		peers, err := servePeers(c, e, inner)
		if err != nil {
			fmt.Fprintf(stderr, "etcd member %s: %v\n", c.spec.Name, err)
			e.Close()
			return 1
		}
		defer peers.Close()
	}
	metrics, err := serveMetrics(c, e)
	if err != nil {
		fmt.Fprintf(stderr, "etcd member %s: %v\n", c.spec.Name, err)
		e.Close()
		return 1
	}
	defer metrics.Close()
	select {
	case <-e.Server.ReadyNotify():
		fmt.Fprintln(stdout, memberReady)
	case err := <-e.Err():
		fmt.Fprintf(stderr, "etcd member %s failed before it was ready: %v\n", c.spec.Name, err)
		return 1
	case <-e.Server.StopNotify():
		fmt.Fprintf(stderr, "etcd member %s stopped before it was ready\n", c.spec.Name)
		return 1
	case sig := <-signals:
		stop(e, sig)
		return 0
	}
	select {
	case err := <-e.Err():
		fmt.Fprintf(stderr, "etcd member %s failed: %v\n", c.spec.Name, err)
		return 1
	case <-e.Server.StopNotify():
		// The server stopped on its own: it was removed from the cluster.
		fmt.Fprintf(stderr, "etcd member %s stopped on its own (a member the cluster removed stops so)\n", c.spec.Name)
		e.Close()
		return 1
	case sig := <-signals:
		stop(e, sig)
		return 0
	}
}

// stop stops the member: on SIGINT at once, without the leadership
// transfer a leader's clean stop tries first (its peers are stopping
// too, and the transfer would wait for them until etcd's request
// timeout), nor the drain of its clients' connections that Close waits
// for, up to the same timeout, while a client holds a watch open: the
// cluster stops as a whole, its API server first, and a watch left (a
// user's etcdctl, a fault campaign's recorder) has nothing more to see.
// HardStop has stopped raft and closed the storage by then: what is left
// is closing connections, and the process's exit does that.
func stop(e *embed.Etcd, sig os.Signal) {
	if sig != syscall.SIGINT {
		e.Close()
		return
	}
	e.Server.HardStop()
	closed := make(chan struct{})
	go func() {
		e.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(haltDrain):
	}
}

// DefaultQuotaBackendBytes is a member's database quota: etcd's largest
// recommended, room for large simulated clusters.
const DefaultQuotaBackendBytes int64 = 8 << 30

// haltDrain is how long a halted member waits for its client
// connections to close before it exits with them open.
const haltDrain = time.Second

func (c memberConfig) embedConfig() *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = c.spec.Name
	cfg.Dir = c.dir
	client, _ := url.Parse(c.spec.ClientURL())
	peer, _ := url.Parse(c.spec.PeerURL())
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.ClientTLSInfo = c.tls.serving()
	cfg.PeerTLSInfo = c.tls.peer()
	cfg.InitialCluster = c.initialCluster
	cfg.ClusterState = c.state
	cfg.ForceNewCluster = c.forceNewCluster
	cfg.InitialClusterToken = c.token
	if cfg.InitialClusterToken == "" {
		cfg.InitialClusterToken = NewClusterToken()
	}
	cfg.LogLevel = "warn"
	if c.logFile != "" {
		cfg.LogOutputs = []string{c.logFile}
	} else {
		cfg.LogOutputs = []string{"stderr"}
	}
	// Room for large simulated clusters; the apiserver compacts history
	// every five minutes itself.
	cfg.QuotaBackendBytes = DefaultQuotaBackendBytes
	if c.quota > 0 {
		cfg.QuotaBackendBytes = c.quota
	}
	cfg.UnsafeNoFsync = c.noFsync
	cfg.MaxTxnOps = 10000
	// Elections on one machine's loopback: a dead leader is noticed in
	// about a second, as on a real low-latency network.
	cfg.TickMs = 100
	cfg.ElectionMs = 1000
	return cfg
}

// memberProcess is one run of a member's process.
type memberProcess struct {
	cmd *exec.Cmd
	// stdin's write end: held open while capstan lives; the member
	// exits when it ends.
	stdin *os.File
	// ready is closed when the member prints that it serves; exited
	// when the process has ended, err then saying how.
	ready, exited chan struct{}
	err           error
}

// launch starts a process for the member c describes.
func launch(c memberConfig) (*memberProcess, error) {
	// The running binary itself, even when its file was replaced since
	// (a rebuild): the member is always the same code as its supervisor.
	self := "/proc/self/exe"
	if _, err := os.Stat(self); err != nil {
		if self, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	logf, err := os.OpenFile(c.logFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer stdinR.Close()
	cmd := exec.Command(self, c.memberArgs()...)
	// A member is not the campaign's to kill: capstan up is.
	// Its collector is sized from the machine's memory, as its
	// supervisor's is, with a member's share.
	cmd.Env = append(append(failpoint.Without(os.Environ()), memberEnv+"=1"), memlimit.Env(memlimit.EtcdMember)...)
	cmd.Stdin, cmd.Stderr = stdinR, logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		stdinW.Close()
		return nil, err
	}
	setParentDeathSignal(cmd)
	if err := startOnLockedThread(cmd); err != nil {
		stdinW.Close()
		return nil, fmt.Errorf("starting the process of etcd member %s: %w", c.spec.Name, err)
	}
	p := &memberProcess{cmd: cmd, stdin: stdinW, ready: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		readied := false
		for sc.Scan() {
			if sc.Text() == memberReady && !readied {
				readied = true
				close(p.ready)
			}
		}
		// Wait after the output is read to its end, as exec asks.
		err := cmd.Wait()
		stdinW.Close()
		if err == nil {
			err = errors.New("exited")
		}
		p.err = err
		close(p.exited)
	}()
	return p, nil
}

// signal sends sig to the process unless it has exited.
func (p *memberProcess) signal(sig os.Signal) {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Signal(sig)
	}
}

// A parent-death signal is sent when the thread that started the child
// ends, not the process: the members are started from one goroutine
// locked to its thread for ever, so the signal comes only with capstan's
// end.
var spawner struct {
	once sync.Once
	reqs chan spawnRequest
}

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

func startOnLockedThread(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan spawnRequest)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as capstan
			for r := range spawner.reqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	r := spawnRequest{cmd: cmd, done: make(chan error, 1)}
	spawner.reqs <- r
	return <-r.done
}

// serveMetrics serves the member's metrics port, as OpenShift's etcd pod
// serves its metrics (with the etcd-metric-signer's certificates) and its
// readiness: /metrics to a client certificate of the metrics signer only,
// /health, /readyz and /livez to anyone (a readiness probe presents no
// certificate). It is the member's only port without client
// certificates, and it answers nothing but health.
func serveMetrics(c memberConfig, e *embed.Etcd) (io.Closer, error) {
	pair, pool, err := loadPairAndCA("the metrics serving certificate", c.tls.MetricsServingCert, c.tls.MetricsServingKey, c.tls.MetricsCA)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	etcdhttp.HandleMetrics(mux)
	etcdhttp.HandleHealth(zap.NewNop(), mux, e.Server)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) {
			http.Error(w, "the metrics are served to a client certificate of the etcd metrics signer", http.StatusForbidden)
			return
		}
		mux.ServeHTTP(w, r)
	})
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(c.spec.MetricsPort)))
	if err != nil {
		return nil, fmt.Errorf("the metrics port: %w", err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12}}
	go func() { _ = srv.ServeTLS(l, "", "") }()
	return srv, nil
}

// loadPairAndCA loads a certificate and its key, and the CA whose
// certificates it accepts from clients.
func loadPairAndCA(what, certFile, keyFile, caFile string) (tls.Certificate, *x509.CertPool, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("%s: %w", what, err)
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("the CA of %s: %w", what, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return tls.Certificate{}, nil, fmt.Errorf("the CA %s of %s holds no certificate", caFile, what)
	}
	return pair, pool, nil
}
