package simulate

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The boot time is what the snapshot's cluster took from a MachineSet's
// Machine to its node's first Ready: the installer's machines, and a
// Ready that turned long after the node registered (a reboot), and the
// machines of the installation, say nothing of it.
func TestTheBootTimeIsTheSnapshotsOwn(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	s := validSnapshot()
	s.Objects["v1/nodes"], s.Objects["machine.openshift.io/v1beta1/machines"] = nil, nil
	addAt := func(name string, set bool, created time.Time, registered, ready time.Duration) {
		m := object("machine.openshift.io/v1beta1", "Machine", "openshift-machine-api", name)
		m.SetCreationTimestamp(metav1.NewTime(created))
		if set {
			m.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "machine.openshift.io/v1beta1", Kind: "MachineSet", Name: "workers", UID: "s"}})
		}
		m.Object["status"] = map[string]any{"nodeRef": map[string]any{"name": name}}
		n := object("v1", "Node", "", name)
		n.SetCreationTimestamp(metav1.NewTime(created.Add(registered)))
		n.Object["status"] = map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "True",
			"lastTransitionTime": created.Add(ready).Format(time.RFC3339)}}}
		s.Objects["machine.openshift.io/v1beta1/machines"] = append(s.Objects["machine.openshift.io/v1beta1/machines"], m)
		s.Objects["v1/nodes"] = append(s.Objects["v1/nodes"], n)
	}
	add := func(name string, set bool, registered, ready time.Duration) { addAt(name, set, t0, registered, ready) }
	// The installation, hours before: the masters and the first workers
	// wait for the control plane.
	addAt("master-0", false, t0.Add(-5*time.Hour), 20*time.Minute, 21*time.Minute)
	addAt("w-0", true, t0.Add(-5*time.Hour), 25*time.Minute, 26*time.Minute)
	add("w-1", true, 3*time.Minute, 4*time.Minute)      // 4m
	add("w-2", true, 2*time.Minute, 2*time.Minute+30e9) // 2m30s
	add("w-3", true, 5*time.Minute, 3*time.Hour)        // rebooted since: 5m
	d, n, ok := bootTimeOf(s)
	if !ok || n != 3 || d != 4*time.Minute {
		t.Errorf("boot time %s of %d machines (%v); want the median 4m0s of the 3 machines of a MachineSet", d, n, ok)
	}
	o := RunOptions{Snapshot: s}
	if line := resolveBootTime(&o); o.BootTime != 4*time.Minute || !strings.Contains(line, "the median of the snapshot's 3 machines of MachineSets") {
		t.Errorf("resolved %s: %q", o.BootTime, line)
	}
	o = RunOptions{Snapshot: s, BootTime: time.Minute}
	if line := resolveBootTime(&o); o.BootTime != time.Minute || !strings.Contains(line, "(--boot-time)") {
		t.Errorf("given: %s, %q", o.BootTime, line)
	}
	o = RunOptions{Snapshot: validSnapshot()}
	if line := resolveBootTime(&o); o.BootTime != DefaultBootTime || !strings.Contains(line, "the default") {
		t.Errorf("no machine of a MachineSet: %s, %q", o.BootTime, line)
	}
}

// The kinds only a restore makes are readied for the private cluster: a
// Service loses the cluster's addresses, a MachineHealthCheck's timeouts
// run at the speed, a CronJob is suspended.
func TestRestoredServicesHealthChecksAndCronJobsAreReadied(t *testing.T) {
	svc := object("v1", "Service", "shop", "web")
	svc.Object["spec"] = map[string]any{"clusterIP": "172.30.4.1", "clusterIPs": []any{"172.30.4.1"}, "ipFamilies": []any{"IPv4", "IPv6"},
		"type": "NodePort", "selector": map[string]any{"app": "web"}, "ports": []any{map[string]any{"port": int64(80), "nodePort": int64(30080)}}}
	if err := prepareRestore(&svc, 10); err != nil {
		t.Fatal(err)
	}
	spec := svc.Object["spec"].(map[string]any)
	port := spec["ports"].([]any)[0].(map[string]any)
	if spec["clusterIP"] != nil || spec["clusterIPs"] != nil || spec["ipFamilies"] != nil || port["nodePort"] != nil || port["port"] != int64(80) || spec["type"] != "NodePort" {
		t.Errorf("service spec %v", spec)
	}
	mhc := object("machine.openshift.io/v1beta1", "MachineHealthCheck", "openshift-machine-api", "workers")
	mhc.Object["spec"] = map[string]any{"unhealthyConditions": []any{map[string]any{"type": "Ready", "status": "Unknown", "timeout": "300s"}}}
	if err := prepareRestore(&mhc, 10); err != nil {
		t.Fatal(err)
	}
	if got := mhc.Object["spec"].(map[string]any); got["nodeStartupTimeout"] != "1m0s" || got["unhealthyConditions"].([]any)[0].(map[string]any)["timeout"] != "30s" {
		t.Errorf("health check spec %v; want the 10m default and 300s at 10x", got)
	}
	mhc.Object["spec"] = map[string]any{"nodeStartupTimeout": "ten minutes"}
	if err := prepareRestore(&mhc, 10); err == nil || !strings.Contains(err.Error(), `spec.nodeStartupTimeout "ten minutes"`) {
		t.Errorf("a bad timeout: %v", err)
	}
	cj := object("batch/v1", "CronJob", "app", "report")
	cj.Object["spec"] = map[string]any{"schedule": "*/5 * * * *"}
	if err := prepareRestore(&cj, 10); err != nil || cj.Object["spec"].(map[string]any)["suspend"] != true {
		t.Errorf("cron job %v, %v", cj.Object["spec"], err)
	}
}
