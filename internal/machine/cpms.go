package machine

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	cpmsv1 "github.com/openshift/api/machine/v1"
	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/capstan-dev/capstan/internal/compat"
	"github.com/capstan-dev/capstan/internal/failpoint"
	"github.com/capstan-dev/capstan/internal/nodes"
	"github.com/capstan-dev/capstan/internal/seeded"
	"github.com/capstan-dev/capstan/internal/sim"
)

// The ControlPlaneMachineSet, as the control-plane-machine-set operator
// runs it: one object named cluster in openshift-machine-api keeps
// spec.replicas control-plane machines, one per index (the failure
// domain a machine's name ends with, <prefix>-<random>-<index>). An index
// with no machine that stays gets one from the template, whatever the
// strategy; with RollingUpdate an index whose machine no longer matches
// the template gets a replacement (one index at a time), and the old
// machine is deleted once the replacement is ready; with OnDelete the old
// machine stays until someone deletes it. On the simulated platform the
// failure domains are the zones: index i goes to zone i mod len(zones).

// ControlPlaneMachineSetName is the one ControlPlaneMachineSet a cluster has.
const ControlPlaneMachineSetName = "cluster"

// The CPMS's condition types and reasons, as upstream sets them.
const (
	cpmsAvailable   = "Available"
	cpmsDegraded    = "Degraded"
	cpmsProgressing = "Progressing"

	reasonAllReplicasAvailable = "AllReplicasAvailable"
	reasonUnavailableReplicas  = "UnavailableReplicas"
	reasonAsExpected           = "AsExpected"
	reasonNoReadyMachines      = "NoReadyMachines"
	reasonAllReplicasUpdated   = "AllReplicasUpdated"
	reasonNeedsUpdateReplicas  = "NeedsUpdateReplicas"
	reasonExcessReplicas       = "ExcessReplicas"
)

// CPMSMachine is one control-plane machine as the plan sees it.
type CPMSMachine struct {
	Name     string
	Index    int
	Deleting bool
	// Ready: Running with a Ready node.
	Ready bool
	// NeedsUpdate: its spec differs from the template's for its index.
	NeedsUpdate bool
	// Created is when the machine was made.
	Created time.Time
}

// CPMSPlan is what the ControlPlaneMachineSet does next.
type CPMSPlan struct {
	// Create lists the indexes that get a new machine.
	Create []int
	// Delete lists the machines to delete.
	Delete []string
}

// maxSurge is how many machines a RollingUpdate keeps above the
// replicas at most, as upstream (a constant there too).
const maxSurge = 1

// PlanControlPlane decides the creations and deletions for replicas
// indexes under strategy. Machines of indexes outside 0..replicas-1 are
// left alone.
//
// Under RollingUpdate every machine counts towards the surge, those being
// deleted included (deviseExistingSurge): a replacement is made only while
// the machines number fewer than replicas+maxSurge, the lower index
// first, so deleting two masters at once replaces them one after the
// other, the second once the first old machine is gone. Under OnDelete an
// index whose machines are all being deleted gets its replacement at once.
func PlanControlPlane(replicas int, strategy cpmsv1.ControlPlaneMachineSetStrategyType, machines []CPMSMachine) CPMSPlan {
	var plan CPMSPlan
	byIndex := map[int][]CPMSMachine{}
	for _, m := range machines {
		byIndex[m.Index] = append(byIndex[m.Index], m)
	}
	surge := len(machines) - replicas
	for i := range replicas {
		var live, fresh, old []CPMSMachine
		for _, m := range byIndex[i] {
			if m.Deleting {
				continue
			}
			live = append(live, m)
			if m.NeedsUpdate {
				old = append(old, m)
			} else {
				fresh = append(fresh, m)
			}
		}
		if strategy != cpmsv1.RollingUpdate {
			if len(live) == 0 {
				plan.Create = append(plan.Create, i)
			}
			continue
		}
		// A ready replacement: the outdated machines of the index go.
		var ready []CPMSMachine
		for _, m := range fresh {
			if m.Ready {
				ready = append(ready, m)
			}
		}
		if len(old) > 0 && len(ready) > 0 {
			for _, m := range old {
				plan.Delete = append(plan.Delete, m.Name)
			}
		}
		// Two up-to-date, ready machines of one index (a machine that
		// was no longer selected came back): the oldest goes
		// (deleteReplacedMachines).
		if len(ready) > 1 {
			oldest := slices.MinFunc(ready, func(a, b CPMSMachine) int {
				return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.Name, b.Name))
			})
			plan.Delete = append(plan.Delete, oldest.Name)
		}
		if len(fresh) == 0 && surge < maxSurge {
			plan.Create = append(plan.Create, i)
			surge++
		}
	}
	return plan
}

// CPMSStatus counts as upstream does: replicas are the machines, ready
// those Running with a Ready node, updated the ready ones that match the
// template, unavailable the indexes without a ready machine.
func CPMSStatus(replicas int, machines []CPMSMachine) (status cpmsv1.ControlPlaneMachineSetStatus) {
	readyIn := map[int]bool{}
	for _, m := range machines {
		status.Replicas++
		if m.Ready {
			status.ReadyReplicas++
			readyIn[m.Index] = true
			if !m.NeedsUpdate {
				status.UpdatedReplicas++
			}
		}
	}
	for i := range replicas {
		if !readyIn[i] {
			status.UnavailableReplicas++
		}
	}
	return status
}

// cpmsConditions are the Available, Degraded and Progressing conditions of
// a status, in upstream's words.
func cpmsConditions(desired int32, st cpmsv1.ControlPlaneMachineSetStatus, generation int64) []metav1.Condition {
	c := func(t string, s metav1.ConditionStatus, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: generation}
	}
	var out []metav1.Condition
	if st.UnavailableReplicas != 0 {
		out = append(out, c(cpmsAvailable, metav1.ConditionFalse, reasonUnavailableReplicas, fmt.Sprintf("Missing %d available replica(s)", st.UnavailableReplicas)))
	} else {
		out = append(out, c(cpmsAvailable, metav1.ConditionTrue, reasonAllReplicasAvailable, ""))
	}
	if st.ReadyReplicas == 0 {
		out = append(out, c(cpmsDegraded, metav1.ConditionTrue, reasonNoReadyMachines, ""))
	} else {
		out = append(out, c(cpmsDegraded, metav1.ConditionFalse, reasonAsExpected, ""))
	}
	switch {
	case desired > st.UpdatedReplicas:
		out = append(out, c(cpmsProgressing, metav1.ConditionTrue, reasonNeedsUpdateReplicas, fmt.Sprintf("Observed %d replica(s) in need of update", desired-st.UpdatedReplicas)))
	case desired < st.ReadyReplicas:
		out = append(out, c(cpmsProgressing, metav1.ConditionTrue, reasonExcessReplicas, fmt.Sprintf("Waiting for %d old replica(s) to be removed", st.ReadyReplicas-st.UpdatedReplicas)))
	default:
		out = append(out, c(cpmsProgressing, metav1.ConditionFalse, reasonAllReplicasUpdated, ""))
	}
	return out
}

// controlPlaneIndex reads a control-plane machine's index: the number its
// name ends with after a dash.
var controlPlaneIndex = regexp.MustCompile(`-(\d+)$`)

// MachineIndex is a control-plane machine's index, or -1.
func MachineIndex(name string) int {
	s := controlPlaneIndex.FindStringSubmatch(name)
	if s == nil {
		return -1
	}
	i, err := strconv.Atoi(s[1])
	if err != nil {
		return -1
	}
	return i
}

// cpmsReconciler runs the ControlPlaneMachineSet.
type cpmsReconciler struct {
	client   client.Client
	reader   client.Reader
	recorder record.EventRecorder
	opts     *Options
	// unhonoured reports the fields capstan does not act on.
	unhonoured compat.Reporter
}

func (r *cpmsReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	cpms := &cpmsv1.ControlPlaneMachineSet{}
	if err := r.client.Get(ctx, req.NamespacedName, cpms); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if req.Name != ControlPlaneMachineSetName || !cpms.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	selector, err := metav1.LabelSelectorAsSelector(&cpms.Spec.Selector)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("controlplanemachineset %s: spec.selector: %w", cpms.Name, err)
	}
	tmpl := cpms.Spec.Template.OpenShiftMachineV1Beta1Machine
	if tmpl == nil {
		return reconcile.Result{}, fmt.Errorf("controlplanemachineset %s: spec.template has no %s", cpms.Name, cpmsv1.OpenShiftMachineV1Beta1MachineType)
	}
	reported := cpms.DeepCopy()
	reported.APIVersion, reported.Kind = cpmsv1.GroupVersion.String(), "ControlPlaneMachineSet"
	r.unhonoured.Report(r.recorder, "ControlPlaneMachineSet", reported, cpms.UID, cpms.Generation)
	replicas := int(ptr.Deref(cpms.Spec.Replicas, 0))
	// Read past the cache: the few control-plane machines as they are
	// now, so that a machine the cache has not seen yet never gets a twin.
	list := &machinev1.MachineList{}
	if err := r.reader.List(ctx, list, client.InNamespace(cpms.Namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing control-plane machines: %w", err)
	}
	current := map[int]string{}
	for i := range list.Items {
		m := &list.Items[i]
		if index := MachineIndex(m.Name); index >= 0 && m.DeletionTimestamp.IsZero() {
			if ps, err := ParseProviderSpec(m.Spec.ProviderSpec); err == nil {
				current[index] = ps.Zone
			}
		}
	}
	zones, err := FailureDomainZones(cpms.Spec.Template.OpenShiftMachineV1Beta1Machine.FailureDomains, replicas, current)
	if err != nil {
		r.recorder.Eventf(cpms, corev1.EventTypeWarning, "InvalidFailureDomains", "%v", err)
		return reconcile.Result{}, fmt.Errorf("controlplanemachineset %s: %w", cpms.Name, err)
	}
	var machines []CPMSMachine
	for i := range list.Items {
		m := &list.Items[i]
		index := MachineIndex(m.Name)
		if index < 0 || index >= replicas {
			continue
		}
		info := CPMSMachine{Name: m.Name, Index: index, Deleting: !m.DeletionTimestamp.IsZero(), Created: m.CreationTimestamp.Time}
		if ptr.Deref(m.Status.Phase, "") == machinev1.PhaseRunning && m.Status.NodeRef != nil {
			n := &corev1.Node{}
			if err := r.client.Get(ctx, types.NamespacedName{Name: m.Status.NodeRef.Name}, n); err == nil {
				info.Ready = nodes.Ready(n)
			}
		}
		info.NeedsUpdate = needsUpdate(m, tmpl, zones[index], index)
		machines = append(machines, info)
	}
	slices.SortFunc(machines, func(a, b CPMSMachine) int { return strings.Compare(a.Name, b.Name) })

	if cpms.Spec.State == cpmsv1.ControlPlaneMachineSetStateActive {
		plan := PlanControlPlane(replicas, cpms.Spec.Strategy.Type, machines)
		for _, index := range plan.Create {
			name, err := r.createMachine(ctx, cpms, tmpl, zones[index], index)
			if err != nil {
				r.recorder.Eventf(cpms, corev1.EventTypeWarning, "FailedCreate", "Failed to create machine for index %d: %v", index, err)
				return reconcile.Result{}, err
			}
			klog.FromContext(ctx).Info("Created a control-plane machine", "machine", name, "index", index)
			r.recorder.Eventf(cpms, corev1.EventTypeNormal, "SuccessfulCreate", "Created machine %s for index %d", name, index)
		}
		for _, name := range plan.Delete {
			m := &machinev1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cpms.Namespace}}
			if err := r.client.Delete(ctx, m); client.IgnoreNotFound(err) != nil {
				return reconcile.Result{}, fmt.Errorf("deleting machine %s: %w", name, err)
			}
			r.recorder.Eventf(cpms, corev1.EventTypeNormal, "SuccessfulDelete", "Deleted outdated machine %s: its replacement is ready", name)
		}
	}
	st := CPMSStatus(replicas, machines)
	st.ObservedGeneration = cpms.Generation
	st.Conditions = slices.Clone(cpms.Status.Conditions)
	for _, c := range cpmsConditions(ptr.Deref(cpms.Spec.Replicas, 0), st, cpms.Generation) {
		meta.SetStatusCondition(&st.Conditions, c)
	}
	if !equality.Semantic.DeepEqual(cpms.Status, st) {
		cpms.Status = st
		if err := r.client.Status().Update(ctx, cpms); err != nil && !apierrors.IsConflict(err) {
			return reconcile.Result{}, fmt.Errorf("updating controlplanemachineset %s status: %w", cpms.Name, err)
		}
	}
	return reconcile.Result{RequeueAfter: time.Minute}, nil
}

// needsUpdate reports whether a machine's spec differs from what the
// template gives its index (in zone).
func needsUpdate(m *machinev1.Machine, tmpl *cpmsv1.OpenShiftMachineV1Beta1MachineTemplate, zone string, index int) bool {
	have, err := ParseProviderSpec(m.Spec.ProviderSpec)
	if err != nil {
		return true
	}
	want, err := ParseProviderSpec(machinev1.ProviderSpec{Value: providerSpecForIndex(tmpl.Spec.ProviderSpec, zone, index)})
	if err != nil {
		return false
	}
	return !equality.Semantic.DeepEqual(have, want)
}

// providerSpecForIndex is the template's providerSpec in the zone of
// index's failure domain; without failure domains, in the template's
// zone, or when it names none, in the simulated cloud's zones by index.
func providerSpecForIndex(ps machinev1.ProviderSpec, zone string, index int) *runtime.RawExtension {
	spec, err := ParseProviderSpec(ps)
	if err != nil {
		return ps.Value
	}
	switch {
	case zone != "":
		spec.Zone = zone
	case spec.Zone == "":
		spec.Zone = sim.DefaultZones[index%len(sim.DefaultZones)]
	}
	return RawProviderSpec(*spec)
}

// FailureDomainZones maps the indexes of a control plane to the zones of
// its failure domains, as the ControlPlaneMachineSet operator does: the
// failure domains sorted, index i taking the (i mod n)th, except that an
// index whose machine is in one of them already keeps it. The simulated
// provider places machines by zone: the AWS, Azure and GCP failure
// domains name one; those of other platforms are refused. nil without
// failure domains.
func FailureDomainZones(fd *cpmsv1.FailureDomains, replicas int, current map[int]string) (map[int]string, error) {
	if fd == nil || fd.Platform == "" {
		return nil, nil
	}
	var zones []string
	switch {
	case fd.AWS != nil:
		for _, d := range *fd.AWS {
			zones = append(zones, d.Placement.AvailabilityZone)
		}
	case fd.Azure != nil:
		for _, d := range *fd.Azure {
			zones = append(zones, d.Zone)
		}
	case fd.GCP != nil:
		for _, d := range *fd.GCP {
			zones = append(zones, d.Zone)
		}
	default:
		return nil, fmt.Errorf("spec.template.machines_v1beta1_machine_openshift_io.failureDomains: platform %s: the simulated provider places machines by zone and takes the AWS, Azure or GCP failure domains only", fd.Platform)
	}
	zones = slices.Compact(slices.Sorted(slices.Values(slices.DeleteFunc(zones, func(z string) bool { return z == "" }))))
	if len(zones) == 0 {
		return nil, nil
	}
	out := make(map[int]string, replicas)
	for i := range replicas {
		out[i] = zones[i%len(zones)]
		if z, ok := current[i]; ok && slices.Contains(zones, z) {
			out[i] = z
		}
	}
	return out, nil
}

// createMachine creates the machine of index from the template, under a
// name drawn once and kept across attempts whose outcome is unknown.
func (r *cpmsReconciler) createMachine(ctx context.Context, cpms *cpmsv1.ControlPlaneMachineSet, tmpl *cpmsv1.OpenShiftMachineV1Beta1MachineTemplate, zone string, index int) (string, error) {
	prefix := cpms.Spec.MachineNamePrefix
	if prefix == "" {
		prefix = tmpl.ObjectMeta.Labels[ClusterIDLabel] + "-master"
	}
	m := &machinev1.Machine{
		ObjectMeta: metav1.ObjectMeta{
			Name:        fmt.Sprintf("%s-%s-%d", prefix, randomSuffix(), index),
			Namespace:   cpms.Namespace,
			Labels:      tmpl.ObjectMeta.Labels,
			Annotations: tmpl.ObjectMeta.Annotations,
		},
		Spec: *tmpl.Spec.DeepCopy(),
	}
	m.Spec.ProviderSpec.Value = providerSpecForIndex(tmpl.Spec.ProviderSpec, zone, index)
	var err error
	for attempt := 1; attempt <= 5; attempt++ {
		err = r.client.Create(ctx, m.DeepCopy())
		switch {
		case err == nil, apierrors.IsAlreadyExists(err) && attempt > 1:
			failpoint.Hit(failpoint.CPMSMachineCreated)
			return m.Name, nil
		case !outcomeUnknown(err):
			return "", err
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
		}
	}
	return "", fmt.Errorf("creating machine %s: %w", m.Name, err)
}

// randomSuffix is five characters as the operator draws them.
func randomSuffix() string {
	return seeded.String(5, "bcdfghjklmnpqrstvwxz2456789")
}

// cpmsOfMachine maps any control-plane machine to the cluster CPMS.
func cpmsOfMachine(_ context.Context, o client.Object) []reconcile.Request {
	if o.GetLabels()[MachineRoleLabel] != "master" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: ControlPlaneMachineSetName}}}
}

// cpmsOfNode maps a control-plane node to the cluster CPMS: its readiness
// is the machine's.
func (r *cpmsReconciler) cpmsOfNode(_ context.Context, o client.Object) []reconcile.Request {
	if _, ok := o.GetLabels()["node-role.kubernetes.io/master"]; !ok {
		if _, ok := o.GetLabels()["node-role.kubernetes.io/control-plane"]; !ok {
			return nil
		}
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: r.opts.Namespace, Name: ControlPlaneMachineSetName}}}
}
