package simulate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/blang/semver/v4"
	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/capstan-dev/capstan/internal/mco"
	"github.com/capstan-dev/capstan/internal/scheduler/policy"
)

// ChangeKind is what a change does to the simulated cluster.
type ChangeKind string

// The changes a simulation applies, in the order given.
const (
	// ChangePolicy starts the simulation's scheduler (and the autoscaler's
	// simulations) with a scheduler Policy file.
	ChangePolicy ChangeKind = "policy"
	// ChangeCordon marks nodes unschedulable.
	ChangeCordon ChangeKind = "cordon"
	// ChangeDrain cordons nodes and evicts their pods, as `oc adm drain`
	// does, respecting PodDisruptionBudgets.
	ChangeDrain ChangeKind = "drain"
	// ChangeDelete deletes nodes: their Machines when they have one (the
	// Machine API drains and removes them), else the Node and its
	// instance.
	ChangeDelete ChangeKind = "delete"
	// ChangeZoneOutage loses a zone: its nodes' kubelets stop answering and
	// the cloud launches nothing there.
	ChangeZoneOutage ChangeKind = "zone-outage"
	// ChangeScale sets a MachineSet's replicas.
	ChangeScale ChangeKind = "scale"
	// ChangeApply creates or replaces the objects of a manifest file:
	// Deployments, StatefulSets, DaemonSets, Jobs, ClusterAutoscalers,
	// MachineAutoscalers, PodDisruptionBudgets.
	ChangeApply ChangeKind = "apply"
	// ChangeMachineConfig creates or replaces MachineConfigs (and
	// MachineConfigPools): the pools they select render a new
	// configuration and roll it to their nodes.
	ChangeMachineConfig ChangeKind = "machineconfig"
	// ChangeUpdate updates the cluster to a release of the snapshot's
	// update graph: the CVO applies it run level by run level and the
	// MCO rolls its machine OS to every pool.
	ChangeUpdate ChangeKind = "update"
	// ChangeWait lets simulated time pass before the next change.
	ChangeWait ChangeKind = "wait"
)

var changeKinds = []ChangeKind{ChangePolicy, ChangeCordon, ChangeDrain, ChangeDelete, ChangeZoneOutage, ChangeScale, ChangeApply,
	ChangeMachineConfig, ChangeUpdate, ChangeWait}

// applyKinds are the kinds an apply change may hold, by apiVersion/kind.
var applyKinds = map[string]bool{
	"apps/v1/Deployment":                                 true,
	"apps/v1/StatefulSet":                                true,
	"apps/v1/DaemonSet":                                  true,
	"batch/v1/Job":                                       true,
	"policy/v1/PodDisruptionBudget":                      true,
	"autoscaling.openshift.io/v1/ClusterAutoscaler":      true,
	"autoscaling.openshift.io/v1beta1/MachineAutoscaler": true,
}

// machineConfigKinds are the kinds a machineconfig change may hold.
var machineConfigKinds = map[string]bool{
	"machineconfiguration.openshift.io/v1/MachineConfig":     true,
	"machineconfiguration.openshift.io/v1/MachineConfigPool": true,
}

// Change is one change of a simulation, as given on the command line:
// KIND=ARGUMENT.
type Change struct {
	Kind ChangeKind
	// Arg is the argument as given (a file, node names, a zone, a
	// MachineSet and its replicas).
	Arg string
	// Nodes are the nodes of a cordon, drain or delete, unless Zone is
	// set: then every node of that zone.
	Nodes []string
	Zone  string
	// MachineSet and Replicas are a scale's.
	MachineSet string
	Replicas   int32
	// Objects are an apply's or a machineconfig's manifests.
	Objects []*unstructured.Unstructured
	// Policy is a policy change's.
	Policy *policy.Policy
	// Wait is a wait's simulated time.
	Wait time.Duration
	// Version is an update's release version.
	Version string
}

func (c Change) String() string { return string(c.Kind) + "=" + c.Arg }

// ParseChange reads a change given as KIND=ARGUMENT:
//
//	policy=FILE                    a scheduler Policy file
//	cordon=NODE[,NODE...]          or cordon=zone:ZONE
//	drain=NODE[,NODE...]           or drain=zone:ZONE
//	delete=NODE[,NODE...]          or delete=zone:ZONE
//	zone-outage=ZONE
//	scale=[NAMESPACE/]MACHINESET=REPLICAS
//	apply=FILE                     manifests (YAML or JSON, several per file)
//	machineconfig=FILE             MachineConfigs (and MachineConfigPools)
//	update=VERSION                 a release of the snapshot's update graph
//	wait=DURATION                  simulated time before the next change
//
// Files are read here, so that a run refuses a bad file before it
// starts anything.
func ParseChange(s string) (Change, error) {
	kind, arg, ok := strings.Cut(s, "=")
	if !ok || arg == "" {
		return Change{}, fmt.Errorf("change %q: want KIND=ARGUMENT, KIND one of %s", s, kindList())
	}
	c := Change{Kind: ChangeKind(kind), Arg: arg}
	switch c.Kind {
	case ChangePolicy:
		p, err := policy.Load(arg)
		if err != nil {
			return Change{}, fmt.Errorf("change %s: %w", s, err)
		}
		c.Policy = p
	case ChangeCordon, ChangeDrain, ChangeDelete:
		if zone, ok := strings.CutPrefix(arg, "zone:"); ok {
			if zone == "" {
				return Change{}, fmt.Errorf("change %s: zone: names no zone", s)
			}
			c.Zone = zone
			break
		}
		for _, n := range strings.Split(arg, ",") {
			if n == "" {
				return Change{}, fmt.Errorf("change %s: an empty node name in %q", s, arg)
			}
			c.Nodes = append(c.Nodes, n)
		}
	case ChangeZoneOutage:
		c.Zone = arg
	case ChangeScale:
		set, n, ok := strings.Cut(arg, "=")
		if !ok || set == "" {
			return Change{}, fmt.Errorf("change %s: want scale=[NAMESPACE/]MACHINESET=REPLICAS", s)
		}
		r, err := strconv.ParseInt(n, 10, 32)
		if err != nil || r < 0 {
			return Change{}, fmt.Errorf("change %s: replicas %q is not a whole number of at least 0", s, n)
		}
		if !strings.Contains(set, "/") {
			set = "openshift-machine-api/" + set
		}
		c.MachineSet, c.Replicas = set, int32(r)
	case ChangeApply, ChangeMachineConfig:
		kinds, check := applyKinds, func(*unstructured.Unstructured) error { return nil }
		if c.Kind == ChangeMachineConfig {
			kinds, check = machineConfigKinds, checkMachineConfig
		}
		objs, err := readManifests(arg, kinds, check)
		if err != nil {
			return Change{}, fmt.Errorf("change %s: %w", s, err)
		}
		c.Objects = objs
	case ChangeUpdate:
		if _, err := semver.Parse(arg); err != nil {
			return Change{}, fmt.Errorf("change %s: %q is not a release version (4.16.3): %v", s, arg, err)
		}
		c.Version = arg
	case ChangeWait:
		d, err := time.ParseDuration(arg)
		if err != nil || d <= 0 {
			return Change{}, fmt.Errorf("change %s: %q is not a positive duration (10m, 90s)", s, arg)
		}
		c.Wait = d
	default:
		return Change{}, fmt.Errorf("change %q: unknown kind %q (known: %s)", s, kind, kindList())
	}
	return c, nil
}

func kindList() string {
	names := make([]string, len(changeKinds))
	for i, k := range changeKinds {
		names[i] = string(k)
	}
	return strings.Join(names, ", ")
}

// CheckOrder refuses changes a simulation cannot apply in the order
// given: the scheduler starts with its Policy, so a policy change comes
// before any other, and only once.
func CheckOrder(changes []Change) error {
	policies := 0
	for i, c := range changes {
		if c.Kind != ChangePolicy {
			continue
		}
		policies++
		if i != 0 {
			return fmt.Errorf("change %s is change %d: a Policy is what the simulation's scheduler starts with, so it must be the first change", c, i+1)
		}
	}
	if policies > 1 {
		return errors.New("more than one policy change: the scheduler runs with one Policy")
	}
	if n := len(slices.DeleteFunc(slices.Clone(changes), func(c Change) bool { return c.Kind != ChangeUpdate })); n > 1 {
		return fmt.Errorf("%d update changes: a simulation updates the cluster once, to one release of its graph", n)
	}
	return nil
}

// checkMachineConfig refuses a MachineConfig the MCO could not render: a
// malformed Ignition config or kernel type.
func checkMachineConfig(u *unstructured.Unstructured) error {
	if u.GetKind() != "MachineConfig" {
		return nil
	}
	mc, err := typed[mcfgv1.MachineConfig](u)
	if err != nil {
		return err
	}
	_, err = mco.Merge("worker", []*mcfgv1.MachineConfig{mc}, "", "")
	return err
}

// readManifests reads the objects of a YAML or JSON file of one or more
// documents, each of one of kinds and passing check.
func readManifests(path string, kinds map[string]bool, check func(*unstructured.Unstructured) error) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for i := 1; ; i++ {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if m == nil {
			continue // an empty document between separators
		}
		o := &unstructured.Unstructured{Object: m}
		if o.GetKind() == "List" {
			return nil, fmt.Errorf("document %d is a List: give its items as documents of their own", i)
		}
		key := o.GetAPIVersion() + "/" + o.GetKind()
		if !kinds[key] {
			return nil, fmt.Errorf("document %d: %s %q cannot be applied by this change (it applies %s)", i, key, o.GetName(), kindsList(kinds))
		}
		if o.GetName() == "" {
			return nil, fmt.Errorf("document %d: %s has no metadata.name", i, key)
		}
		if err := check(o); err != nil {
			return nil, fmt.Errorf("document %d: %s %s: %w", i, o.GetKind(), o.GetName(), err)
		}
		objs = append(objs, o)
	}
	if len(objs) == 0 {
		return nil, errors.New("no objects in the file")
	}
	return objs, nil
}

func kindsList(kinds map[string]bool) string {
	var keys []string
	for k := range kinds {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return strings.Join(keys, ", ")
}
