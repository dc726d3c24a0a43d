// Package compat lists the spec fields of the kinds capstan's controllers
// own or act on, from the schemas the API server serves, and the fields
// capstan does not honour, with why (docs/compatibility.md): its test
// fails on a field no code reads that the document does not name, and
// the Reporter says once, in an event, when a user sets one.
package compat

import (
	"fmt"
	"io/fs"
	"reflect"
	"slices"
	"strings"
	"unicode"

	configv1 "github.com/openshift/api/config/v1"
	cpmsv1 "github.com/openshift/api/machine/v1"
	machinev1 "github.com/openshift/api/machine/v1beta1"
	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	opv1 "github.com/openshift/api/operator/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/capstan-dev/capstan/deploy"
	autoscalingv1 "github.com/capstan-dev/capstan/internal/autoscaler/apis/v1"
	autoscalingv1beta1 "github.com/capstan-dev/capstan/internal/autoscaler/apis/v1beta1"
)

// Kind is a kind whose spec capstan's controllers read: its CRD (the
// served schema; "" for Kubernetes' own kinds, read from their Go types),
// its Go type, and how deep its fields are listed (0: every level).
type Kind struct {
	Name  string
	CRD   string
	Type  reflect.Type
	Depth int
}

// Kinds are the kinds capstan's controllers own or act on.
var Kinds = []Kind{
	{Name: "ClusterVersion", CRD: "clusterversions.config.openshift.io", Type: reflect.TypeFor[configv1.ClusterVersion]()},
	{Name: "ClusterOperator", CRD: "clusteroperators.config.openshift.io", Type: reflect.TypeFor[configv1.ClusterOperator]()},
	{Name: "Scheduler", CRD: "schedulers.config.openshift.io", Type: reflect.TypeFor[configv1.Scheduler]()},
	{Name: "Machine", CRD: "machines.machine.openshift.io", Type: reflect.TypeFor[machinev1.Machine]()},
	{Name: "MachineSet", CRD: "machinesets.machine.openshift.io", Type: reflect.TypeFor[machinev1.MachineSet]()},
	{Name: "MachineHealthCheck", CRD: "machinehealthchecks.machine.openshift.io", Type: reflect.TypeFor[machinev1.MachineHealthCheck]()},
	{Name: "ControlPlaneMachineSet", CRD: "controlplanemachinesets.machine.openshift.io", Type: reflect.TypeFor[cpmsv1.ControlPlaneMachineSet]()},
	{Name: "MachineConfig", CRD: "machineconfigs.machineconfiguration.openshift.io", Type: reflect.TypeFor[mcfgv1.MachineConfig]()},
	{Name: "MachineConfigPool", CRD: "machineconfigpools.machineconfiguration.openshift.io", Type: reflect.TypeFor[mcfgv1.MachineConfigPool]()},
	{Name: "MachineConfiguration", CRD: "machineconfigurations.operator.openshift.io", Type: reflect.TypeFor[opv1.MachineConfiguration]()},
	{Name: "ClusterAutoscaler", CRD: "clusterautoscalers.autoscaling.openshift.io", Type: reflect.TypeFor[autoscalingv1.ClusterAutoscaler]()},
	{Name: "MachineAutoscaler", CRD: "machineautoscalers.autoscaling.openshift.io", Type: reflect.TypeFor[autoscalingv1beta1.MachineAutoscaler]()},
	// Kubernetes' own: the fields of their specs the scheduler, the
	// taint manager, the drains and the autoscaler decide on.
	{Name: "Node", Type: reflect.TypeFor[corev1.Node](), Depth: 1},
	{Name: "Pod", Type: reflect.TypeFor[corev1.Pod](), Depth: 1},
	{Name: "PodDisruptionBudget", Type: reflect.TypeFor[policyv1.PodDisruptionBudget](), Depth: 1},
}

// Field is one spec field of a kind: its path as users write it
// (spec.template.spec.providerSpec, [] for list items) and its Go field
// name, what code that reads it names.
type Field struct {
	Kind, Path, GoName string
}

// SpecFields lists a kind's spec fields.
func SpecFields(k Kind) ([]Field, error) {
	specType, ok := k.Type.FieldByName("Spec")
	if !ok {
		return nil, fmt.Errorf("%s has no Spec", k.Name)
	}
	if k.CRD == "" {
		var out []Field
		walkType(k.Name, "spec", specType.Type, k.Depth, 1, &out)
		return out, nil
	}
	schema, err := crdSpecSchema(k.CRD)
	if err != nil {
		return nil, err
	}
	var out []Field
	walkSchema(k.Name, "spec", schema, specType.Type, k.Depth, 1, &out)
	return out, nil
}

// crdSpecSchema is the spec schema of a CRD capstan serves (its storage
// version).
func crdSpecSchema(name string) (*apiextensionsv1.JSONSchemaProps, error) {
	files := deploy.Files()
	var found *apiextensionsv1.CustomResourceDefinition
	err := fs.WalkDir(files, "crds", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, "kustomization.yaml") {
			return err
		}
		raw, err := fs.ReadFile(files, path)
		if err != nil {
			return err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(raw, crd); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if crd.Name == name {
			found = crd
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if found == nil {
		return nil, fmt.Errorf("no CRD %s is served", name)
	}
	for _, v := range found.Spec.Versions {
		if v.Storage && v.Schema != nil && v.Schema.OpenAPIV3Schema != nil {
			spec, ok := v.Schema.OpenAPIV3Schema.Properties["spec"]
			if !ok {
				return &apiextensionsv1.JSONSchemaProps{}, nil
			}
			return &spec, nil
		}
	}
	return nil, fmt.Errorf("CRD %s has no storage version with a schema", name)
}

func walkSchema(kind, path string, s *apiextensionsv1.JSONSchemaProps, t reflect.Type, maxDepth, depth int, out *[]Field) {
	if s.Items != nil && s.Items.Schema != nil {
		s = s.Items.Schema
		path += "[]"
	}
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		p := s.Properties[n]
		ft, goName := goField(t, n)
		*out = append(*out, Field{Kind: kind, Path: path + "." + n, GoName: goName})
		if maxDepth > 0 && depth >= maxDepth {
			continue
		}
		if ft != nil && opaque(ft) {
			continue
		}
		walkSchema(kind, path+"."+n, &p, ft, maxDepth, depth+1, out)
	}
}

func walkType(kind, path string, t reflect.Type, maxDepth, depth int, out *[]Field) {
	t = elem(t)
	if t.Kind() != reflect.Struct || opaque(t) {
		return
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" { // inlined
			walkType(kind, path, f.Type, maxDepth, depth, out)
			continue
		}
		p := path + "." + name
		if elem(f.Type) != f.Type && f.Type.Kind() == reflect.Slice {
			p += ""
		}
		*out = append(*out, Field{Kind: kind, Path: p, GoName: f.Name})
		if maxDepth > 0 && depth >= maxDepth {
			continue
		}
		sub := p
		if f.Type.Kind() == reflect.Slice {
			sub += "[]"
		}
		walkType(kind, sub, f.Type, maxDepth, depth+1, out)
	}
}

// goField finds the Go field of t a JSON property names (nil type and a
// CamelCase guess when t has none: a field of a newer schema).
func goField(t reflect.Type, jsonName string) (reflect.Type, string) {
	if t != nil {
		t = elem(t)
		if t.Kind() == reflect.Struct {
			if f, ok := findJSON(t, jsonName); ok {
				return f.Type, f.Name
			}
		}
	}
	r := []rune(jsonName)
	r[0] = unicode.ToUpper(r[0])
	return nil, string(r)
}

func findJSON(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		n, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if n == name {
			return f, true
		}
		if n == "" && f.Anonymous {
			if g, ok := findJSON(elem(f.Type), name); ok {
				return g, true
			}
		}
	}
	return reflect.StructField{}, false
}

func elem(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	return t
}

// opaque types hold what capstan reads whole or hands on (raw
// extensions, quantities, times, label selectors): their insides are
// not listed.
func opaque(t reflect.Type) bool {
	t = elem(t)
	switch t.PkgPath() + "." + t.Name() {
	case "k8s.io/apimachinery/pkg/runtime.RawExtension", "k8s.io/apimachinery/pkg/api/resource.Quantity",
		"k8s.io/apimachinery/pkg/apis/meta/v1.Time", "k8s.io/apimachinery/pkg/apis/meta/v1.Duration",
		"k8s.io/apimachinery/pkg/apis/meta/v1.LabelSelector", "k8s.io/apimachinery/pkg/apis/meta/v1.ObjectMeta",
		"k8s.io/apimachinery/pkg/util/intstr.IntOrString":
		return true
	}
	return false
}
