package e2e

import (
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	configclient "github.com/openshift/client-go/config/clientset/versioned"
	machineclient "github.com/openshift/client-go/machine/clientset/versioned"
	mcfgclient "github.com/openshift/client-go/machineconfiguration/clientset/versioned"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	configv1 "github.com/openshift/api/config/v1"
	machinev1 "github.com/openshift/api/machine/v1beta1"

	"github.com/capstan-dev/capstan/deploy"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/autoscaler"
	"github.com/capstan-dev/capstan/internal/certs"
	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/cvo"
	"github.com/capstan-dev/capstan/internal/etcd"
	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/machine/hooks"
	"github.com/capstan-dev/capstan/internal/mco"
	"github.com/capstan-dev/capstan/internal/release"
	"github.com/capstan-dev/capstan/internal/sim"
	"github.com/capstan-dev/capstan/internal/testenv"
	"github.com/capstan-dev/capstan/internal/updateservice"
	"github.com/capstan-dev/capstan/internal/updateservice/demo"
)

// The deploy manifests on a cluster capstan's controllers do not run on
// (capstan up --bare stands in for an existing cluster): each component
// runs as a process of its own with a token of the ServiceAccount the
// manifests made, leader-elected, and does its part of a scenario; RBAC
// refuses none of them anything (the audit log says so).
func TestComponentsRunWithTheIdentitiesOfTheirManifests(t *testing.T) {
	parent := t
	dir := t.TempDir()
	up := testenv.StartUp(t, "--data-dir", dir, "--port", strconv.Itoa(testenv.FreePort(t)), "--bare",
		"--control-plane-nodes", "1", "--nodes", "1", "--metrics-address", "", "--console-address", "", "--thanos-address", "")
	up.WaitLine(t, "capstan is up", 4*time.Minute)
	adminKubeconfig := filepath.Join(dir, "kubeconfig")
	admin := testenv.Kubeconfig(t, adminKubeconfig)
	kube := kubernetes.NewForConfigOrDie(admin)
	mc := machineclient.NewForConfigOrDie(admin)
	dyn := dynamic.NewForConfigOrDie(admin)
	ctx := t.Context()

	// The manifests, as a user applies them (server-side: the CRDs are
	// too large for kubectl's last-applied annotation), in a process of
	// its own (kubectl exits on failure). capstan up installed the same
	// CRDs already: kubectl takes their fields over.
	if code, out := testenv.RunCapstan(t, "kubectl", "--kubeconfig", adminKubeconfig, "apply", "--server-side", "--force-conflicts", "-k", "../../deploy"); code != 0 {
		t.Fatalf("kubectl apply -k deploy exited %d:\n%s", code, out)
	}

	// as writes a kubeconfig holding a token of the component's
	// ServiceAccount, as a pod of its Deployment would be given.
	as := func(component string) string {
		t.Helper()
		comp, err := deploy.Lookup(component)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := kube.CoreV1().ServiceAccounts(comp.Namespace).CreateToken(ctx, comp.ServiceAccount,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("a token of %s: %v", comp.Username(), err)
		}
		cfg := clientcmdapi.NewConfig()
		cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: admin.Host, CertificateAuthorityData: admin.CAData}
		cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
		cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
		cfg.CurrentContext = "c"
		path := filepath.Join(dir, component+".kubeconfig")
		if err := clientcmd.WriteToFile(*cfg, path); err != nil {
			t.Fatal(err)
		}
		return path
	}
	// run starts two replicas of a component, as its Deployment does,
	// and waits until one leads.
	type pair struct {
		component       string
		leader, standby *replica
	}
	var pairs []pair
	run := func(command string, args ...string) {
		t.Helper()
		words := strings.Fields(command)
		component := words[0]
		args = append(append(words, "--kubeconfig", as(component), "--leader-elect",
			"--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline", "3s", "--leader-elect-retry-period", "500ms",
			"--health-address", "127.0.0.1:0"), args...)
		leader, standby := waitLeader(t, startReplica(t, args...), startReplica(t, args...))
		pairs = append(pairs, pair{component: component, leader: leader, standby: standby})
	}

	t.Run("scheduler", func(t *testing.T) {
		run("scheduler", "--scheduler-name", corev1.DefaultSchedulerName)
		ns := "deploy-test"
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cluster.WaitForServiceAccount(ctx, kube, ns, time.Minute); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "placed", Namespace: ns},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1"}}}}
		if _, err := kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, time.Minute, func() (bool, string) {
			p, err := kube.CoreV1().Pods(ns).Get(ctx, "placed", metav1.GetOptions{})
			return err == nil && p.Spec.NodeName != "", fmt.Sprintf("pod not placed: %v", err)
		})
	})

	const set = "deploy-test"
	t.Run("machine-api", func(t *testing.T) {
		// The cloud's credentials are its own: the simulator's.
		run("machine-api", "--cloud-kubeconfig", as("sim"))
		ms := &machinev1.MachineSet{
			ObjectMeta: metav1.ObjectMeta{Name: set, Namespace: machine.Namespace},
			Spec: machinev1.MachineSetSpec{
				Replicas: ptr.To[int32](1),
				Selector: metav1.LabelSelector{MatchLabels: map[string]string{machine.MachineSetLabel: set}},
				Template: machinev1.MachineTemplateSpec{
					ObjectMeta: machinev1.ObjectMeta{Labels: map[string]string{machine.MachineSetLabel: set, machine.MachineRoleLabel: "worker"}},
					Spec: machinev1.MachineSpec{
						ObjectMeta: machinev1.ObjectMeta{Labels: map[string]string{"deploy-test": "true"}},
						ProviderSpec: machinev1.ProviderSpec{Value: machine.RawProviderSpec(machine.ProviderSpec{
							InstanceType: "capstan.large", Region: sim.DefaultRegion, Zone: sim.DefaultZones[0]})},
					},
				},
			},
		}
		if _, err := mc.MachineV1beta1().MachineSets(machine.Namespace).Create(ctx, ms, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitSetRunning(t, mc, set, 1)
	})

	t.Run("autoscaler", func(t *testing.T) {
		run("autoscaler")
		ca := unstructuredFrom(t, `apiVersion: autoscaling.openshift.io/v1
kind: ClusterAutoscaler
metadata:
  name: default
spec:
  resourceLimits:
    maxNodesTotal: 10
`)
		if _, err := dyn.Resource(autoscaler.ClusterAutoscalerResource).Create(ctx, ca, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		createMachineAutoscalerOn(t, dyn, set, set, 1, 2)
		// Two pods of three CPUs each fit only on two of the set's
		// four-CPU nodes: the set grows to its maximum.
		for i := range 2 {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("big-%d", i), Namespace: "deploy-test"},
				Spec: corev1.PodSpec{NodeSelector: map[string]string{"deploy-test": "true"},
					Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}}}}}}
			if _, err := kube.CoreV1().Pods("deploy-test").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		waitSetRunning(t, mc, set, 2)
	})

	t.Run("mco", func(t *testing.T) {
		// The pools are the installer's.
		mcfg := mcfgclient.NewForConfigOrDie(admin)
		if err := mco.EnsurePools(ctx, mcfg); err != nil {
			t.Fatal(err)
		}
		run("mco", "--from-release=false", "--os-image-url", "registry.example/rhcos@sha256:"+strings.Repeat("0", 64), "--release-version", "4.10.0")
		testenv.Eventually(t, 3*time.Minute, func() (bool, string) {
			for _, pool := range []string{"master", "worker"} {
				p, err := mcfg.MachineconfigurationV1().MachineConfigPools().Get(ctx, pool, metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				if !strings.HasPrefix(p.Status.Configuration.Name, "rendered-"+pool+"-") || p.Status.UpdatedMachineCount != p.Status.MachineCount || p.Status.MachineCount == 0 {
					return false, fmt.Sprintf("pool %s: config %q, %d of %d updated", pool, p.Status.Configuration.Name, p.Status.UpdatedMachineCount, p.Status.MachineCount)
				}
			}
			return true, ""
		})
	})

	// The demo releases in an OCI layout, and an image there that is not
	// a release, which the update service leaves out.
	releases := filepath.Join(dir, "releases")
	built, err := demo.BuildReleases(ctx, "oci:"+releases, nil)
	if err != nil {
		t.Fatal(err)
	}
	junk, err := release.ParseRef("oci:" + releases + ":not-a-release")
	if err != nil {
		t.Fatal(err)
	}
	junkDigest, err := release.Write(ctx, junk, empty.Image)
	if err != nil {
		t.Fatal(err)
	}

	var graphURL string
	t.Run("update-service", func(t *testing.T) {
		// Every replica serves: no lease. Its one right is the event on
		// the ClusterVersion for the image it leaves out.
		graphData := filepath.Join(dir, "graph-data")
		if err := demo.WriteGraphData(graphData); err != nil {
			t.Fatal(err)
		}
		// It serves on after this step: the CVO's asks it.
		r := startReplica(parent, "update-service", "--kubeconfig", as("update-service"), "--record-events",
			"--releases", "oci:"+releases, "--graph-data", graphData, "--listen", "127.0.0.1:0", "--health-address", "127.0.0.1:0")
		m := regexp.MustCompile(`Serving the update graph at (http://\S+)`).FindStringSubmatch(r.p.Output())
		if m == nil {
			t.Fatalf("no graph address printed:\n%s", r.p.Output())
		}
		graphURL = m[1]
		if code, body := r.get(t, "/readyz"); code != http.StatusOK {
			t.Errorf("/readyz: %d %s", code, body)
		}
		testenv.Eventually(t, time.Minute, func() (bool, string) {
			evs, err := kube.CoreV1().Events(cvo.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + updateservice.SkippedImageReason})
			if err != nil {
				return false, err.Error()
			}
			for _, e := range evs.Items {
				if e.InvolvedObject.Kind == "ClusterVersion" && strings.Contains(e.Message, junkDigest.String()) {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%d %s events, none for %s", len(evs.Items), updateservice.SkippedImageReason, junkDigest)
		})
	})

	t.Run("cvo", func(t *testing.T) {
		// A release in an OCI layout: the cluster has no ClusterVersion,
		// so the operator is told which release it runs, and the graph
		// is the standalone update service's.
		version, pullSpec := built[0].Version, built[0].Ref.String()
		run("cvo", "--release-image", pullSpec, "--update-service", graphURL, "--channel", "candidate-4.10")
		// It makes the ClusterVersion and applies the release by run
		// level; the first level's ClusterOperators wait for operators
		// this cluster does not run.
		config := configclient.NewForConfigOrDie(admin)
		testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
			cv, err := config.ConfigV1().ClusterVersions().Get(ctx, "version", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			var progressing string
			for _, c := range cv.Status.Conditions {
				if c.Type == "Progressing" {
					progressing = string(c.Status) + " " + c.Message
				}
			}
			// "Working towards V", then, once the first run level's
			// operators do not come, "Unable to apply V: ...".
			return cv.Status.Desired.Version == version && len(cv.Status.History) == 1 && strings.HasPrefix(progressing, "True ") && strings.Contains(progressing, version),
				fmt.Sprintf("desired %q, history %d, Progressing %q", cv.Status.Desired.Version, len(cv.Status.History), progressing)
		})
		testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
			cos, err := config.ConfigV1().ClusterOperators().List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			return len(cos.Items) > 0, "no ClusterOperator applied from the release"
		})
		// The graph from the update service: every later release.
		testenv.Eventually(t, time.Minute, func() (bool, string) {
			cv, err := config.ConfigV1().ClusterVersions().Get(ctx, "version", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			var got []string
			for _, u := range cv.Status.AvailableUpdates {
				got = append(got, u.Version)
			}
			slices.Sort(got)
			var retrieved string
			for _, c := range cv.Status.Conditions {
				if c.Type == configv1.RetrievedUpdates {
					retrieved = fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
				}
			}
			// The channel's releases after the one installed.
			want := []string{"4.10.23", "4.10.24", "4.10.25", "4.10.26"}
			return slices.Equal(got, want), fmt.Sprintf("available updates %v from %s, want %v (RetrievedUpdates %s)", got, graphURL, want, retrieved)
		})
	})

	t.Run("hooks", func(t *testing.T) {
		run("hooks run "+hooks.ProactiveReplacementName, "--hook-selector", machine.MachineSetLabel+"="+set)
		setMachines := func() []machinev1.Machine {
			list, err := mc.MachineV1beta1().Machines(machine.Namespace).List(ctx, metav1.ListOptions{LabelSelector: machine.MachineSetLabel + "=" + set})
			if err != nil {
				t.Fatal(err)
			}
			return list.Items
		}
		// The hook goes on each machine of the set.
		testenv.Eventually(t, time.Minute, func() (bool, string) {
			ms := setMachines()
			held := 0
			for _, m := range ms {
				if slices.ContainsFunc(m.Spec.LifecycleHooks.PreDrain, func(h machinev1.LifecycleHook) bool { return h.Name == "ProactiveReplacement" }) {
					held++
				}
			}
			return held == len(ms) && held > 0, fmt.Sprintf("%d of %d machines have the ProactiveReplacement hook", held, len(ms))
		})
		// A machine deleted waits for its replacement, and then the
		// controller takes its hook off: the machine goes.
		old := setMachines()[0].Name
		if err := mc.MachineV1beta1().Machines(machine.Namespace).Delete(ctx, old, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 4*time.Minute, func() (bool, string) {
			_, err := mc.MachineV1beta1().Machines(machine.Namespace).Get(ctx, old, metav1.GetOptions{})
			return apierrors.IsNotFound(err), fmt.Sprintf("machine %s still there: %v", old, err)
		})
		waitSetRunning(t, mc, set, 2)
	})

	t.Run("etcd-operator", func(t *testing.T) {
		// An etcd capstan does not run, standing in for a cluster's:
		// its members are processes of this test, the control-plane
		// hosts', and the operator reaches them through etcd's API with
		// etcd's client certificate alone.
		pki := filepath.Join(dir, "hosts-etcd", "pki")
		tls, err := certs.EnsureEtcdPKI(pki)
		if err != nil {
			t.Fatal(err)
		}
		hosts, err := etcd.Start(ctx, etcd.Config{DataDir: filepath.Join(dir, "hosts-etcd"), TLS: tls, NoFsync: true,
			LogFile:   filepath.Join(dir, "hosts-etcd", "etcd.log"),
			Bootstrap: etcd.MemberSpec{Name: etcd.BootstrapName, Dir: "bootstrap", ClientPort: testenv.FreePort(t), PeerPort: testenv.FreePort(t)}})
		if err != nil {
			t.Fatal(err)
		}
		defer hosts.Stop()
		boot, err := hosts.Members(ctx)
		if err != nil || len(boot) != 1 {
			t.Fatalf("the bootstrap member: %v %v", boot, err)
		}
		// A control-plane machine, which the Machine API provisions.
		const master = "deploy-master-0"
		m := &machinev1.Machine{ObjectMeta: metav1.ObjectMeta{Name: master, Namespace: machine.Namespace,
			Labels: map[string]string{machine.MachineRoleLabel: "master", machine.MachineTypeLabel: "master"}},
			Spec: machinev1.MachineSpec{ProviderSpec: machinev1.ProviderSpec{Value: machine.RawProviderSpec(machine.ProviderSpec{
				InstanceType: "capstan.large", Region: sim.DefaultRegion, Zone: sim.DefaultZones[0]})}}}
		if _, err := mc.MachineV1beta1().Machines(machine.Namespace).Create(ctx, m, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Its base is applied on its own, as its Secret and endpoints
		// are the cluster's (here, the flags below).
		if code, out := testenv.RunCapstan(t, "kubectl", "--kubeconfig", adminKubeconfig, "apply", "--server-side", "-k", "../../deploy/etcd-operator"); code != 0 {
			t.Fatalf("kubectl apply -k deploy/etcd-operator exited %d:\n%s", code, out)
		}
		run("etcd-operator", "--etcd-endpoints", boot[0].ClientURL, "--etcd-cacert", tls.CA,
			"--etcd-cert", tls.ClientCert, "--etcd-key", tls.ClientKey, "--control-plane-replicas", "1")
		config := configclient.NewForConfigOrDie(admin)
		// The quorum guard on the machine, and the ClusterOperator.
		testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
			m, err := mc.MachineV1beta1().Machines(machine.Namespace).Get(ctx, master, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			guarded := slices.ContainsFunc(m.Spec.LifecycleHooks.PreDrain, func(h machinev1.LifecycleHook) bool {
				return h.Name == etcd.QuorumGuardHook && h.Owner == etcd.QuorumGuardOwner
			})
			running := m.Status.Phase != nil && *m.Status.Phase == "Running" && m.Status.NodeRef != nil
			return guarded && running, fmt.Sprintf("machine %s: quorum guard %v, running with a node %v", master, guarded, running)
		})
		// The machine's host joins etcd (as kubeadm join --control-plane
		// does); the operator promotes it once it caught up, and then the
		// bootstrap member leaves.
		// etcd adds a member only from a leader connected to a quorum
		// for five seconds: the host tries again.
		testenv.Eventually(t, time.Minute, func() (bool, string) {
			err := hosts.AddLearner(ctx, master)
			return err == nil, fmt.Sprint(err)
		})
		joined, err := hosts.Members(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var endpoints []string
		for _, m := range joined {
			endpoints = append(endpoints, m.ClientURL)
		}
		// Looked at through either member: the bootstrap one goes.
		look, err := etcd.DialRemote(etcd.RemoteConfig{Endpoints: endpoints, CA: tls.CA, Cert: tls.ClientCert, Key: tls.ClientKey})
		if err != nil {
			t.Fatal(err)
		}
		defer look.Close()
		testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
			members, err := look.Members(ctx)
			if err != nil {
				return false, err.Error()
			}
			return len(members) == 1 && members[0].Name == master && !members[0].Learner && members[0].Healthy, fmt.Sprintf("members %+v", members)
		})
		testenv.Eventually(t, time.Minute, func() (bool, string) {
			co, err := config.ConfigV1().ClusterOperators().Get(ctx, etcd.ClusterOperatorName, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			var got []string
			ok := 0
			for _, c := range co.Status.Conditions {
				got = append(got, fmt.Sprintf("%s=%s %s %q", c.Type, c.Status, c.Reason, c.Message))
				switch {
				case c.Type == configv1.OperatorAvailable && c.Status == configv1.ConditionTrue && c.Message == "EtcdMembersAvailable: 1 members are available",
					c.Type == configv1.OperatorDegraded && c.Status == configv1.ConditionFalse,
					c.Type == configv1.OperatorProgressing && c.Status == configv1.ConditionFalse:
					ok++
				}
			}
			return ok == 3, fmt.Sprintf("ClusterOperator etcd: %v", got)
		})
	})

	t.Run("every leader killed, every stand-by takes over", func(t *testing.T) {
		for _, p := range pairs {
			p.leader.p.Kill(t)
		}
		for _, p := range pairs {
			p.standby.p.WaitLine(t, "Leading: ", time.Minute)
			if code, body := p.standby.get(t, "/readyz"); !strings.Contains(body, "ok: leading") {
				t.Errorf("%s: the new leader's /readyz: %d %q", p.component, code, body)
			}
		}
		// The new scheduler places a pod.
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "after-takeover", Namespace: "deploy-test"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1"}}}}
		if _, err := kube.CoreV1().Pods("deploy-test").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, time.Minute, func() (bool, string) {
			p, err := kube.CoreV1().Pods("deploy-test").Get(ctx, "after-takeover", metav1.GetOptions{})
			return err == nil && p.Spec.NodeName != "", fmt.Sprintf("pod not placed: %v", err)
		})
	})

	t.Run("console", func(t *testing.T) {
		// Every replica serves: no lease. It has no right, and asks the
		// API server nothing of its own.
		r := startReplica(t, "console", "--kubeconfig", as("console"), "--listen", "127.0.0.1:0", "--health-address", "127.0.0.1:0")
		// It says where it serves before where its health is.
		m := regexp.MustCompile(`Console: (http://\S+)`).FindStringSubmatch(r.p.Output())
		if m == nil {
			t.Fatalf("no console address printed:\n%s", r.p.Output())
		}
		resp, err := http.Get(m[1])
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("the console's page: %s", resp.Status)
		}
		if code, body := r.get(t, "/readyz"); code != http.StatusOK {
			t.Errorf("/readyz: %d %s", code, body)
		}
	})

	up.Stop(t)
	forbidden, err := deploy.Refused(filepath.Join(dir, "logs", "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	if len(forbidden) > 0 {
		t.Errorf("RBAC refused the components, their manifests lack these rights:\n  %s", strings.Join(forbidden, "\n  "))
	}
	// Each acted, and as its ServiceAccount (with a token: the username
	// alone could be a client certificate's).
	acted := map[string]int{}
	err = audit.Read(filepath.Join(dir, "logs", "audit.log"), func(e *audit.Event) {
		if id := e.User.Extra["authentication.kubernetes.io/credential-id"]; len(id) == 1 && strings.HasPrefix(id[0], "JTI=") {
			acted[e.User.Username]++
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"scheduler", "machine-api", "autoscaler", "mco", "cvo", "hooks", "etcd-operator", "update-service"} {
		comp, _ := deploy.Lookup(name)
		if acted[comp.Username()] == 0 {
			t.Errorf("the audit log has no request of %s with a ServiceAccount token (it has: %v)", name, acted)
		}
	}
	// The console has no right, and asks nothing as itself: every call it
	// makes is its users'.
	if comp, _ := deploy.Lookup("console"); acted[comp.Username()] != 0 {
		t.Errorf("the console made %d requests as itself", acted[comp.Username()])
	}
}

// waitSetRunning waits until MachineSet set has n machines Running with
// Ready nodes.
func waitSetRunning(t *testing.T, mc machineclient.Interface, set string, n int) {
	t.Helper()
	testenv.Eventually(t, 3*time.Minute, func() (bool, string) {
		list, err := mc.MachineV1beta1().Machines(machine.Namespace).List(t.Context(), metav1.ListOptions{LabelSelector: machine.MachineSetLabel + "=" + set})
		if err != nil {
			return false, err.Error()
		}
		running := 0
		for _, m := range list.Items {
			if m.Status.Phase != nil && *m.Status.Phase == "Running" && m.Status.NodeRef != nil {
				running++
			}
		}
		return running == n, fmt.Sprintf("%d of %d machines Running with a node", running, n)
	})
}
