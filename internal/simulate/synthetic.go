package simulate

import (
	"fmt"
	"strconv"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// AWSCluster describes an OpenShift cluster on AWS that capstan never ran,
// as `kubectl get -o yaml` shows it: nodes named by their addresses, a
// master and a MachineSet of four-CPU workers per zone with AWS provider
// specs sized by their scale-from-zero annotations, and a Deployment,
// shop/web, of one-CPU pods on the workers. The benchmarks and the tests
// of `simulate run` start from it.
type AWSCluster struct {
	// Zones are the zones' names, us-east-1a and so on.
	Zones []string
	// WorkersPerZone is each zone's MachineSet's replicas.
	WorkersPerZone int
	// PodsPerWorker is how many web pods each worker of each zone runs.
	PodsPerWorker []int
	// Created is when the cluster's objects were made.
	Created time.Time
	// PodsPerDeployment splits the pods into Deployments of that many,
	// web-000, web-001 and so on, each with its disruption budget; 0 is
	// one Deployment, web.
	PodsPerDeployment int
}

// Objects are the cluster's objects, as the API server lists them.
func (c AWSCluster) Objects() ([]unstructured.Unstructured, error) {
	created := metav1.NewTime(c.Created)
	var items []runtime.Object
	add := func(objs ...runtime.Object) { items = append(items, objs...) }
	alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("15Gi"), corev1.ResourcePods: resource.MustParse("250")}
	ready := []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}
	awsSpec := func(zone string) *runtime.RawExtension {
		return &runtime.RawExtension{Raw: fmt.Appendf(nil, `{"apiVersion":"machine.openshift.io/v1beta1","kind":"AWSMachineProviderConfig",`+
			`"instanceType":"m6i.xlarge","placement":{"availabilityZone":%q,"region":"us-east-1"}}`, zone)}
	}
	requests := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}
	template := func(app string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app, "pod-template-hash": "7d9f8"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "quay.io/shop/web:3", Resources: corev1.ResourceRequirements{Requests: requests}}}}}
	}
	// workload names the Deployment of the pod numbered i.
	workload := func(i int) string {
		if c.PodsPerDeployment <= 0 {
			return "web"
		}
		return fmt.Sprintf("web-%03d", i/c.PodsPerDeployment)
	}
	replicas := map[string]int{}
	var workloads []string
	pods := 0
	for zi, zone := range c.Zones {
		if zi >= len(c.PodsPerWorker) {
			return nil, fmt.Errorf("zone %s has no pods-per-worker count (%d for %d zones)", zone, len(c.PodsPerWorker), len(c.Zones))
		}
		node := func(name, machineName string, labels map[string]string, taints []corev1.Taint) *corev1.Node {
			labels["topology.kubernetes.io/zone"], labels["topology.kubernetes.io/region"] = zone, "us-east-1"
			labels["node.kubernetes.io/instance-type"], labels["kubernetes.io/hostname"] = "m6i.xlarge", name
			return &corev1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
				ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: created, UID: types.UID("node-" + name), Labels: labels,
					Annotations: map[string]string{"machine.openshift.io/machine": "openshift-machine-api/" + machineName}},
				Spec:   corev1.NodeSpec{ProviderID: "aws:///" + zone + "/i-" + name, Taints: taints},
				Status: corev1.NodeStatus{Allocatable: alloc, Capacity: alloc, Conditions: ready}}
		}
		master := fmt.Sprintf("ip-10-%d-0-10.ec2.internal", zi)
		add(node(master, "prod-master-"+strconv.Itoa(zi), map[string]string{"node-role.kubernetes.io/master": "", "node-role.kubernetes.io/control-plane": ""},
			[]corev1.Taint{{Key: "node-role.kubernetes.io/master", Effect: corev1.TaintEffectNoSchedule}}))
		set := "prod-worker-" + zone
		selector := map[string]string{"machine.openshift.io/cluster-api-machineset": set, "machine.openshift.io/cluster-api-machine-role": "worker"}
		add(&machinev1.MachineSet{TypeMeta: metav1.TypeMeta{APIVersion: "machine.openshift.io/v1beta1", Kind: "MachineSet"},
			ObjectMeta: metav1.ObjectMeta{Name: set, Namespace: "openshift-machine-api", UID: types.UID("set-" + zone), CreationTimestamp: created,
				Annotations: map[string]string{"machine.openshift.io/vCPU": "4", "machine.openshift.io/memoryMb": "16384", "machine.openshift.io/GPU": "0"}},
			Spec: machinev1.MachineSetSpec{Replicas: new(int32(c.WorkersPerZone)), Selector: metav1.LabelSelector{MatchLabels: selector},
				Template: machinev1.MachineTemplateSpec{ObjectMeta: machinev1.ObjectMeta{Labels: selector},
					Spec: machinev1.MachineSpec{ProviderSpec: machinev1.ProviderSpec{Value: awsSpec(zone)}}}}})
		for i := range c.WorkersPerZone {
			name := fmt.Sprintf("ip-10-%d-%d-%d.ec2.internal", zi, 1+i/250, 10+i%250)
			m := fmt.Sprintf("%s-w%05d", set, i)
			add(node(name, m, map[string]string{"node-role.kubernetes.io/worker": ""}, nil))
			add(&machinev1.Machine{TypeMeta: metav1.TypeMeta{APIVersion: "machine.openshift.io/v1beta1", Kind: "Machine"},
				ObjectMeta: metav1.ObjectMeta{Name: m, Namespace: "openshift-machine-api", Labels: selector, CreationTimestamp: created,
					OwnerReferences: []metav1.OwnerReference{{APIVersion: "machine.openshift.io/v1beta1", Kind: "MachineSet", Name: set, UID: types.UID("set-" + zone), Controller: new(true)}}},
				Spec:   machinev1.MachineSpec{ProviderSpec: machinev1.ProviderSpec{Value: awsSpec(zone)}},
				Status: machinev1.MachineStatus{NodeRef: &corev1.ObjectReference{Kind: "Node", Name: name}, Phase: new("Running")}})
			for range c.PodsPerWorker[zi] {
				app := workload(pods)
				if replicas[app] == 0 {
					workloads = append(workloads, app)
				}
				replicas[app]++
				t := template(app)
				spec := *t.Spec.DeepCopy()
				spec.NodeName = name
				spec.Tolerations = []corev1.Toleration{
					{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: new(int64(300))},
					{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: new(int64(300))}}
				add(&corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-7d9f8-%05d", app, pods), Namespace: "shop", CreationTimestamp: created, Labels: t.Labels,
						OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: app + "-7d9f8", UID: types.UID("rs-" + app), Controller: new(true)}}},
					Spec: spec, Status: corev1.PodStatus{Phase: corev1.PodRunning}})
				pods++
			}
		}
	}
	out := []unstructured.Unstructured{{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "shop"}}}}
	if len(workloads) == 0 {
		workloads = []string{workload(0)}
	}
	for _, app := range workloads {
		n := int64(replicas[app])
		deployment := map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"name": app, "namespace": "shop", "uid": "deploy-" + app, "creationTimestamp": created.UTC().Format(time.RFC3339)},
			"spec":     map[string]any{"replicas": n, "selector": map[string]any{"matchLabels": map[string]any{"app": app}}}}
		rs := map[string]any{"apiVersion": "apps/v1", "kind": "ReplicaSet",
			"metadata": map[string]any{"name": app + "-7d9f8", "namespace": "shop", "uid": "rs-" + app, "labels": map[string]any{"app": app, "pod-template-hash": "7d9f8"},
				"ownerReferences": []any{map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": app, "uid": "deploy-" + app, "controller": true}}},
			"spec": map[string]any{"replicas": n, "selector": map[string]any{"matchLabels": map[string]any{"app": app, "pod-template-hash": "7d9f8"}}}}
		t := template(app)
		tmpl, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&t)
		if err != nil {
			return nil, err
		}
		deployment["spec"].(map[string]any)["template"] = tmpl
		rs["spec"].(map[string]any)["template"] = runtime.DeepCopyJSONValue(tmpl)
		add(&policyv1.PodDisruptionBudget{TypeMeta: metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
			ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: "shop"},
			Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: new(intstr.FromInt32(int32(n / 2))), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}})
		out = append(out, unstructured.Unstructured{Object: deployment}, unstructured.Unstructured{Object: rs})
	}
	for _, it := range items {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(it)
		if err != nil {
			return nil, err
		}
		out = append(out, unstructured.Unstructured{Object: m})
	}
	return out, nil
}

// Autoscaling are a ClusterAutoscaler and a MachineAutoscaler per zone's
// MachineSet of an AWSCluster, from min to max replicas.
func (c AWSCluster) Autoscaling(min, max int) []map[string]any {
	out := []map[string]any{{"apiVersion": "autoscaling.openshift.io/v1", "kind": "ClusterAutoscaler",
		"metadata": map[string]any{"name": "default"}, "spec": map[string]any{"scaleDown": map[string]any{"enabled": true}}}}
	for _, z := range c.Zones {
		out = append(out, map[string]any{"apiVersion": "autoscaling.openshift.io/v1beta1", "kind": "MachineAutoscaler",
			"metadata": map[string]any{"name": "workers-" + z, "namespace": "openshift-machine-api"},
			"spec": map[string]any{"minReplicas": int64(min), "maxReplicas": int64(max),
				"scaleTargetRef": map[string]any{"apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineSet", "name": "prod-worker-" + z}}})
	}
	return out
}
