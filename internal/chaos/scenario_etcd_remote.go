package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/deploy"
	"github.com/capstan-dev/capstan/internal/certs"
	"github.com/capstan-dev/capstan/internal/datadir"
	"github.com/capstan-dev/capstan/internal/etcd"
	"github.com/capstan-dev/capstan/internal/failpoint"
	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/ports"
)

// hostsDir is where, in a run's data dir, the etcd-remote scenario keeps
// the etcd of the control-plane hosts: laid out as a capstan data dir
// (its PKI under pki/, its member registry at the top), so that the
// campaign samples its members as it samples capstan's.
const hostsDir = "hosts"

// etcdRemoteScenario runs `capstan etcd-operator` against an etcd whose
// members run on their hosts, as on an existing cluster, and kills only
// the operator: etcd lives on through every kill, its membership moving on
// while the operator is down and its timers start again.
func etcdRemoteScenario() *Scenario {
	s := etcdScenario("etcd-remote",
		"capstan etcd-operator run on its own against an etcd whose members run on the control-plane hosts (the campaign stands in for "+
			"the hosts: a host whose machine runs adds its member, as kubeadm join --control-plane does), its Node reads failing 2s of "+
			"every 5s, and the kills landing in the operator alone while capstan up and etcd live on; a healthy master deleted: "+
			"its replacement's member votes before the old one leaves, and the old machine goes only then: one replacement machine "+
			"ever made, never more than 4 voting members, never fewer than 3 healthy, the 3 masters' members healthy at the end",
		etcdRemoteProgress, quorumCheck{maxVoting: etcdMasters + 1, minHealthy: etcdMasters}, 1)
	// capstan up's own etcd is its bootstrap member alone: the hosts'
	// etcd is the one the operator changes.
	s.Args = append(s.Args, "--etcd-operator=false")
	s.Points = []Point{{failpoint.EtcdLearnerPromoted, 1}, {failpoint.EtcdMemberRemoved, 1}}
	s.Faults = failpoint.FormatFault(failpoint.EtcdNodeRead, 2*time.Second, 5*time.Second)
	s.Target = &Target{Setup: setUpHosts, Args: remoteOperatorArgs, UpLine: "Leading: "}
	// Its operations took 4 to 7 s of the operator's time (its restarts
	// wait out a Lease meanwhile, and etcd and the ControlPlaneMachineSet
	// go on).
	s.Span = 3 * time.Second
	return s
}

// etcdRemoteProgress deletes the first master once the hosts' members
// formed.
var etcdRemoteProgress = replaceProgress(machineDeleting,
	func(m []machinev1.Machine) []string { return []string{m[0].Name} },
	func(ctx context.Context, r *Run, victim string) error { return deleteMachines(ctx, r, victim) })

// setUpHosts starts the hosts' etcd (its bootstrap member, as an
// installer's), the stand-in for its hosts, and the operator's namespace;
// the run samples the hosts' members from then on.
func setUpHosts(ctx context.Context, r *Run) (func(), error) {
	dir := filepath.Join(r.DataDir, hostsDir)
	tls, err := certs.EnsureEtcdPKI((&datadir.DataDir{Root: dir}).PKIDir())
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	clientPort, err := ports.Free()
	if err != nil {
		return nil, err
	}
	peerPort, err := ports.FreeExcept(map[int]bool{clientPort: true})
	if err != nil {
		return nil, err
	}
	hosts, err := etcd.Start(ctx, etcd.Config{DataDir: dir, LogFile: filepath.Join(dir, "logs", "etcd.log"), NoFsync: true, TLS: tls,
		Bootstrap: etcd.MemberSpec{Name: etcd.BootstrapName, Dir: "etcd", ClientPort: clientPort, PeerPort: peerPort}})
	if err != nil {
		return nil, fmt.Errorf("the hosts' etcd: %w", err)
	}
	// The operator acts as its ServiceAccount, with the rights of
	// deploy/etcd-operator/rbac.yaml, as its Deployment would.
	if err := writeComponentKubeconfig(ctx, r, remoteOperator, filepath.Join(dir, remoteOperator+".kubeconfig")); err != nil {
		hosts.Stop()
		return nil, err
	}
	r.MembersDir = dir
	hctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		runHosts(hctx, r, hosts)
	}()
	return func() {
		cancel()
		<-done
		hosts.Stop()
	}, nil
}

// remoteOperatorArgs is the operator's command line: the hosts' members
// as they are now (an admin lists the control-plane hosts), etcd's client
// certificate, and a short Lease, which a restarted operator waits out.
func remoteOperatorArgs(r *Run) ([]string, error) {
	dir := filepath.Join(r.DataDir, hostsDir)
	endpoints, err := datadir.StorageEndpoints(dir)
	if err != nil {
		return nil, err
	}
	tls := datadir.EtcdTLSFiles((&datadir.DataDir{Root: dir}).PKIDir())
	return []string{remoteOperator, "--kubeconfig", filepath.Join(dir, remoteOperator+".kubeconfig"),
		"--etcd-endpoints", strings.Join(endpoints, ","), "--etcd-cacert", tls.CA, "--etcd-cert", tls.ClientCert, "--etcd-key", tls.ClientKey,
		"--control-plane-replicas", strconv.Itoa(etcdMasters), "--health-address", "",
		"--leader-elect", "--leader-elect-lease-duration", "6s", "--leader-elect-renew-deadline", "4s", "--leader-elect-retry-period", "1s"}, nil
}

// remoteOperator is the operator the etcd-remote scenario kills: its
// command and its component (deploy/etcd-operator).
const remoteOperator = "etcd-operator"

// writeComponentKubeconfig applies a component's RBAC and writes a
// kubeconfig at path holding a token of its ServiceAccount, as a pod of
// its Deployment is given.
func writeComponentKubeconfig(ctx context.Context, r *Run, component, path string) error {
	if err := deploy.ApplyRBAC(ctx, r.Dynamic, component); err != nil {
		return err
	}
	comp, err := deploy.Lookup(component)
	if err != nil {
		return err
	}
	admin, err := clientcmd.BuildConfigFromFlags("", r.Kubeconfig)
	if err != nil {
		return err
	}
	// The run's length, and more.
	tr, err := r.Kube.CoreV1().ServiceAccounts(comp.Namespace).CreateToken(ctx, comp.ServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("a token of %s: %w", comp.Username(), err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[component] = &clientcmdapi.Cluster{Server: admin.Host, CertificateAuthorityData: admin.CAData, CertificateAuthority: admin.CAFile}
	cfg.AuthInfos[component] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts[component] = &clientcmdapi.Context{Cluster: component, AuthInfo: component}
	cfg.CurrentContext = component
	return clientcmd.WriteToFile(*cfg, path)
}

// hostsInterval is how often the hosts' stand-in looks at the machines.
const hostsInterval = 500 * time.Millisecond

// runHosts does what the control-plane hosts of an existing cluster do
// with their etcd members, until ctx ends: a host whose machine runs
// adds its member as a learner (kubeadm join --control-plane; etcd takes
// one learner at a time, so the others try again), a host whose member
// was removed stops it, and a host whose machine is gone goes, with its
// member if that is still there.
func runHosts(ctx context.Context, r *Run, hosts *etcd.Cluster) {
	log := klog.FromContext(ctx).WithName("hosts")
	t := time.NewTicker(hostsInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := tendHosts(ctx, r, hosts); err != nil && ctx.Err() == nil {
			log.V(2).Info("The hosts' stand-in", "err", err)
		}
	}
}

func tendHosts(ctx context.Context, r *Run, hosts *etcd.Cluster) error {
	if _, err := hosts.ForgetRemoved(ctx); err != nil {
		return err
	}
	list, err := r.Machine.MachineV1beta1().Machines(machine.Namespace).List(ctx, metav1.ListOptions{LabelSelector: machine.MachineRoleLabel + "=master"})
	if err != nil {
		return err
	}
	members, err := hosts.List(ctx)
	if err != nil {
		return err
	}
	has := map[string]bool{}
	for _, m := range members {
		has[m.Name] = true
	}
	machines := map[string]bool{}
	var errs []error
	for _, m := range list.Items {
		machines[m.Name] = true
		running := ptr.Deref(m.Status.Phase, "") == machinev1.PhaseRunning && m.Status.NodeRef != nil && m.DeletionTimestamp.IsZero()
		if running && !has[m.Name] {
			if err := hosts.AddLearner(ctx, m.Name); err != nil && !errors.Is(err, etcd.ErrMemberExists) {
				errs = append(errs, err)
			}
		}
	}
	for _, m := range members {
		if m.Name != etcd.BootstrapName && m.Name != "" && !machines[m.Name] {
			hosts.StopMember(m.Name)
		}
	}
	return errors.Join(errs...)
}
