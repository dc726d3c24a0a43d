// Package simulate takes snapshots of a cluster, to replay what a change
// would do to it on a private embedded capstan without touching the
// cluster.
package simulate

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

// The snapshot file's identity. Format grows when a change to the file
// would make an older capstan misread it; a capstan refuses a file of a
// format newer than its own.
const (
	SnapshotAPIVersion = "capstan.dev/v1alpha1"
	SnapshotKind       = "ClusterSnapshot"
	// SnapshotFormat 2 added the cluster field, the Scheduler
	// (config.openshift.io/v1 schedulers), Services, ResourceQuotas,
	// LimitRanges, CronJobs, HorizontalPodAutoscalers and
	// MachineHealthChecks; a file of format 1 still loads.
	SnapshotFormat = 2
)

// Resource is a kind of object a snapshot holds.
type Resource struct {
	GVR  schema.GroupVersionResource
	Kind string
	// Namespaced resources are listed in every namespace.
	Namespaced bool
}

// Key names the resource in the file: GROUP/VERSION/RESOURCE, or
// VERSION/RESOURCE for the core group.
func (r Resource) Key() string {
	if r.GVR.Group == "" {
		return r.GVR.Version + "/" + r.GVR.Resource
	}
	return r.GVR.Group + "/" + r.GVR.Version + "/" + r.GVR.Resource
}

func res(group, version, resource, kind string, namespaced bool) Resource {
	return Resource{GVR: schema.GroupVersionResource{Group: group, Version: version, Resource: resource}, Kind: kind, Namespaced: namespaced}
}

// Resources are what a snapshot reads, with list only: what the scheduler,
// the autoscaler, drains, the MCO and the CVO decide on. No Secret and no
// ConfigMap is among them. The OpenShift ones are simply absent from the
// snapshot of a cluster that does not serve them.
var Resources = []Resource{
	res("", "v1", "namespaces", "Namespace", false),
	res("", "v1", "nodes", "Node", false),
	res("", "v1", "pods", "Pod", true),
	res("", "v1", "persistentvolumes", "PersistentVolume", false),
	res("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", true),
	res("", "v1", "services", "Service", true),
	res("", "v1", "resourcequotas", "ResourceQuota", true),
	res("", "v1", "limitranges", "LimitRange", true),
	res("storage.k8s.io", "v1", "storageclasses", "StorageClass", false),
	res("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", false),
	res("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", true),
	res("apps", "v1", "daemonsets", "DaemonSet", true),
	res("apps", "v1", "deployments", "Deployment", true),
	res("apps", "v1", "replicasets", "ReplicaSet", true),
	res("apps", "v1", "statefulsets", "StatefulSet", true),
	res("apps", "v1", "controllerrevisions", "ControllerRevision", true),
	res("batch", "v1", "jobs", "Job", true),
	res("batch", "v1", "cronjobs", "CronJob", true),
	res("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", true),
	res("machine.openshift.io", "v1beta1", "machines", "Machine", true),
	res("machine.openshift.io", "v1beta1", "machinesets", "MachineSet", true),
	res("machine.openshift.io", "v1", "controlplanemachinesets", "ControlPlaneMachineSet", true),
	res("machine.openshift.io", "v1beta1", "machinehealthchecks", "MachineHealthCheck", true),
	res("autoscaling.openshift.io", "v1beta1", "machineautoscalers", "MachineAutoscaler", true),
	res("autoscaling.openshift.io", "v1", "clusterautoscalers", "ClusterAutoscaler", false),
	res("machineconfiguration.openshift.io", "v1", "machineconfigpools", "MachineConfigPool", false),
	res("machineconfiguration.openshift.io", "v1", "machineconfigs", "MachineConfig", false),
	res("config.openshift.io", "v1", "clusterversions", "ClusterVersion", false),
	res("config.openshift.io", "v1", "clusteroperators", "ClusterOperator", false),
	res("config.openshift.io", "v1", "schedulers", "Scheduler", false),
}

// resourceByKey finds one of Resources by its key.
func resourceByKey(key string) (Resource, bool) {
	i := slices.IndexFunc(Resources, func(r Resource) bool { return r.Key() == key })
	if i < 0 {
		return Resource{}, false
	}
	return Resources[i], true
}

// Snapshot is a cluster's objects at one time.
type Snapshot struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Format     int    `json:"format"`
	// TakenAt is when the first list was made.
	TakenAt metav1.Time `json:"takenAt"`
	// Cluster says whose cluster it is: ClusterCapstan or ClusterOther,
	// written down when anonymizing takes away the node annotations
	// that show it. Empty (format 1, and snapshots not anonymized), the
	// nodes tell (OfCapstan).
	Cluster string `json:"cluster,omitempty"`
	// Objects are the objects by resource key (Resource.Key); a resource
	// the cluster does not serve has no key.
	Objects map[string][]unstructured.Unstructured `json:"objects"`
}

// Get returns the snapshot's objects of a resource, and whether the
// cluster served that resource at all.
func (s *Snapshot) Get(r Resource) ([]unstructured.Unstructured, bool) {
	objs, ok := s.Objects[r.Key()]
	return objs, ok
}

// listPageSize is the size of each page a snapshot lists, as kubectl's
// chunks.
const listPageSize = 500

// Take lists every resource of Resources from the cluster, page by page.
// A resource the cluster does not serve is left out; any other error
// (a right missing, the cluster unreachable) ends the snapshot, naming
// the resource. Objects keep everything but their managedFields.
func Take(ctx context.Context, client dynamic.Interface, now time.Time) (*Snapshot, error) {
	s := &Snapshot{APIVersion: SnapshotAPIVersion, Kind: SnapshotKind, Format: SnapshotFormat,
		TakenAt: metav1.NewTime(now.UTC().Truncate(time.Second)), Objects: map[string][]unstructured.Unstructured{}}
	z := newSanitizer()
	for _, r := range Resources {
		objs, served, err := listAll(ctx, client.Resource(r.GVR), r, z)
		if err != nil {
			return nil, err
		}
		if served {
			s.Objects[r.Key()] = objs
		}
	}
	return s, nil
}

func listAll(ctx context.Context, ri dynamic.ResourceInterface, r Resource, z *sanitizer) ([]unstructured.Unstructured, bool, error) {
	objs := []unstructured.Unstructured{}
	opts := metav1.ListOptions{Limit: listPageSize}
	for {
		list, err := ri.List(ctx, opts)
		if apierrors.IsNotFound(err) && opts.Continue == "" {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("listing %s (%s): %w", r.GVR.Resource, r.Key(), err)
		}
		for i := range list.Items {
			o := list.Items[i]
			z.sanitize(r, &o)
			// A list's items carry no kind of their own on some servers.
			o.SetAPIVersion(r.GVR.GroupVersion().String())
			o.SetKind(r.Kind)
			objs = append(objs, o)
		}
		if opts.Continue = list.GetContinue(); opts.Continue == "" {
			return objs, true, nil
		}
	}
}

// Write writes the snapshot as JSON.
func (s *Snapshot) Write(w io.Writer) error {
	enc := json.NewEncoder(w)
	return enc.Encode(s)
}

// Load reads and checks a snapshot file's content. name is what errors
// call it (the file's path).
func Load(name string, data []byte) (*Snapshot, error) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Format     int    `json:"format"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("%s is not a capstan snapshot: %v", name, err)
	}
	if head.Kind != SnapshotKind || head.APIVersion != SnapshotAPIVersion {
		return nil, fmt.Errorf("%s is not a capstan snapshot: its apiVersion and kind are %q and %q, want %q and %q (made by capstan simulate snapshot)",
			name, head.APIVersion, head.Kind, SnapshotAPIVersion, SnapshotKind)
	}
	if head.Format > SnapshotFormat {
		return nil, fmt.Errorf("%s is a snapshot of format %d, newer than this capstan reads (%d): use the capstan that took it, or a newer one", name, head.Format, SnapshotFormat)
	}
	if head.Format < 1 {
		return nil, fmt.Errorf("%s: format %d is not a snapshot format (the first is 1)", name, head.Format)
	}
	var s Snapshot
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	if s.Objects == nil {
		return nil, fmt.Errorf("%s: no objects (a snapshot has at least its namespaces and nodes)", name)
	}
	var errs []error
	for key, objs := range s.Objects {
		r, ok := resourceByKey(key)
		if !ok {
			errs = append(errs, fmt.Errorf("objects[%q]: not a resource snapshots hold (%s)", key, knownKeys()))
			continue
		}
		for i := range objs {
			if err := checkObject(r, &objs[i]); err != nil {
				errs = append(errs, fmt.Errorf("objects[%q][%d]: %w", key, i, err))
			}
		}
	}
	for _, r := range Resources[:2] {
		if _, ok := s.Objects[r.Key()]; !ok {
			errs = append(errs, fmt.Errorf("objects: no %q: every cluster serves %s", r.Key(), r.GVR.Resource))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &s, nil
}

func checkObject(r Resource, o *unstructured.Unstructured) error {
	if gv := r.GVR.GroupVersion().String(); o.GetAPIVersion() != gv || o.GetKind() != r.Kind {
		return fmt.Errorf("apiVersion %q and kind %q, want %q and %q", o.GetAPIVersion(), o.GetKind(), gv, r.Kind)
	}
	if o.GetName() == "" {
		return errors.New("no metadata.name")
	}
	if r.Namespaced != (o.GetNamespace() != "") {
		if r.Namespaced {
			return fmt.Errorf("%s %s has no namespace", r.Kind, o.GetName())
		}
		return fmt.Errorf("%s %s is cluster-scoped but has namespace %q", r.Kind, o.GetName(), o.GetNamespace())
	}
	return nil
}

func knownKeys() string {
	keys := make([]string, len(Resources))
	for i, r := range Resources {
		keys[i] = r.Key()
	}
	return "known: " + strings.Join(keys, ", ")
}

// FromManifests builds a snapshot from files of objects, as
// `kubectl get nodes,pods,... -A -o yaml` writes them: YAML or JSON
// documents, each an object or a List of them (see SnapshotOf).
func FromManifests(files map[string][]byte, takenAt time.Time) (*Snapshot, map[string]int, error) {
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	var objs []unstructured.Unstructured
	for _, name := range names {
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(files[name]), 4096)
		for doc := 1; ; doc++ {
			var m map[string]any
			if err := dec.Decode(&m); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return nil, nil, fmt.Errorf("%s: document %d: %w", name, doc, err)
			}
			if m == nil {
				continue
			}
			o := unstructured.Unstructured{Object: m}
			if !o.IsList() {
				objs = append(objs, o)
				continue
			}
			list, err := o.ToList()
			if err != nil {
				return nil, nil, fmt.Errorf("%s: document %d: %w", name, doc, err)
			}
			objs = append(objs, list.Items...)
		}
	}
	return SnapshotOf(objs, takenAt, strings.Join(names, ", "))
}

// SnapshotOf builds a snapshot of objects. Objects of a kind no snapshot
// holds are left out and counted, by apiVersion/kind; Secrets and
// ConfigMaps are never kept. A core resource of Resources without an
// object is taken as served but empty, any other as not served. The
// result is checked as Load checks a file; errors name what as the
// objects' source.
func SnapshotOf(objs []unstructured.Unstructured, takenAt time.Time, what string) (*Snapshot, map[string]int, error) {
	s := &Snapshot{APIVersion: SnapshotAPIVersion, Kind: SnapshotKind, Format: SnapshotFormat,
		TakenAt: metav1.NewTime(takenAt.UTC().Truncate(time.Second)), Objects: map[string][]unstructured.Unstructured{}}
	skipped := map[string]int{}
	z := newSanitizer()
	byKind := map[string]Resource{}
	for _, r := range Resources {
		byKind[r.GVR.GroupVersion().String()+"/"+r.Kind] = r
	}
	for _, it := range objs {
		key := it.GetAPIVersion() + "/" + it.GetKind()
		r, ok := byKind[key]
		if !ok {
			skipped[key]++
			continue
		}
		z.sanitize(r, &it)
		s.Objects[r.Key()] = append(s.Objects[r.Key()], it)
	}
	for _, r := range Resources {
		if _, ok := s.Objects[r.Key()]; !ok && r.GVR.Group == "" {
			s.Objects[r.Key()] = []unstructured.Unstructured{}
		}
	}
	var b bytes.Buffer
	if err := s.Write(&b); err != nil {
		return nil, nil, err
	}
	loaded, err := Load("the snapshot of "+what, b.Bytes())
	if err != nil {
		return nil, nil, err
	}
	if len(loaded.Objects["v1/nodes"]) == 0 {
		return nil, nil, fmt.Errorf("%s: no Node: a snapshot simulates the nodes it holds", what)
	}
	return loaded, skipped, nil
}

// A sanitizer drops what a snapshot must not carry, with a key random
// per snapshot: what it replaces by a digest is keyed by it, so that a
// guess of a short secret cannot be checked against the file.
type sanitizer struct{ key []byte }

func newSanitizer() *sanitizer {
	z := &sanitizer{key: make([]byte, 32)}
	if _, err := rand.Read(z.key); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return z
}

// digest stands for content a snapshot does not keep: a data URL of the
// content's keyed SHA-256, so that two MachineConfigs with the same file
// still compare equal and a changed file still differs.
func (z *sanitizer) digest(content string) string {
	m := hmac.New(sha256.New, z.key)
	m.Write([]byte(content))
	return "data:,capstan-snapshot-hmac-sha256-" + hex.EncodeToString(m.Sum(nil))
}

// lastApplied is the annotation kubectl apply keeps the whole applied
// object in, environment values and all.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// sanitize drops what a snapshot must not carry: managed fields and
// last-applied configurations; containers' environment values,
// commands and arguments (each replaced by its digest); the content of
// MachineConfigs' files, systemd units and SSH keys (a rendered
// MachineConfig holds the cluster's pull secret and certificates), their
// password hashes, LUKS key files, Ignition configs merged or replaced,
// HTTP headers and proxies; and PersistentVolumes' driver options and
// attributes.
func (z *sanitizer) sanitize(r Resource, o *unstructured.Unstructured) {
	o.SetManagedFields(nil)
	if ann := o.GetAnnotations(); ann[lastApplied] != "" {
		delete(ann, lastApplied)
		o.SetAnnotations(ann)
	}
	z.containers(o.Object)
	switch r.Kind {
	case "MachineConfig":
		z.machineConfig(o)
	case "PersistentVolume":
		unstructured.RemoveNestedField(o.Object, "spec", "flexVolume", "options")
		unstructured.RemoveNestedField(o.Object, "spec", "csi", "volumeAttributes")
	}
}

// containers digests every container's environment values, command and
// arguments, wherever the object holds containers (a pod, a template).
func (z *sanitizer) containers(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, val := range t {
			list, ok := val.([]any)
			if !ok || (k != "containers" && k != "initContainers" && k != "ephemeralContainers") {
				z.containers(val)
				continue
			}
			for _, c := range list {
				cm, ok := c.(map[string]any)
				if !ok {
					continue
				}
				if env, ok := cm["env"].([]any); ok {
					for _, e := range env {
						if em, ok := e.(map[string]any); ok {
							if s, ok := em["value"].(string); ok && s != "" {
								em["value"] = z.digest(s)
							}
						}
					}
				}
				for _, f := range []string{"command", "args"} {
					if args, ok := cm[f].([]any); ok {
						for i, a := range args {
							if s, ok := a.(string); ok {
								args[i] = z.digest(s)
							}
						}
					}
				}
			}
		}
	case []any:
		for _, x := range t {
			z.containers(x)
		}
	}
}

// machineConfig replaces every secret-bearing field of a MachineConfig's
// Ignition config by its digest, or drops it.
func (z *sanitizer) machineConfig(o *unstructured.Unstructured) {
	cfg, ok, _ := unstructured.NestedMap(o.Object, "spec", "config")
	if !ok {
		return
	}
	// A resource's source is digested, and its HTTP headers (a bearer
	// token, a basic auth) dropped.
	resource := func(v any) {
		m, ok := v.(map[string]any)
		if !ok {
			return
		}
		if s, ok := m["source"].(string); ok && s != "" {
			m["source"] = z.digest(s)
		}
		delete(m, "httpHeaders")
	}
	each := func(v any, f func(map[string]any)) {
		list, _ := v.([]any)
		for _, it := range list {
			if m, ok := it.(map[string]any); ok {
				f(m)
			}
		}
	}
	digestField := func(m map[string]any, k string) {
		if s, ok := m[k].(string); ok && s != "" {
			m[k] = z.digest(s)
		}
	}
	if storage, ok := cfg["storage"].(map[string]any); ok {
		each(storage["files"], func(f map[string]any) {
			resource(f["contents"])
			each(f["append"], func(a map[string]any) { resource(a) })
		})
		each(storage["luks"], func(l map[string]any) {
			resource(l["keyFile"])
			if c, ok := l["clevis"].(map[string]any); ok {
				each(c["tang"], func(t map[string]any) { digestField(t, "thumbprint") })
			}
		})
	}
	if systemd, ok := cfg["systemd"].(map[string]any); ok {
		each(systemd["units"], func(u map[string]any) {
			digestField(u, "contents")
			each(u["dropins"], func(d map[string]any) { digestField(d, "contents") })
		})
	}
	if passwd, ok := cfg["passwd"].(map[string]any); ok {
		each(passwd["users"], func(u map[string]any) {
			if keys, ok := u["sshAuthorizedKeys"].([]any); ok {
				for i, k := range keys {
					if s, ok := k.(string); ok {
						keys[i] = z.digest(s)
					}
				}
			}
			digestField(u, "passwordHash")
		})
	}
	if ign, ok := cfg["ignition"].(map[string]any); ok {
		if c, ok := ign["config"].(map[string]any); ok {
			each(c["merge"], func(m map[string]any) { resource(m) })
			resource(c["replace"])
		}
		if sec, ok := ign["security"].(map[string]any); ok {
			if tls, ok := sec["tls"].(map[string]any); ok {
				each(tls["certificateAuthorities"], func(m map[string]any) { resource(m) })
			}
		}
		// A proxy's URL may carry its credentials.
		delete(ign, "proxy")
	}
	_ = unstructured.SetNestedMap(o.Object, cfg, "spec", "config")
}
