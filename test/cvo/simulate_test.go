package cvo

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	mcfgclient "github.com/openshift/client-go/machineconfiguration/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/yaml"

	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/cvo"
	"github.com/capstan-dev/capstan/internal/mco"
	"github.com/capstan-dev/capstan/internal/simulate"
	"github.com/capstan-dev/capstan/internal/testenv"
	"github.com/capstan-dev/capstan/internal/updateservice/demo"
)

// rolloutNodes are the simulated pool's nodes, in the order they are
// created, each in a later second: the MCO takes zone-a's first, the
// older one first, then zone-b's.
var rolloutNodes = []struct{ name, zone string }{
	{"roll-c", "zone-b"}, {"roll-b", "zone-a"}, {"roll-a", "zone-a"},
}

// A MachineConfig simulated on a snapshot of this cluster rolls out to
// the same nodes in the same order as the MachineConfig then does here,
// and nothing else rolls: the snapshot's nodes are restored running their
// pools' configurations.
func TestSimulationOfAMachineConfigPredictsTheRollout(t *testing.T) {
	ctx := context.Background()
	mcfg, err := mcfgclient.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	addCustomPool(t, mcfg, "rollout", 1)
	for _, n := range rolloutNodes {
		addPoolNode(t, n.name, n.zone, "rollout")
		if err := cluster.WaitNodesReady(ctx, env.Client, []string{n.name}, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		// Each node is older than the next: the API keeps whole
		// seconds, so the next is made in a later second.
		created := env.GetNode(t, n.name).CreationTimestamp.Time
		testenv.Eventually(t, 10*time.Second, func() (bool, string) {
			return time.Now().Truncate(time.Second).After(created), "the second " + n.name + " was made in"
		})
	}
	first := waitPool(t, mcfg, "rollout", "the rollout pool never took its nodes", func(p *mcfgv1.MachineConfigPool) bool {
		return p.Status.MachineCount == 3 && p.Status.UpdatedMachineCount == 3 && poolCondition(p, mcfgv1.MachineConfigPoolUpdated) == corev1.ConditionTrue
	})

	dir := t.TempDir()
	mc := &mcfgv1.MachineConfig{
		TypeMeta:   metav1.TypeMeta{APIVersion: "machineconfiguration.openshift.io/v1", Kind: "MachineConfig"},
		ObjectMeta: metav1.ObjectMeta{Name: "99-rollout-chrony", Labels: map[string]string{mco.RoleLabel: "rollout"}},
		Spec: mcfgv1.MachineConfigSpec{Config: runtime.RawExtension{Raw: []byte(
			`{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/chrony.conf","mode":420,"contents":{"source":"data:,server%20ntp.example.com"}}]}}`)}},
	}
	data, err := yaml.Marshal(mc)
	if err != nil {
		t.Fatal(err)
	}
	mcFile := filepath.Join(dir, "mc.yaml")
	if err := os.WriteFile(mcFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(dir, "snap.json")
	capstanOK(t, "simulate", "snapshot", "--kubeconfig", env.Kubeconfig, "-o", snap)
	rep := testenv.SimulateRun(t, "--snapshot", snap, "--change", "machineconfig="+mcFile, "--control=false", "--speed", "20", "--quiet", "3m", "--reboot-time", "1m")

	// The same MachineConfig here, the order in which the MCO targets
	// the nodes watched.
	w, err := env.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: "node-role.kubernetes.io/rollout"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var mu sync.Mutex
	var realOrder []string
	go func() {
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok || ev.Type != watch.Modified {
				continue
			}
			d := n.Annotations[mco.DesiredConfigAnnotation]
			mu.Lock()
			if d != first.Spec.Configuration.Name && d != "" && !slices.Contains(realOrder, n.Name) {
				realOrder = append(realOrder, n.Name)
			}
			mu.Unlock()
		}
	}()
	if _, err := mcfg.MachineconfigurationV1().MachineConfigs().Create(ctx, mc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = mcfg.MachineconfigurationV1().MachineConfigs().Delete(context.Background(), mc.Name, metav1.DeleteOptions{})
	})
	waitPool(t, mcfg, "rollout", "the rollout never completed", func(p *mcfgv1.MachineConfigPool) bool {
		return p.Spec.Configuration.Name != first.Spec.Configuration.Name && p.Status.Configuration.Name == p.Spec.Configuration.Name &&
			p.Status.UpdatedMachineCount == 3
	})
	mu.Lock()
	got := strings.Join(realOrder, " ")
	mu.Unlock()
	// Zone-a's first, the older first, then zone-b's.
	if got != "roll-b roll-a roll-c" {
		t.Errorf("the MCO updated %s; want roll-b roll-a roll-c, zone-a's nodes oldest first, then zone-b's", got)
	}

	if len(rep.Rollouts) != 1 {
		t.Fatalf("the simulation rolled %d pools, want the rollout pool alone: %+v", len(rep.Rollouts), rep.Rollouts)
	}
	ro := rep.Rollouts[0]
	var simOrder []string
	for _, u := range ro.Order {
		simOrder = append(simOrder, u.Node)
		if u.Updated == nil || u.State != mco.StateDone {
			t.Errorf("simulated update of %s: %+v", u.Node, u)
		}
	}
	if ro.Pool != "rollout" || ro.Nodes != 3 || ro.Updated != 3 || ro.MaxUnavailable != 1 || ro.Finished == nil {
		t.Errorf("simulated rollout %+v; want the rollout pool's 3 nodes updated, one at a time", ro)
	}
	if sim := strings.Join(simOrder, " "); sim != got {
		t.Errorf("the simulation updated %s; the MCO updated %s", sim, got)
	}
	// One at a time: each node targeted once the one before was done.
	for i := 1; i < len(ro.Order); i++ {
		if prev := ro.Order[i-1]; prev.Updated != nil && ro.Order[i].Targeted < *prev.Updated {
			t.Errorf("%s targeted at %s, before %s was updated at %s", ro.Order[i].Node, ro.Order[i].Targeted, prev.Node, *prev.Updated)
		}
	}
	for _, c := range rep.Changes {
		if c.Error != "" {
			t.Errorf("change %s: %s", c.Change, c.Error)
		}
	}
	t.Logf("simulated rollout: %s", fmt.Sprint(ro))
}

// checkSimulatedUpdate simulates the update to version on the snapshot
// taken before this cluster made it, and compares: the simulation's CVO
// waits on the operators' run levels in the order this cluster's
// operators reported the version (operators, the CVO first, as they
// did), its MCO rolls the master pool in the order this one did
// (masters) and leaves the paused worker pool alone, as this one did.
func checkSimulatedUpdate(t *testing.T, snap, version string, operators, masters []string) {
	t.Helper()
	rep := testenv.SimulateRun(t, "--snapshot", snap, "--change", "update="+version, "--control=false", "--speed", "20", "--quiet", "2m", "--reboot-time", "30s")
	u := rep.Update
	if u == nil {
		t.Fatalf("the simulation reports no update: %+v", rep.Changes)
	}
	if u.From != "4.10.22" || u.To != version || u.Channel != "fast-4.11" || u.Conditional || u.State != "Completed" || u.Took == nil || !rep.Settled {
		t.Errorf("simulated update %+v (settled %v); want a completed update from 4.10.22 to %s in fast-4.11", u, rep.Settled, version)
	}
	levelOf := map[string]string{}
	for _, op := range demo.Operators {
		levelOf[op.Name] = op.RunLevel
	}
	var realLevels []string
	for _, op := range operators {
		if l, ok := levelOf[op]; ok && !slices.Contains(realLevels, l) {
			realLevels = append(realLevels, l)
		}
	}
	var simLevels []string
	for i, l := range u.RunLevels {
		if i > 0 && l.Started < u.RunLevels[i-1].Finished-simulate.Duration(time.Second) {
			t.Errorf("simulated run level %s started at %s, before %s finished at %s", l.RunLevel, l.Started, u.RunLevels[i-1].RunLevel, u.RunLevels[i-1].Finished)
		}
		if l.Operator != "" {
			simLevels = append(simLevels, l.RunLevel)
		}
	}
	if got, want := strings.Join(simLevels, " "), strings.Join(realLevels, " "); got != want {
		t.Errorf("the simulation waited on operators at run levels %s; this cluster's reported at %s (%v)", got, want, operators)
	}
	// The master pool's three reboots outlast every other operator.
	if u.LongestOperator != "machine-config" {
		t.Errorf("the simulation waited longest on %s, want machine-config (the master pool's rollout)", u.LongestOperator)
	}
	// Those of this cluster that are not the release's (etcd's, when its
	// operator runs) are named.
	cos, err := configClient(t).ConfigV1().ClusterOperators().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	notCarried := []string{}
	for _, co := range cos.Items {
		if _, ok := levelOf[co.Name]; !ok && co.Name != cvo.Name {
			notCarried = append(notCarried, co.Name)
		}
	}
	slices.Sort(notCarried)
	if !slices.Equal(u.NotSimulated, notCarried) {
		t.Errorf("ClusterOperators not simulated %v, want %v (this cluster's that the release does not carry)", u.NotSimulated, notCarried)
	}
	if len(rep.Rollouts) != 1 || rep.Rollouts[0].Pool != "master" || rep.Rollouts[0].Finished == nil {
		t.Fatalf("the simulation rolled %+v; want the master pool alone, to the end (the worker pool is paused)", rep.Rollouts)
	}
	var simOrder []string
	for _, n := range rep.Rollouts[0].Order {
		simOrder = append(simOrder, n.Node)
	}
	if !slices.Equal(simOrder, masters) {
		t.Errorf("the simulation updated the masters %v; this cluster's MCO updated %v", simOrder, masters)
	}
	if *u.Completed < *rep.Rollouts[0].Finished {
		t.Errorf("the simulated update completed at %s, before the master pool finished at %s", *u.Completed, *rep.Rollouts[0].Finished)
	}

	// The minor update the same snapshot offers, conditionally, is held
	// there as here by the ingress operator's Upgradeable=False.
	held := testenv.SimulateRun(t, "--snapshot", snap, "--change", "update=4.11.0", "--control=false", "--speed", "20", "--quiet", "2m", "--for", "30m")
	if h := held.Update; h == nil || !h.Conditional || len(h.Risks) != 1 || h.Risks[0].Name != "RPMOSTreeTimeout" || h.Recommended == "" ||
		!strings.HasPrefix(h.NotUpgradeable, "AdminAckRequired: ") || h.State != "not accepted" || h.Accepted != nil ||
		!strings.Contains(h.Progress, `Precondition "ClusterVersionUpgradeable" failed because of "AdminAckRequired"`) {
		t.Errorf("the simulated minor update %+v; want it held by ingress's AdminAckRequired, its risk RPMOSTreeTimeout listed", held.Update)
	}
	if !held.Settled || len(held.Rollouts) != 0 {
		t.Errorf("the held update: settled %v, rollouts %+v; want settled, nothing rolled", held.Settled, held.Rollouts)
	}

	// The console's What-if page shows the update's course.
	raw, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(t.TempDir(), "update-report.json")
	if err := os.WriteFile(report, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	tab := consoleTab(t)
	tab.Go(env.Cluster.ConsoleURL + "/#/simulate")
	tab.WaitText("main", "No report open.", 30*time.Second)
	tab.Upload("#report-file", report)
	tab.WaitText("#update-title", "Update from 4.10.22 to "+version, 10*time.Second)
	for _, l := range u.RunLevels {
		if l.RunLevel == "80" {
			tab.WaitText(`tr[data-key="80"]`, "machine-config ("+l.Waited.String()+")", 10*time.Second)
		}
	}
	tab.WaitText("main", "Waited longest on ClusterOperator machine-config", 10*time.Second)
	tab.A11y("what-if simulation of an update")
}
