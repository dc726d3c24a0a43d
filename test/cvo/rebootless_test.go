package cvo

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	opv1 "github.com/openshift/api/operator/v1"
	mcfgclient "github.com/openshift/client-go/machineconfiguration/clientset/versioned"
	operatorclient "github.com/openshift/client-go/operator/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/mco"
	"github.com/capstan-dev/capstan/internal/sim"
)

// Changes OpenShift applies without a reboot are applied so, as the
// machine-config-daemon decides it: a registry mirror reloads CRI-O and
// drains nothing, the pull secret takes no action at all, and a file the
// MachineConfiguration cluster's nodeDisruptionPolicy names takes its
// actions (a service restarted); a file nothing covers still reboots.
func TestRebootlessMachineConfigChanges(t *testing.T) {
	ctx := context.Background()
	mcfg, err := mcfgclient.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	op, err := operatorclient.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	const node, role = "rebootless-1", "rebootless"
	addPoolNode(t, node, "zone-a", role)
	if err := cluster.WaitNodesReady(ctx, env.Client, []string{node}, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	addCustomPool(t, mcfg, role, 1)
	waitPool(t, mcfg, role, "the pool never took its node", func(p *mcfgv1.MachineConfigPool) bool {
		return p.Status.MachineCount == 1 && p.Status.UpdatedMachineCount == 1 && poolCondition(p, mcfgv1.MachineConfigPoolUpdated) == corev1.ConditionTrue
	})
	// The admin's policy: a restart of app.service for its configuration.
	mc := &opv1.MachineConfiguration{ObjectMeta: metav1.ObjectMeta{Name: mco.MachineConfigurationName},
		Spec: opv1.MachineConfigurationSpec{StaticPodOperatorSpec: opv1.StaticPodOperatorSpec{OperatorSpec: opv1.OperatorSpec{ManagementState: opv1.Managed}},
			NodeDisruptionPolicy: opv1.NodeDisruptionPolicyConfig{Files: []opv1.NodeDisruptionPolicySpecFile{{Path: "/etc/capstan-e2e/app.conf",
				Actions: []opv1.NodeDisruptionPolicySpecAction{{Type: opv1.RestartSpecAction, Restart: &opv1.RestartService{ServiceName: "app.service"}}}}},
				SSHKey: opv1.NodeDisruptionPolicySpecSSHKey{Actions: []opv1.NodeDisruptionPolicySpecAction{{Type: opv1.NoneSpecAction}}}}}}
	if _, err := op.OperatorV1().MachineConfigurations().Create(ctx, mc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = op.OperatorV1().MachineConfigurations().Delete(context.Background(), mco.MachineConfigurationName, metav1.DeleteOptions{})
	})

	configs := mcfg.MachineconfigurationV1().MachineConfigs()
	boots := func() int { return sim.Boot(env.GetNode(t, node)) }
	// apply rolls one MachineConfig of files onto the node and returns the
	// node's events of the rollout.
	apply := func(name string, files map[string]string) []corev1.Event {
		t.Helper()
		var fs []string
		for path, content := range files {
			fs = append(fs, fmt.Sprintf(`{"path":%q,"contents":{"source":"data:,%s"}}`, path, content))
		}
		before := getPool(t, mcfg, role).Spec.Configuration.Name
		obj := &mcfgv1.MachineConfig{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{mco.RoleLabel: role}},
			Spec: mcfgv1.MachineConfigSpec{Config: runtime.RawExtension{Raw: []byte(`{"ignition":{"version":"3.2.0"},"storage":{"files":[` + strings.Join(fs, ",") + `]}}`)}}}
		if _, err := configs.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = configs.Delete(context.Background(), name, metav1.DeleteOptions{}) })
		p := waitPool(t, mcfg, role, "the pool never rendered "+name, func(p *mcfgv1.MachineConfigPool) bool {
			return p.Spec.Configuration.Name != before && p.Spec.Configuration.Name != ""
		})
		want := p.Spec.Configuration.Name
		waitPool(t, mcfg, role, "the node never took "+name, func(p *mcfgv1.MachineConfigPool) bool {
			return p.Status.UpdatedMachineCount == 1 && p.Status.Configuration.Name == want
		})
		evs, err := env.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: fields.Set{"involvedObject.name": node}.String()})
		if err != nil {
			t.Fatal(err)
		}
		var out []corev1.Event
		for _, e := range evs.Items {
			if strings.Contains(e.Message, want) || e.Reason == "SkipReboot" || e.Reason == "ServiceReload" || e.Reason == "ServiceRestart" {
				out = append(out, e)
			}
		}
		return out
	}
	hasEvent := func(evs []corev1.Event, reason, message string) bool {
		for _, e := range evs {
			if e.Reason == reason && e.Message == message {
				return true
			}
		}
		return false
	}
	noDrain := func(what string) {
		t.Helper()
		n := env.GetNode(t, node)
		if n.Spec.Unschedulable || strings.HasPrefix(n.Annotations[mco.DesiredDrainAnnotation], "drain-"+n.Annotations[mco.CurrentConfigAnnotation]) {
			t.Errorf("%s: the node was drained (unschedulable %v, desired drain %s)", what, n.Spec.Unschedulable, n.Annotations[mco.DesiredDrainAnnotation])
		}
	}

	start := boots()
	evs := apply("99-e2e-mirror", map[string]string{"/etc/containers/registries.conf": "%5B%5Bregistry%5D%5D%0Alocation%3D%22quay.io%22%0Amirror-by-digest-only%3Dtrue%0A"})
	if !hasEvent(evs, "ServiceReload", "Config changes do not require reboot. Service crio.service was reloaded.") || hasEvent(evs, "Reboot", "") {
		t.Errorf("a registry mirror: events %v", reasons(evs))
	}
	noDrain("a registry mirror")
	evs = apply("99-e2e-pull-secret", map[string]string{"/var/lib/kubelet/config.json": "%7B%7D"})
	if !hasEvent(evs, "SkipReboot", "Config changes do not require reboot.") {
		t.Errorf("the pull secret: events %v", reasons(evs))
	}
	noDrain("the pull secret")
	evs = apply("99-e2e-app", map[string]string{"/etc/capstan-e2e/app.conf": "v2"})
	if !hasEvent(evs, "ServiceRestart", "Config changes do not require reboot. Service app.service was restarted.") {
		t.Errorf("a file of the node disruption policy: events %v", reasons(evs))
	}
	if b := boots(); b != start {
		t.Errorf("the node rebooted %d times for rebootless changes", b-start)
	}
	got, err := op.OperatorV1().MachineConfigurations().Get(ctx, mco.MachineConfigurationName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if fs := got.Status.NodeDisruptionPolicyStatus.ClusterPolicies.Files; len(fs) == 0 || fs[len(fs)-1].Path != "/etc/capstan-e2e/app.conf" {
		t.Errorf("status.nodeDisruptionPolicyStatus.clusterPolicies.files %+v", fs)
	}
	// Anything else reboots.
	apply("99-e2e-other", map[string]string{"/etc/capstan-e2e/other.conf": "x"})
	if b := boots(); b != start+1 {
		t.Errorf("a file no policy covers: %d reboots, want 1", b-start)
	}
}

func reasons(evs []corev1.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Reason+": "+e.Message)
	}
	return out
}
