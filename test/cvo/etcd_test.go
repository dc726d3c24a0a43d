package cvo

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	configv1 "github.com/openshift/api/config/v1"
	machinev1 "github.com/openshift/api/machine/v1beta1"
	configclient "github.com/openshift/client-go/config/clientset/versioned"
	machineclient "github.com/openshift/client-go/machine/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/datadir"
	"github.com/capstan-dev/capstan/internal/etcd"
	"github.com/capstan-dev/capstan/internal/machine"
	"github.com/capstan-dev/capstan/internal/testenv"
)

// etcdCluster is a `capstan up` of its own (3 control-plane machines, one
// worker) for the etcd tests, which replace control-plane machines.
type etcdCluster struct {
	// parent owns the capstan up process, across restarts in subtests.
	parent          *testing.T
	dir, kubeconfig string
	args            []string
	up              *testenv.UpProcess
	// upAt is when capstan up said it was up.
	upAt time.Time
	// prom is the cluster's Prometheus, scraping and evaluating every
	// second, alerts firing 2s after their expression holds.
	prom     *testenv.Prometheus
	kube     kubernetes.Interface
	machines machineclient.Interface
	config   configclient.Interface
}

func startEtcdCluster(t *testing.T) *etcdCluster {
	t.Helper()
	c := &etcdCluster{parent: t, dir: t.TempDir()}
	metrics := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	c.prom = &testenv.Prometheus{URL: "http://" + metrics}
	// A node silent for 20s is NotReady: a stopped master's quorum guard
	// pod turns not ready that much sooner.
	c.args = []string{"--data-dir", c.dir, "--port", strconv.Itoa(testenv.FreePort(t)), "--nodes", "1", "--control-plane-nodes", "3",
		"--node-monitor-grace-period", "20s",
		"--metrics-address", metrics, "--thanos-address", "", "--console-address", "", "--scrape-interval", "1s", "--rule-evaluation-interval", "1s", "--alert-for-max", "2s",
		"--release-address", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))}
	c.up = testenv.StartUp(t, c.args...)
	c.up.WaitLine(t, "capstan is up", 3*time.Minute)
	c.upAt = time.Now()
	c.kubeconfig = filepath.Join(c.dir, "kubeconfig")
	cfg := testenv.Kubeconfig(t, c.kubeconfig)
	// Short timeouts: a write that cannot commit fails fast and is counted.
	cfg.Timeout = 2 * time.Second
	c.kube = kubernetes.NewForConfigOrDie(cfg)
	c.machines = machineclient.NewForConfigOrDie(cfg)
	c.config = configclient.NewForConfigOrDie(cfg)
	return c
}

// registry reads which members capstan runs (its registry is replaced
// whole, by a rename, so a read never sees half of it).
func (c *etcdCluster) registry() []string {
	raw, err := os.ReadFile(filepath.Join(c.dir, "etcd-members.json"))
	if err != nil {
		return nil
	}
	var specs []etcd.MemberSpec
	if json.Unmarshal(raw, &specs) != nil {
		return nil
	}
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
	}
	sort.Strings(names)
	return names
}

// masters lists the control-plane machines, by name, and which are being
// deleted.
func (c *etcdCluster) masters(t *testing.T) (names []string, deleting map[string]bool) {
	t.Helper()
	list, err := c.machines.MachineV1beta1().Machines(machine.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: machine.MachineRoleLabel + "=master"})
	if err != nil {
		return nil, nil
	}
	deleting = map[string]bool{}
	for _, m := range list.Items {
		names = append(names, m.Name)
		if m.DeletionTimestamp != nil {
			deleting[m.Name] = true
		}
	}
	sort.Strings(names)
	return names, deleting
}

// waitSettled waits until the control plane is 3 machines, none being
// deleted, each running a voting member, healthy, and the etcd operator
// says so.
func (c *etcdCluster) waitSettled(t *testing.T, timeout time.Duration) []string {
	t.Helper()
	var names []string
	testenv.Eventually(t, timeout, func() (bool, string) {
		var deleting map[string]bool
		names, deleting = c.masters(t)
		members := c.registry()
		co, err := c.config.ConfigV1().ClusterOperators().Get(context.Background(), etcd.ClusterOperatorName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		avail, prog := condition(co.Status.Conditions, configv1.OperatorAvailable), condition(co.Status.Conditions, configv1.OperatorProgressing)
		ok := len(names) == 3 && len(deleting) == 0 && strings.Join(members, ",") == strings.Join(names, ",") &&
			avail.Message == "EtcdMembersAvailable: 3 members are available" && prog.Status == configv1.ConditionFalse
		return ok, fmt.Sprintf("machines %v (deleting %v), members %v, etcd: %s / %s", names, deleting, members, avail.Message, prog.Message)
	})
	return names
}

// checkControlPlaneMachineSet waits until the cluster ControlPlaneMachineSet
// reports the settled control plane, in its status, its conditions and in
// `oc get controlplanemachineset` with OpenShift's columns.
func (c *etcdCluster) checkControlPlaneMachineSet(t *testing.T) {
	t.Helper()
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		cpms, err := c.machines.MachineV1().ControlPlaneMachineSets(machine.Namespace).Get(context.Background(), machine.ControlPlaneMachineSetName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		st := cpms.Status
		if st.Replicas != 3 || st.ReadyReplicas != 3 || st.UpdatedReplicas != 3 || st.UnavailableReplicas != 0 || st.ObservedGeneration != cpms.Generation {
			return false, fmt.Sprintf("status %+v", st)
		}
		for typ, want := range map[string]string{"Available": "True/AllReplicasAvailable", "Degraded": "False/AsExpected", "Progressing": "False/AllReplicasUpdated"} {
			got := "missing"
			for _, cond := range st.Conditions {
				if cond.Type == typ {
					got = string(cond.Status) + "/" + cond.Reason
				}
			}
			if got != want {
				return false, fmt.Sprintf("condition %s is %s, want %s", typ, got, want)
			}
		}
		out, err := testenv.CLI("kubectl", "get", "controlplanemachineset", "-n", machine.Namespace, "--kubeconfig", c.kubeconfig)
		if err != nil {
			return false, fmt.Sprintf("oc get controlplanemachineset: %v: %s", err, out)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "NAME DESIRED CURRENT READY UPDATED UNAVAILABLE STATE AGE" {
			return false, "oc get controlplanemachineset printed:\n" + out
		}
		// Unavailable is empty at 0, as the field is omitted.
		row := strings.Fields(lines[1])
		if len(row) != 7 || strings.Join(row[:6], " ") != "cluster 3 3 3 3 Active" {
			return false, "oc get controlplanemachineset printed:\n" + out
		}
		return true, ""
	})
}

// writer writes ConfigMaps without pause, recording which writes the API
// acknowledged and the longest run of failures.
type writer struct {
	kube   kubernetes.Interface
	ns     string
	stop   chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	acked  []string
	failed int
	// longest is the longest time between a failed write's start and the
	// next acknowledged write.
	longest time.Duration
}

func startWriter(t *testing.T, kube kubernetes.Interface, ns string) *writer {
	t.Helper()
	if _, err := kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w := &writer{kube: kube, ns: ns, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		var failingSince time.Time
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			default:
			}
			name := fmt.Sprintf("w-%06d", i)
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"i": strconv.Itoa(i)}}, metav1.CreateOptions{})
			cancel()
			w.mu.Lock()
			if err != nil {
				w.failed++
				if failingSince.IsZero() {
					failingSince = start
				}
			} else {
				w.acked = append(w.acked, name)
				if !failingSince.IsZero() {
					w.longest = max(w.longest, time.Since(failingSince))
					failingSince = time.Time{}
				}
			}
			w.mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return w
}

// finish stops the writer and checks that every acknowledged write is
// there; it returns the writes and the longest outage.
func (w *writer) finish(t *testing.T) (acked, failed int, longest time.Duration) {
	t.Helper()
	close(w.stop)
	<-w.done
	var list *corev1.ConfigMapList
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		var err error
		list, err = w.kube.CoreV1().ConfigMaps(w.ns).List(context.Background(), metav1.ListOptions{})
		return err == nil, fmt.Sprintf("listing the writes: %v", err)
	})
	have := map[string]bool{}
	for _, cm := range list.Items {
		have[cm.Name] = true
	}
	var lost []string
	for _, n := range w.acked {
		if !have[n] {
			lost = append(lost, n)
		}
	}
	if len(lost) > 0 {
		t.Errorf("%d acknowledged writes are lost: %v", len(lost), lost[:min(10, len(lost))])
	}
	return len(w.acked), w.failed, w.longest
}

func (c *etcdCluster) deleteMachine(t *testing.T, name string) {
	t.Helper()
	if err := c.machines.MachineV1beta1().Machines(machine.Namespace).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// maxOutage is what a replacement may cost the API at most: a leader
// election and the apiserver's reconnect, with room for a busy machine.
const maxOutage = 10 * time.Second

// TestControlPlaneMachineReplacement replaces control-plane machines under
// a continuous stream of writes: one, then two at once, then one with a
// SIGKILL of capstan in the middle, a dead one, a dead one whose
// replacement fails and is deleted; it SIGKILLs the leader's member
// process, then stops machines until the API goes down and back. Each
// time the quorum guard holds the old machine until its replacement's
// member votes (or, dead, lets it go first), the API stays up (outages
// measured, bounded by a leader election), and no acknowledged write is
// lost.
func TestControlPlaneMachineReplacement(t *testing.T) {
	c := startEtcdCluster(t)
	// Up means fault-tolerant: the dead-master flow, started the moment
	// capstan says it is up, keeps the API serving writes.
	if !t.Run("a master stopped within a second of up, then deleted: the API serves writes throughout", c.deadMasterRightAfterUp) {
		return
	}
	before := c.waitSettled(t, 3*time.Minute)
	c.checkControlPlaneMachineSet(t)
	// `oc get co etcd` shows the version of the release the cluster runs.
	testenv.Eventually(t, time.Minute, func() (bool, string) {
		cv, err := c.config.ConfigV1().ClusterVersions().Get(context.Background(), "version", metav1.GetOptions{})
		if err != nil || len(cv.Status.History) == 0 {
			return false, fmt.Sprintf("no cluster version history yet (%v)", err)
		}
		out, err := testenv.CLI("kubectl", "get", "co", "etcd", "--kubeconfig", c.kubeconfig)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if err != nil || len(lines) != 2 {
			return false, fmt.Sprintf("oc get co etcd: %v: %s", err, out)
		}
		row := strings.Fields(lines[1])
		return len(row) > 2 && row[0] == "etcd" && row[1] == cv.Status.History[0].Version && row[2] == "True",
			fmt.Sprintf("oc get co etcd printed (want version %s):\n%s", cv.Status.History[0].Version, out)
	})
	for _, n := range before {
		m, err := c.machines.MachineV1beta1().Machines(machine.Namespace).Get(context.Background(), n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if h := m.Spec.LifecycleHooks.PreDrain; len(h) != 1 || h[0].Name != etcd.QuorumGuardHook || h[0].Owner != etcd.QuorumGuardOwner {
			t.Errorf("machine %s preDrain hooks %v, want the quorum guard", n, h)
		}
	}

	// Each step starts from where the last left the cluster.
	if !t.Run("one machine", func(t *testing.T) {
		w := startWriter(t, c.kube, "writes-one")
		stop := c.watchMemberCount()
		began := time.Now()
		c.deleteMachine(t, before[1])
		after := c.waitSettled(t, 3*time.Minute)
		took := time.Since(began)
		if least := stop(); least < 3 {
			t.Errorf("the cluster went down to %d members: the old member left before its replacement voted", least)
		}
		acked, failed, longest := w.finish(t)
		t.Logf("replaced %s in %s; %d writes acknowledged, %d failed, longest outage %s", before[1], took.Round(100*time.Millisecond), acked, failed, longest.Round(10*time.Millisecond))
		if longest > maxOutage {
			t.Errorf("the API refused writes for %s, longer than a leader election", longest)
		}
		if slices.Contains(after, before[1]) {
			t.Errorf("the deleted machine is still a member: %v", after)
		}
		// The replacement is the ControlPlaneMachineSet's, for the same
		// index.
		index := machine.MachineIndex(before[1])
		var replacement string
		for _, n := range after {
			if !slices.Contains(before, n) {
				replacement = n
			}
		}
		if replacement == "" || machine.MachineIndex(replacement) != index {
			t.Errorf("machines %v after replacing %s (index %d): no replacement of the same index", after, before[1], index)
		}
		// The recorder writes its events after the change they report.
		testenv.Eventually(t, 30*time.Second, func() (bool, string) {
			events, err := c.kube.CoreV1().Events(machine.Namespace).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.kind=ControlPlaneMachineSet,reason=SuccessfulCreate"})
			if err != nil {
				return false, err.Error()
			}
			return slices.ContainsFunc(events.Items, func(e corev1.Event) bool { return strings.Contains(e.Message, replacement) }),
				fmt.Sprintf("no SuccessfulCreate event of the ControlPlaneMachineSet for %s", replacement)
		})
		c.checkControlPlaneMachineSet(t)
	}) {
		return
	}

	// Each step starts from where the last left the cluster.
	if !t.Run("failure domains of two zones: the machine of the third is moved", func(t *testing.T) {
		ctx := context.Background()
		cpmsAPI := c.machines.MachineV1().ControlPlaneMachineSets(machine.Namespace)
		patch := `{"spec":{"template":{"machines_v1beta1_machine_openshift_io":{"failureDomains":{"platform":"AWS","aws":[` +
			`{"placement":{"availabilityZone":"sim-zone-b"}},{"placement":{"availabilityZone":"sim-zone-a"}}]}}}}}`
		if _, err := cpmsAPI.Patch(ctx, machine.ControlPlaneMachineSetName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		zones := map[int]string{}
		testenv.Eventually(t, 4*time.Minute, func() (bool, string) {
			after, deleting := c.masters(t)
			if len(deleting) > 0 {
				return false, fmt.Sprintf("machines %v being deleted", deleting)
			}
			clear(zones)
			for _, n := range after {
				m, err := c.machines.MachineV1beta1().Machines(machine.Namespace).Get(ctx, n, metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				ps, err := machine.ParseProviderSpec(m.Spec.ProviderSpec)
				if err != nil {
					return false, err.Error()
				}
				zones[machine.MachineIndex(n)] = ps.Zone
			}
			// Indexes 0 and 1 are in failure domains already and stay;
			// index 2 takes the first of the sorted two.
			return len(after) == 3 && zones[0] == "sim-zone-a" && zones[1] == "sim-zone-b" && zones[2] == "sim-zone-a", fmt.Sprintf("zones by index %v", zones)
		})
		c.waitSettled(t, 3*time.Minute)
		c.checkControlPlaneMachineSet(t)
	}) {
		return
	}

	// Each step starts from where the last left the cluster.
	if !t.Run("two machines at once: the second waits, the quorum holds", func(t *testing.T) {
		current := c.settledMasters(t)
		w := startWriter(t, c.kube, "writes-two")
		stop := c.watchMemberCount()
		c.deleteMachine(t, current[0])
		c.deleteMachine(t, current[2])
		after := c.waitSettled(t, 4*time.Minute)
		least := stop()
		acked, failed, longest := w.finish(t)
		t.Logf("replaced %s and %s; %d writes acknowledged, %d failed, longest outage %s; never fewer than %d members", current[0], current[2], acked, failed, longest.Round(10*time.Millisecond), least)
		if least < 3 {
			t.Errorf("the cluster went down to %d members: a member left before its replacement voted", least)
		}
		if longest > maxOutage {
			t.Errorf("the API refused writes for %s", longest)
		}
		for _, gone := range []string{current[0], current[2]} {
			if slices.Contains(after, gone) {
				t.Errorf("%s is still a member: %v", gone, after)
			}
		}
	}) {
		return
	}

	// Each step starts from where the last left the cluster.
	if !t.Run("a SIGKILL in the middle of a replacement resumes it", func(t *testing.T) {
		ctx := context.Background()
		if _, err := c.kube.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before-the-kill"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		current := c.settledMasters(t)
		stop := c.watchMemberCount()
		c.deleteMachine(t, current[1])
		// Killed once the replacement's member has been added.
		testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
			members := c.registry()
			return len(members) == 4, fmt.Sprintf("members %v", members)
		})
		c.up.Kill(t)
		c.up = testenv.StartUp(c.parent, c.args...)
		c.up.WaitLine(t, "capstan is up", 3*time.Minute)
		after := c.waitSettled(t, 3*time.Minute)
		if least := stop(); least < 3 {
			t.Errorf("the cluster went down to %d members across the kill", least)
		}
		if slices.Contains(after, current[1]) {
			t.Errorf("%s is still a member after the restart: %v", current[1], after)
		}
		if _, err := c.kube.CoreV1().ConfigMaps("default").Get(ctx, "before-the-kill", metav1.GetOptions{}); err != nil {
			t.Errorf("a write from before the kill: %v", err)
		}
	}) {
		return
	}

	// Each step starts from where the last left the cluster.
	if !t.Run("a failed replacement, deleted, is replaced once: never four voting members", func(t *testing.T) {
		ctx := context.Background()
		dead := c.settledMasters(t)[0]
		m, err := c.machines.MachineV1beta1().Machines(machine.Namespace).Get(ctx, dead, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ps, err := machine.ParseProviderSpec(m.Spec.ProviderSpec)
		if err != nil {
			t.Fatal(err)
		}
		// A dead master, deleted while its zone has no capacity: the
		// replacement is refused by the cloud and goes Failed.
		if out := capstanOK(t, "sim", "zone", "exhaust", ps.Zone, "--kubeconfig", c.kubeconfig); out != "zone/"+ps.Zone+" exhausted\n" {
			t.Errorf("sim zone exhaust said %q", out)
		}
		capstanOK(t, "sim", "node", "stop", c.nodeOf(t, dead), "--kubeconfig", c.kubeconfig)
		most := c.watchVoting(t)
		c.deleteMachine(t, dead)
		var failed string
		testenv.Eventually(t, 4*time.Minute, func() (bool, string) {
			names, deleting := c.masters(t)
			for _, n := range names {
				if deleting[n] || n == dead || machine.MachineIndex(n) != machine.MachineIndex(dead) {
					continue
				}
				r, err := c.machines.MachineV1beta1().Machines(machine.Namespace).Get(ctx, n, metav1.GetOptions{})
				if err == nil && ptr.Deref(r.Status.Phase, "") == machinev1.PhaseFailed &&
					ptr.Deref(r.Status.ErrorReason, "") == machinev1.InsufficientResourcesMachineError {
					failed = n
				}
			}
			// The dead member leaves anyway: two healthy members are a
			// quorum of three.
			members := c.registry()
			return failed != "" && !slices.Contains(names, dead) && !slices.Contains(members, dead),
				fmt.Sprintf("machines %v (deleting %v), members %v, failed replacement %q", names, deleting, members, failed)
		})
		capstanOK(t, "sim", "zone", "restore", ps.Zone, "--kubeconfig", c.kubeconfig)
		c.deleteMachine(t, failed)
		after := c.waitSettled(t, 4*time.Minute)
		if n := most(); n > 3 {
			t.Errorf("%d voting members at once: the failed replacement was replaced twice", n)
		}
		if slices.Contains(after, failed) || slices.Contains(after, dead) {
			t.Errorf("machines %v after replacing %s and its failed replacement %s", after, dead, failed)
		}
		index := 0
		for _, n := range after {
			if machine.MachineIndex(n) == machine.MachineIndex(dead) {
				index++
			}
		}
		if index != 1 || len(after) != 3 {
			t.Errorf("machines %v: want 3, one of index %d", after, machine.MachineIndex(dead))
		}
		c.checkControlPlaneMachineSet(t)
	}) {
		return
	}

	// Each step starts from where the last left the cluster.
	if !t.Run("the leader's member process SIGKILLed under writes: nothing acknowledged lost, the outage a leader election", func(t *testing.T) {
		before := c.settledMasters(t)
		w := startWriter(t, c.kube, "writes-member-kill")
		for range 2 {
			_, _, leader := c.etcdStatus(t)
			pids, err := etcd.MemberProcesses(c.dir)
			if err != nil || pids[leader] == 0 {
				t.Fatalf("the leader %q has no process (%v): %v", leader, err, pids)
			}
			killed := pids[leader]
			if err := syscall.Kill(killed, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
				now, err := etcd.MemberProcesses(c.dir)
				if err != nil || now[leader] == 0 || now[leader] == killed {
					return false, fmt.Sprintf("member %s not started again (killed %d): %v %v", leader, killed, now, err)
				}
				voting, healthy, _ := c.etcdStatus(t)
				return len(voting) == 3 && healthy == 3, fmt.Sprintf("voting %v, %d healthy", voting, healthy)
			})
		}
		acked, failed, longest := w.finish(t)
		t.Logf("%d writes acknowledged, %d failed, longest outage %s", acked, failed, longest.Round(10*time.Millisecond))
		if longest > maxOutage {
			t.Errorf("the API refused writes for %s, longer than a leader election", longest)
		}
		if after := c.settledMasters(t); !slices.Equal(after, before) {
			t.Errorf("machines %v became %v: a member's process is not the machine", before, after)
		}
	}) {
		return
	}

	// Each step starts from where the last left the cluster.
	if !t.Run("stopped machines: one degrades etcd, two take the API down, one back restores it", func(t *testing.T) {
		ctx := context.Background()
		current := c.settledMasters(t)
		a, b := c.nodeOf(t, current[0]), c.nodeOf(t, current[1])
		write := func(name string) error {
			wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, err := c.kube.CoreV1().ConfigMaps("default").Create(wctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			return err
		}
		if err := write("before-the-faults"); err != nil {
			t.Fatal(err)
		}
		// Prometheus scrapes the three members and nothing else.
		testenv.Eventually(t, time.Minute, func() (bool, string) {
			ls, vs, err := c.prom.Query(ctx, `up{job="etcd"}`, time.Time{})
			if err != nil {
				return false, err.Error()
			}
			return len(ls) == 3, fmt.Sprintf("up{job=\"etcd\"}: %v %v\ntargets: %s", ls, vs, c.prom.TargetsDump(ctx, "etcd"))
		})
		capstanOK(t, "sim", "node", "stop", a, "--kubeconfig", c.kubeconfig)
		testenv.Eventually(t, time.Minute, func() (bool, string) {
			co, err := c.config.ConfigV1().ClusterOperators().Get(ctx, etcd.ClusterOperatorName, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			d := condition(co.Status.Conditions, configv1.OperatorDegraded)
			return d.Status == configv1.ConditionTrue && d.Reason == "EtcdMembers_UnhealthyMembers" &&
				d.Message == "EtcdMembersDegraded: 2 of 3 members are available, "+current[0]+" is unhealthy", fmt.Sprintf("Degraded %s %s %q", d.Status, d.Reason, d.Message)
		})
		if err := write("with-two-members"); err != nil {
			t.Fatalf("two of three members lost the API: %v", err)
		}
		// A member down: etcdMembersDown, and nothing worse once the two
		// left have a leader (if the stopped member led, they elect one
		// first, and a scrape in the election may start etcdNoLeader's
		// pending state: its `for` is there for that).
		c.prom.WaitAlertFiring(t, "etcdMembersDown", map[string]string{"job": "etcd"}, time.Minute)
		testenv.Eventually(t, time.Minute, func() (bool, string) {
			alerts, err := c.prom.Alerts(ctx)
			if err != nil {
				return false, err.Error()
			}
			for _, a := range alerts {
				if n := a.Labels["alertname"]; n == "etcdNoLeader" || n == "etcdInsufficientMembers" {
					return false, fmt.Sprintf("%s with two members of three: %+v\ntargets: %s", n, a, c.prom.TargetsDump(ctx, "etcd"))
				}
			}
			return true, ""
		})
		capstanOK(t, "sim", "node", "stop", b, "--kubeconfig", c.kubeconfig)
		// One of three: no quorum, no writes.
		testenv.Eventually(t, time.Minute, func() (bool, string) {
			err := write(fmt.Sprintf("no-quorum-%d", time.Now().UnixNano()))
			return err != nil, "a write succeeded with one member of three"
		})
		// The Prometheus, which needs no API, sees the last member without
		// a leader, and too few members.
		c.prom.WaitAlertFiring(t, "etcdNoLeader", map[string]string{"job": "etcd"}, time.Minute)
		c.prom.WaitAlertFiring(t, "etcdInsufficientMembers", map[string]string{"job": "etcd"}, time.Minute)
		down := time.Now()
		out := capstanOK(t, "sim", "node", "start", b, "--kubeconfig", c.kubeconfig, "--data-dir", c.dir)
		if !strings.Contains(out, "node/"+b+" started through "+c.dir+" (the API is unavailable)") {
			t.Errorf("sim node start with the API down said %q", out)
		}
		testenv.Eventually(t, 2*time.Minute, func() (bool, string) {
			err := write(fmt.Sprintf("back-%d", time.Now().UnixNano()))
			return err == nil, fmt.Sprintf("the API is still down: %v", err)
		})
		t.Logf("the API was unavailable for %s after the second machine stopped (including the time to start it)", time.Since(down).Round(100*time.Millisecond))
		for _, n := range []string{"before-the-faults", "with-two-members"} {
			if _, err := c.kube.CoreV1().ConfigMaps("default").Get(ctx, n, metav1.GetOptions{}); err != nil {
				t.Errorf("write %s lost: %v", n, err)
			}
		}
		c.prom.WaitAlertResolved(t, "etcdNoLeader", nil, time.Minute)
		c.prom.WaitAlertResolved(t, "etcdInsufficientMembers", nil, time.Minute)
		capstanOK(t, "sim", "node", "start", a, "--kubeconfig", c.kubeconfig)
		c.waitSettled(t, 2*time.Minute)
		c.prom.WaitAlertResolved(t, "etcdMembersDown", nil, time.Minute)
		testenv.Eventually(t, time.Minute, func() (bool, string) {
			co, err := c.config.ConfigV1().ClusterOperators().Get(ctx, etcd.ClusterOperatorName, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			d := condition(co.Status.Conditions, configv1.OperatorDegraded)
			return d.Status == configv1.ConditionFalse, "still Degraded: " + d.Message
		})
	}) {
		return
	}
	t.Run("a snapshot brings the cluster back after two masters' data is lost", c.restoreAfterQuorumLoss)
}

// nodeOf is the node of a machine.
func (c *etcdCluster) nodeOf(t *testing.T, name string) string {
	t.Helper()
	m, err := c.machines.MachineV1beta1().Machines(machine.Namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil || m.Status.NodeRef == nil {
		t.Fatalf("the node of machine %s: %v", name, err)
	}
	return m.Status.NodeRef.Name
}

// watchMemberCount samples how many voting members etcd has (learners
// do not count: a member that left before its replacement voted shows)
// until the returned function is called, which says the fewest seen.
func (c *etcdCluster) watchMemberCount() func() int {
	done := make(chan struct{})
	result := make(chan int, 1)
	go func() {
		fewest := 1 << 30
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if n := c.votingCount(); n > 0 {
				fewest = min(fewest, n)
			}
			select {
			case <-done:
				result <- fewest
				return
			case <-tick.C:
			}
		}
	}()
	return func() int {
		close(done)
		return <-result
	}
}

// votingCount asks etcd how many voting members it has (0: no answer).
func (c *etcdCluster) votingCount() int {
	cl, err := datadir.StorageClient(c.dir)
	if err != nil {
		return 0
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	list, err := cl.MemberList(ctx)
	if err != nil {
		return 0
	}
	n := 0
	for _, m := range list.Members {
		if !m.IsLearner {
			n++
		}
	}
	return n
}

// settledMasters are the three control-plane machines of a settled
// cluster.
func (c *etcdCluster) settledMasters(t *testing.T) []string {
	t.Helper()
	names, deleting := c.masters(t)
	if len(names) != 3 || len(deleting) != 0 {
		t.Fatalf("the control plane is not settled: machines %v, deleting %v", names, deleting)
	}
	return names
}

// etcdStatus asks etcd itself (not capstan's registry) for its voting
// members, how many of them answer naming a leader, and the leader.
func (c *etcdCluster) etcdStatus(t *testing.T) (voting []string, healthy int, leader string) {
	t.Helper()
	cl, err := datadir.StorageClient(c.dir)
	if err != nil {
		return nil, 0, ""
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := cl.MemberList(ctx)
	if err != nil {
		return nil, 0, ""
	}
	names := map[uint64]string{}
	for _, m := range list.Members {
		names[m.ID] = m.Name
	}
	for _, m := range list.Members {
		if m.IsLearner {
			continue
		}
		voting = append(voting, m.Name)
		if len(m.ClientURLs) == 0 {
			continue
		}
		if st, err := cl.Status(ctx, m.ClientURLs[0]); err == nil && st.Leader != 0 {
			healthy++
			leader = names[st.Leader]
		}
	}
	sort.Strings(voting)
	return voting, healthy, leader
}

// watchVoting samples how many voting members etcd has until the
// returned function is called, which says the most seen.
func (c *etcdCluster) watchVoting(t *testing.T) func() int {
	done := make(chan struct{})
	result := make(chan int, 1)
	go func() {
		most := 0
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			most = max(most, c.votingCount())
			select {
			case <-done:
				result <- most
				return
			case <-tick.C:
			}
		}
	}()
	return func() int {
		close(done)
		return <-result
	}
}
