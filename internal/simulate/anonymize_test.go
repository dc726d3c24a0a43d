package simulate

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
)

func TestAnAnonymizedSnapshotNamesNothingButStillFitsTogether(t *testing.T) {
	c := AWSCluster{Zones: []string{"us-east-1a", "us-east-1b"}, WorkersPerZone: 2, PodsPerWorker: []int{2, 1}, Created: time.Now()}
	objs, err := c.Objects()
	if err != nil {
		t.Fatal(err)
	}
	// A pod with the secrets a workload carries, placed by a label and a
	// taint of the team's own.
	for i := range objs {
		o := objs[i].Object
		switch objs[i].GetKind() {
		case "Pod":
			if objs[i].GetName() != "web-7d9f8-00000" {
				continue
			}
			spec := o["spec"].(map[string]any)
			spec["nodeSelector"] = map[string]any{"team": "payments"}
			spec["tolerations"] = append(spec["tolerations"].([]any), map[string]any{"key": "dedicated", "value": "payments", "effect": "NoSchedule", "operator": "Equal"})
			ctr := spec["containers"].([]any)[0].(map[string]any)
			ctr["env"] = []any{map[string]any{"name": "DB_PASSWORD", "value": "hunter2"}}
			ctr["args"] = []any{"--token=s3cr3t"}
			objs[i].SetAnnotations(map[string]string{"acme.com/owner": "alice@acme.com"})
		case "Node":
			if objs[i].GetName() == "ip-10-0-1-10.ec2.internal" {
				l := objs[i].GetLabels()
				l["team"] = "payments"
				objs[i].SetLabels(l)
				spec := o["spec"].(map[string]any)
				spec["taints"] = []any{map[string]any{"key": "dedicated", "value": "payments", "effect": "NoSchedule"}}
			}
		}
	}
	// The Service and the autoscaler in front of the web Deployment.
	objs = append(objs,
		unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{"name": "web", "namespace": "shop"},
			"spec": map[string]any{"clusterIP": "172.30.9.9", "selector": map[string]any{"app": "web"}, "ports": []any{map[string]any{"port": int64(80)}}}}},
		unstructured.Unstructured{Object: map[string]any{"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": map[string]any{"name": "web", "namespace": "shop"},
			"spec": map[string]any{"scaleTargetRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "minReplicas": int64(2), "maxReplicas": int64(9)}}})
	snap, _, err := SnapshotOf(objs, time.Now(), "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := snap.Anonymize(); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := snap.Write(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, leak := range []string{"shop", "quay.io", "172.30.9.9", "ip-10-0-1-10", "prod-worker-us-east-1a", "aws:///", "payments", "team", "hunter2", "DB_PASSWORD", "s3cr3t", "alice"} {
		if i := strings.Index(out, leak); i >= 0 {
			t.Errorf("the anonymized snapshot still holds %q: ...%s...", leak, out[max(0, i-200):min(len(out), i+50)])
		}
	}
	for _, kept := range []string{"us-east-1a", "node-role.kubernetes.io/worker", "machine.openshift.io/vCPU", "NoSchedule", `"instanceType":"m6i.xlarge"`} {
		if !strings.Contains(out, kept) {
			t.Errorf("the anonymized snapshot lost %q", kept)
		}
	}
	if _, err := Load("anonymized", b.Bytes()); err != nil {
		t.Fatalf("the anonymized snapshot does not load: %v", err)
	}

	get := func(key string) []unstructured.Unstructured { return snap.Objects[key] }
	nodes, machines := map[string]map[string]string{}, map[string]bool{}
	for _, n := range get("v1/nodes") {
		nodes[n.GetName()] = n.GetLabels()
		if n.GetLabels()["kubernetes.io/hostname"] != n.GetName() {
			t.Errorf("node %s: hostname label %q", n.GetName(), n.GetLabels()["kubernetes.io/hostname"])
		}
	}
	for _, m := range get("machine.openshift.io/v1beta1/machines") {
		machines[m.GetNamespace()+"/"+m.GetName()] = true
		if ref, _, _ := unstructured.NestedString(m.Object, "status", "nodeRef", "name"); nodes[ref] == nil {
			t.Errorf("machine %s: node %q is not in the snapshot", m.GetName(), ref)
		}
	}
	for _, n := range get("v1/nodes") {
		if _, worker := n.GetLabels()["node-role.kubernetes.io/worker"]; !worker {
			continue // the masters' Machines are not among the objects
		}
		if m := n.GetAnnotations()["machine.openshift.io/machine"]; !machines[m] {
			t.Errorf("node %s: machine %q is not in the snapshot", n.GetName(), m)
		}
	}
	deploy := get("apps/v1/deployments")[0]
	sel, _, _ := unstructured.NestedStringMap(deploy.Object, "spec", "selector", "matchLabels")
	svc := get("v1/services")[0]
	svcSel, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
	if svc.GetNamespace() != deploy.GetNamespace() || len(svcSel) != 1 || !labels.SelectorFromSet(svcSel).Matches(labels.Set(get("v1/pods")[0].GetLabels())) {
		t.Errorf("the Service %s/%s (selector %v) no longer selects the web pods", svc.GetNamespace(), svc.GetName(), svcSel)
	}
	if target, _, _ := unstructured.NestedString(get("autoscaling/v2/horizontalpodautoscalers")[0].Object, "spec", "scaleTargetRef", "name"); target != deploy.GetName() {
		t.Errorf("the autoscaler targets %q, not the Deployment %q", target, deploy.GetName())
	}
	for _, p := range get("v1/pods") {
		if p.GetNamespace() != deploy.GetNamespace() || !labels.SelectorFromSet(sel).Matches(labels.Set(p.GetLabels())) {
			t.Errorf("pod %s/%s (labels %v) is no longer selected by its Deployment %s/%s (%v)", p.GetNamespace(), p.GetName(), p.GetLabels(), deploy.GetNamespace(), deploy.GetName(), sel)
		}
		node, _, _ := unstructured.NestedString(p.Object, "spec", "nodeName")
		if nodes[node] == nil {
			t.Errorf("pod %s: node %q is not in the snapshot", p.GetName(), node)
		}
		if ns, ok, _ := unstructured.NestedStringMap(p.Object, "spec", "nodeSelector"); ok {
			if !labels.SelectorFromSet(ns).Matches(labels.Set(nodes[node])) {
				t.Errorf("pod %s: its node selector %v no longer matches its node's labels %v", p.GetName(), ns, nodes[node])
			}
			tols, _, _ := unstructured.NestedSlice(p.Object, "spec", "tolerations")
			taints, _, _ := unstructured.NestedSlice(snapNode(snap, node).Object, "spec", "taints")
			taint := taints[0].(map[string]any)
			tol := tols[len(tols)-1].(map[string]any)
			if taint["key"] != tol["key"] || taint["value"] != tol["value"] {
				t.Errorf("pod %s: toleration %v no longer tolerates its node's taint %v", p.GetName(), tol, taint)
			}
		}
	}
}

func snapNode(s *Snapshot, name string) unstructured.Unstructured {
	for _, n := range s.Objects["v1/nodes"] {
		if n.GetName() == name {
			return n
		}
	}
	return unstructured.Unstructured{}
}
