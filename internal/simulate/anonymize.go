package simulate

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// anonymizer renames what names a cluster's owner and its workloads,
// consistently across a snapshot: a name is replaced by a keyed hash of
// it, the key random per snapshot, so that the same name is always
// replaced the same way in the file and cannot be guessed from it.
type anonymizer struct{ key []byte }

func (a *anonymizer) hash(prefix, s string) string {
	if s == "" {
		return ""
	}
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte(prefix + "\x00" + s))
	return prefix + "-" + hex.EncodeToString(m.Sum(nil))[:10]
}

// systemNamespace keeps its name: default, kube-*, openshift-*.
func systemNamespace(ns string) bool {
	return ns == "default" || strings.HasPrefix(ns, "kube-") || strings.HasPrefix(ns, "openshift")
}

func (a *anonymizer) namespace(ns string) string {
	if ns == "" || systemNamespace(ns) {
		return ns
	}
	return a.hash("ns", ns)
}

// object renames a namespaced object of a workload's namespace; the
// objects of system namespaces keep their names.
func (a *anonymizer) object(ns, name string) string {
	if systemNamespace(ns) {
		return name
	}
	return a.hash("n", ns+"/"+name)
}

func (a *anonymizer) node(name string) string    { return a.hash("node", name) }
func (a *anonymizer) machine(name string) string { return a.hash("machine", name) }

// keptLabelPrefixes are label keys whose meaning the scheduler, the
// autoscaler or the Machine API knows: they are kept, their values too
// unless a name (see labelValue).
var keptLabelPrefixes = []string{"kubernetes.io/", "k8s.io/", "node-role.kubernetes.io/", "topology.kubernetes.io/",
	"node.kubernetes.io/", "beta.kubernetes.io/", "failure-domain.beta.kubernetes.io/", "machine.openshift.io/",
	"machineconfiguration.openshift.io/", "node.openshift.io/", "pod-template-hash", "controller-revision-hash",
	"statefulset.kubernetes.io/", "batch.kubernetes.io/", "controller-uid", "job-name"}

func keptLabel(key string) bool {
	for _, p := range keptLabelPrefixes {
		if key == p || strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

func (a *anonymizer) labelKey(k string) string {
	if keptLabel(k) {
		return k
	}
	return a.hash("k", k)
}

// labelValue renames a label's value: names of nodes, machine sets,
// namespaces and pods as those are renamed, any value of a key not kept.
func (a *anonymizer) labelValue(ns, k, v string) string {
	switch k {
	case "kubernetes.io/hostname":
		return a.node(v)
	case "kubernetes.io/metadata.name":
		return a.namespace(v)
	case "machine.openshift.io/cluster-api-machineset":
		return a.machine(v)
	case "machine.openshift.io/cluster-api-cluster":
		return a.hash("cluster", v)
	case "statefulset.kubernetes.io/pod-name", "job-name", "batch.kubernetes.io/job-name":
		return a.object(ns, v)
	case "controller-uid", "batch.kubernetes.io/controller-uid":
		return a.hash("uid", v)
	}
	if keptLabel(k) || v == "" {
		return v
	}
	return a.hash("v", v)
}

func (a *anonymizer) labelMap(ns string, m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		s, _ := v.(string)
		out[a.labelKey(k)] = a.labelValue(ns, k, s)
	}
	return out
}

// keptAnnotations are the annotations the simulation reads; every other
// is dropped.
var keptAnnotations = map[string]bool{
	"openshift.io/node-selector": true, "scheduler.alpha.kubernetes.io/node-selector": true,
	"machine.openshift.io/machine": true, "machine.openshift.io/vCPU": true, "machine.openshift.io/memoryMb": true,
	"machine.openshift.io/GPU": true, "machine.openshift.io/maxPods": true,
	"machine.openshift.io/cluster-api-autoscaler-node-group-min-size": true,
	"machine.openshift.io/cluster-api-autoscaler-node-group-max-size": true,
	"cluster-autoscaler.kubernetes.io/safe-to-evict":                  true,
	"cluster-autoscaler.kubernetes.io/scale-down-disabled":            true,
	"deployment.kubernetes.io/revision":                               true,
	"machine.openshift.io/delete-machine":                             true,
	"machine.openshift.io/exclude-node-draining":                      true,
}

func (a *anonymizer) annotations(ns string, ann map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range ann {
		if !keptAnnotations[k] && !strings.HasPrefix(k, "machineconfiguration.openshift.io/") {
			continue
		}
		switch k {
		case "openshift.io/node-selector", "scheduler.alpha.kubernetes.io/node-selector":
			if sel, err := labels.ConvertSelectorToLabelsMap(v); err == nil {
				parts := make([]string, 0, len(sel))
				for sk, sv := range sel {
					parts = append(parts, a.labelKey(sk)+"="+a.labelValue(ns, sk, sv))
				}
				v = strings.Join(parts, ",")
			}
		case "machine.openshift.io/machine":
			if mns, name, ok := strings.Cut(v, "/"); ok {
				v = mns + "/" + a.machine(name)
			}
		}
		out[k] = v
	}
	return out
}

// walk renames label keys and values wherever the object holds labels or
// selects on them, and the names an object refers to.
func (a *anonymizer) walk(ns string, v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, val := range t {
			switch k {
			case "labels", "matchLabels", "nodeSelector", "selector":
				// A Service's selector is a plain label map (a
				// workload's, a LabelSelector, is walked below).
				if m, ok := val.(map[string]any); ok && allStrings(m) {
					t[k] = a.labelMap(ns, m)
					continue
				}
			case "matchExpressions", "matchFields":
				if list, ok := val.([]any); ok {
					for _, e := range list {
						if em, ok := e.(map[string]any); ok {
							key, _ := em["key"].(string)
							if vals, ok := em["values"].([]any); ok {
								for i, x := range vals {
									s, _ := x.(string)
									if k == "matchFields" {
										vals[i] = a.node(s) // metadata.name of nodes
									} else {
										vals[i] = a.labelValue(ns, key, s)
									}
								}
							}
							if k == "matchExpressions" {
								em["key"] = a.labelKey(key)
							}
						}
					}
					continue
				}
			case "annotations":
				if m, ok := val.(map[string]any); ok && allStrings(m) {
					ann := map[string]string{}
					for ak, av := range m {
						ann[ak] = av.(string)
					}
					out := map[string]any{}
					for ak, av := range a.annotations(ns, ann) {
						out[ak] = av
					}
					t[k] = out
					continue
				}
			case "taints", "tolerations":
				// A taint's key and value are the toleration's too: both
				// are renamed as a node label's would be.
				if list, ok := val.([]any); ok {
					for _, e := range list {
						if em, ok := e.(map[string]any); ok {
							key, _ := em["key"].(string)
							if v, ok := em["value"].(string); ok {
								em["value"] = a.labelValue("", key, v)
							}
							if key != "" {
								em["key"] = a.labelKey(key)
							}
						}
					}
					continue
				}
			case "topologyKey":
				if s, ok := val.(string); ok {
					t[k] = a.labelKey(s)
					continue
				}
			case "matchLabelKeys", "mismatchLabelKeys":
				if list, ok := val.([]any); ok {
					for i, x := range list {
						s, _ := x.(string)
						list[i] = a.labelKey(s)
					}
					continue
				}
			case "image":
				if s, ok := val.(string); ok {
					t[k] = a.hash("image", s)
					continue
				}
			case "env", "envFrom", "command", "args", "livenessProbe", "readinessProbe", "startupProbe", "lifecycle":
				delete(t, k)
				continue
			case "claimName", "secretName":
				if s, ok := val.(string); ok {
					t[k] = a.object(ns, s)
					continue
				}
			case "configMap", "secret":
				if m, ok := val.(map[string]any); ok {
					if name, ok := m["name"].(string); ok {
						m["name"] = a.object(ns, name)
					}
				}
			case "path":
				if s, ok := val.(string); ok && strings.HasPrefix(s, "/") {
					t[k] = "/" + a.hash("path", s)
					continue
				}
			}
			t[k] = a.walk(ns, val)
		}
		return t
	case []any:
		for i, x := range t {
			t[i] = a.walk(ns, x)
		}
		return t
	}
	return v
}

func allStrings(m map[string]any) bool {
	for _, v := range m {
		if _, ok := v.(string); !ok {
			return false
		}
	}
	return true
}

// Anonymize renames, consistently across the snapshot, what names the
// cluster's owner and its workloads: namespaces other than default,
// kube-* and openshift-*, and every object in them; nodes, Machines,
// MachineSets and PersistentVolumes everywhere they are referred to;
// label keys and values other than the well-known ones, in labels and in
// every selector; images; the cluster's ID. It drops annotations other
// than those the simulation reads, containers' environments, commands,
// arguments and probes, host paths, node addresses and provider IDs,
// pod and node status details, and Machines' provider specs but for
// their instance type and placement. What is scheduled where, on what
// sizes of node, with which taints, tolerations, priorities and budgets,
// stays as it was.
func (s *Snapshot) Anonymize() error {
	a := &anonymizer{key: make([]byte, 32)}
	if _, err := rand.Read(a.key); err != nil {
		return err
	}
	s.markCluster()
	for key, objs := range s.Objects {
		r, _ := resourceByKey(key)
		for i := range objs {
			a.object1(r, &objs[i])
		}
	}
	return nil
}

func (a *anonymizer) object1(r Resource, o *unstructured.Unstructured) {
	ns := o.GetNamespace()
	name := o.GetName()
	switch r.Kind {
	case "Namespace":
		o.SetName(a.namespace(name))
	case "Node":
		o.SetName(a.node(name))
		unstructured.RemoveNestedField(o.Object, "spec", "providerID")
		unstructured.RemoveNestedField(o.Object, "spec", "podCIDR")
		unstructured.RemoveNestedField(o.Object, "spec", "podCIDRs")
		for _, f := range []string{"addresses", "nodeInfo", "images", "volumesAttached", "volumesInUse", "daemonEndpoints"} {
			unstructured.RemoveNestedField(o.Object, "status", f)
		}
	case "ControllerRevision":
		// Its data is a pod template: kept are its revision number,
		// hash label and owner, which say what revision the pods run.
		unstructured.RemoveNestedField(o.Object, "data")
		o.SetName(a.object(ns, name))
	case "Machine", "MachineSet", "ControlPlaneMachineSet":
		o.SetName(a.machine(name))
		a.reduceProviderSpec(o)
		unstructured.RemoveNestedField(o.Object, "spec", "providerID")
		for _, f := range []string{"addresses", "providerStatus"} {
			unstructured.RemoveNestedField(o.Object, "status", f)
		}
		if ref, ok, _ := unstructured.NestedString(o.Object, "status", "nodeRef", "name"); ok {
			_ = unstructured.SetNestedField(o.Object, a.node(ref), "status", "nodeRef", "name")
		}
	case "MachineAutoscaler":
		o.SetName(a.machine(name))
		if ref, ok, _ := unstructured.NestedString(o.Object, "spec", "scaleTargetRef", "name"); ok {
			_ = unstructured.SetNestedField(o.Object, a.machine(ref), "spec", "scaleTargetRef", "name")
		}
	case "PersistentVolume":
		o.SetName(a.hash("pv", name))
		if cns, ok, _ := unstructured.NestedString(o.Object, "spec", "claimRef", "namespace"); ok {
			cname, _, _ := unstructured.NestedString(o.Object, "spec", "claimRef", "name")
			_ = unstructured.SetNestedField(o.Object, a.object(cns, cname), "spec", "claimRef", "name")
			_ = unstructured.SetNestedField(o.Object, a.namespace(cns), "spec", "claimRef", "namespace")
		}
		for _, src := range []string{"hostPath", "local", "nfs", "csi", "awsElasticBlockStore", "gcePersistentDisk", "azureDisk"} {
			unstructured.RemoveNestedField(o.Object, "spec", src)
		}
	case "ClusterVersion":
		if id, ok, _ := unstructured.NestedString(o.Object, "spec", "clusterID"); ok {
			_ = unstructured.SetNestedField(o.Object, a.hash("cluster", id), "spec", "clusterID")
		}
	case "Pod":
		o.SetName(a.object(ns, name))
		if n, ok, _ := unstructured.NestedString(o.Object, "spec", "nodeName"); ok {
			_ = unstructured.SetNestedField(o.Object, a.node(n), "spec", "nodeName")
		}
		if sa, ok, _ := unstructured.NestedString(o.Object, "spec", "serviceAccountName"); ok {
			_ = unstructured.SetNestedField(o.Object, a.object(ns, sa), "spec", "serviceAccountName")
			unstructured.RemoveNestedField(o.Object, "spec", "serviceAccount")
		}
		for _, f := range []string{"podIP", "podIPs", "hostIP", "hostIPs", "containerStatuses", "initContainerStatuses", "message"} {
			unstructured.RemoveNestedField(o.Object, "status", f)
		}
	case "Service":
		o.SetName(a.object(ns, name))
		for _, f := range []string{"clusterIP", "clusterIPs", "externalIPs", "loadBalancerIP", "loadBalancerSourceRanges"} {
			unstructured.RemoveNestedField(o.Object, "spec", f)
		}
		if host, ok, _ := unstructured.NestedString(o.Object, "spec", "externalName"); ok {
			_ = unstructured.SetNestedField(o.Object, a.hash("host", host)+".invalid", "spec", "externalName")
		}
		unstructured.RemoveNestedField(o.Object, "status")
	case "HorizontalPodAutoscaler":
		o.SetName(a.object(ns, name))
		if ref, ok, _ := unstructured.NestedString(o.Object, "spec", "scaleTargetRef", "name"); ok {
			_ = unstructured.SetNestedField(o.Object, a.object(ns, ref), "spec", "scaleTargetRef", "name")
		}
		metrics, _, _ := unstructured.NestedSlice(o.Object, "spec", "metrics")
		for _, m := range metrics {
			if mm, ok := m.(map[string]any); ok {
				if ref, ok, _ := unstructured.NestedString(mm, "object", "describedObject", "name"); ok {
					_ = unstructured.SetNestedField(mm, a.object(ns, ref), "object", "describedObject", "name")
				}
			}
		}
		if metrics != nil {
			_ = unstructured.SetNestedSlice(o.Object, metrics, "spec", "metrics")
		}
	case "PersistentVolumeClaim":
		o.SetName(a.object(ns, name))
		if v, ok, _ := unstructured.NestedString(o.Object, "spec", "volumeName"); ok {
			_ = unstructured.SetNestedField(o.Object, a.hash("pv", v), "spec", "volumeName")
		}
	default:
		if r.Namespaced {
			o.SetName(a.object(ns, name))
		}
	}
	o.SetNamespace(a.namespace(ns))
	o.SetGenerateName("")
	o.SetUID(types.UID(a.hash("uid", string(o.GetUID()))))
	o.SetResourceVersion("")
	o.SetAnnotations(a.annotations(ns, o.GetAnnotations()))
	refs := o.GetOwnerReferences()
	for i := range refs {
		switch refs[i].Kind {
		case "MachineSet", "Machine", "ControlPlaneMachineSet":
			refs[i].Name = a.machine(refs[i].Name)
		case "Node":
			refs[i].Name = a.node(refs[i].Name)
		default:
			refs[i].Name = a.object(ns, refs[i].Name)
		}
		refs[i].UID = types.UID(a.hash("uid", string(refs[i].UID)))
	}
	o.SetOwnerReferences(refs)
	md, _ := o.Object["metadata"].(map[string]any)
	if l, ok := md["labels"].(map[string]any); ok {
		md["labels"] = a.labelMap(ns, l)
	}
	for k, v := range o.Object {
		if k != "metadata" && k != "apiVersion" && k != "kind" {
			o.Object[k] = a.walk(ns, v)
		}
	}
}

// reduceProviderSpec keeps of a Machine's or MachineSet's provider spec
// only what says its size and place; a capstan provider spec is kept
// whole (it holds nothing else).
func (a *anonymizer) reduceProviderSpec(o *unstructured.Unstructured) {
	for _, path := range [][]string{{"spec", "providerSpec", "value"}, {"spec", "template", "spec", "providerSpec", "value"},
		{"spec", "template", "machines_v1beta1_machine_openshift_io", "spec", "providerSpec", "value"}} {
		v, ok, _ := unstructured.NestedMap(o.Object, path...)
		if !ok || v["kind"] == "CapstanMachineProviderSpec" {
			continue
		}
		kept := map[string]any{}
		for _, f := range []string{"apiVersion", "kind", "instanceType", "machineType", "vmSize", "zone", "region", "location"} {
			if x, ok := v[f]; ok {
				kept[f] = x
			}
		}
		if p, ok := v["placement"].(map[string]any); ok {
			kept["placement"] = map[string]any{"availabilityZone": p["availabilityZone"], "region": p["region"]}
		}
		_ = unstructured.SetNestedField(o.Object, kept, path...)
	}
}
