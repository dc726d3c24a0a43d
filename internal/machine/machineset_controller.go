package machine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/storage/names"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/capstan-dev/capstan/internal/failpoint"
	"github.com/capstan-dev/capstan/internal/nodes"
	"github.com/capstan-dev/capstan/internal/seeded"
	"github.com/capstan-dev/capstan/internal/waitfor"
)

var machineSetKind = machinev1.SchemeGroupVersion.WithKind("MachineSet")

// machineSetReconciler keeps spec.replicas machines of a MachineSet.
// Machines being deleted do not count: a replacement starts while an old
// machine is still held by its hooks.
type machineSetReconciler struct {
	client client.Client
	// reader reads past the cache: a scale-down picks its victims from
	// the machines as they are now.
	reader   client.Reader
	recorder record.EventRecorder
	opts     *Options
}

func (r *machineSetReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ms := &machinev1.MachineSet{}
	if err := r.client.Get(ctx, req.NamespacedName, ms); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !ms.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	res, err := r.reconcile(ctx, ms)
	if err != nil {
		r.recorder.Eventf(ms, corev1.EventTypeWarning, "ReconcileError", "%v", err)
	}
	return res, err
}

func (r *machineSetReconciler) reconcile(ctx context.Context, ms *machinev1.MachineSet) (reconcile.Result, error) {
	selector, err := metav1.LabelSelectorAsSelector(&ms.Spec.Selector)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("machineset %s: invalid selector: %w", ms.Name, err)
	}
	if selector.Empty() || !selector.Matches(labels.Set(ms.Spec.Template.Labels)) {
		return reconcile.Result{}, fmt.Errorf("machineset %s: spec.selector does not match spec.template.metadata.labels, it cannot match any machine", ms.Name)
	}
	if err := r.stampCapacity(ctx, ms); err != nil {
		return reconcile.Result{}, err
	}
	all := &machinev1.MachineList{}
	if err := r.client.List(ctx, all, client.InNamespace(ms.Namespace)); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing machines: %w", err)
	}
	var machines []*machinev1.Machine
	for i := range all.Items {
		m := &all.Items[i]
		owner := metav1.GetControllerOf(m)
		if owner != nil && owner.UID != ms.UID || !m.DeletionTimestamp.IsZero() || !selector.Matches(labels.Set(m.Labels)) {
			continue
		}
		if owner == nil {
			if err := r.adopt(ctx, ms, m); err != nil {
				klog.FromContext(ctx).Error(err, "Adopting orphan machine", "machine", klog.KObj(m), "machineset", klog.KObj(ms))
				continue
			}
		}
		machines = append(machines, m)
	}
	sort.Slice(machines, func(i, j int) bool { return machines[i].Name < machines[j].Name })

	syncErr := r.syncReplicas(ctx, ms, machines)
	requeue, err := r.updateStatus(ctx, ms, machines)
	if err = errors.Join(syncErr, err); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: requeue}, nil
}

// refresh rereads machines from the API server, leaving out those gone
// or deleting since the cache saw them.
func (r *machineSetReconciler) refresh(ctx context.Context, machines []*machinev1.Machine) ([]*machinev1.Machine, error) {
	if r.reader == nil {
		return machines, nil
	}
	out := make([]*machinev1.Machine, 0, len(machines))
	for _, m := range machines {
		fresh := &machinev1.Machine{}
		err := r.reader.Get(ctx, client.ObjectKeyFromObject(m), fresh)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return nil, fmt.Errorf("reading machine %s: %w", m.Name, err)
		case fresh.DeletionTimestamp.IsZero():
			out = append(out, fresh)
		}
	}
	return out, nil
}

func (r *machineSetReconciler) adopt(ctx context.Context, ms *machinev1.MachineSet, m *machinev1.Machine) error {
	base := m.DeepCopy()
	m.OwnerReferences = append(m.OwnerReferences, *metav1.NewControllerRef(ms, machineSetKind))
	return r.client.Patch(ctx, m, optimisticMerge(base))
}

// syncReplicas creates or deletes machines to reach spec.replicas.
func (r *machineSetReconciler) syncReplicas(ctx context.Context, ms *machinev1.MachineSet, machines []*machinev1.Machine) error {
	want := int(ptr.Deref(ms.Spec.Replicas, 0))
	log := klog.FromContext(ctx).WithValues("machineset", klog.KObj(ms))
	switch diff := len(machines) - want; {
	case diff < 0:
		log.Info("Too few replicas, creating machines", "want", want, "have", len(machines), "creating", -diff)
		created, createErr := r.createMachines(ctx, ms, -diff)
		// Even when some creations failed, wait until the cache shows the
		// ones that succeeded: the retry must count them, or it creates
		// them again and the MachineSet overshoots.
		return errors.Join(createErr, r.waitInCache(ctx, created, func(m *machinev1.Machine, err error) bool { return err == nil }))
	case diff > 0:
		prio, err := deletePriorityFor(ms)
		if err != nil {
			return err
		}
		// The cache may not have the delete-machine mark set just before
		// the replicas were lowered (the autoscaler marks, then scales):
		// victims are chosen on the machines read afresh.
		if machines, err = r.refresh(ctx, machines); err != nil {
			return err
		}
		if diff = len(machines) - want; diff <= 0 {
			return nil
		}
		candidates := machines
		if ms.Spec.DeletePolicy == "" || ms.Spec.DeletePolicy == string(machinev1.RandomMachineSetDeletePolicy) {
			candidates = append([]*machinev1.Machine(nil), machines...)
			seeded.Shuffle(len(candidates), func(i, j int) { candidates[i], candidates[j] = candidates[j], candidates[i] })
		}
		victims := machinesToDelete(candidates, diff, prio, timeNow())
		log.Info("Too many replicas, deleting machines", "want", want, "have", len(machines), "deleting", len(victims), "policy", ms.Spec.DeletePolicy)
		var (
			mu   sync.Mutex
			errs []error
			wg   sync.WaitGroup
		)
		for _, m := range victims {
			wg.Go(func() {
				if err := r.client.Delete(ctx, m); err != nil && !apierrors.IsNotFound(err) {
					mu.Lock()
					errs = append(errs, fmt.Errorf("deleting machine %s: %w", m.Name, err))
					mu.Unlock()
					return
				}
				r.recorder.Eventf(ms, corev1.EventTypeNormal, "SuccessfulDelete", "Deleted machine: %s", m.Name)
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		return r.waitInCache(ctx, victims, func(m *machinev1.Machine, err error) bool {
			return apierrors.IsNotFound(err) || err == nil && !m.DeletionTimestamp.IsZero()
		})
	}
	return nil
}

// createMachines creates n machines from the template, in parallel.
func (r *machineSetReconciler) createMachines(ctx context.Context, ms *machinev1.MachineSet, n int) ([]*machinev1.Machine, error) {
	var (
		mu      sync.Mutex
		created []*machinev1.Machine
		errs    []error
		wg      sync.WaitGroup
	)
	sem := make(chan struct{}, r.opts.Concurrency)
	for range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			m, err := r.createMachine(ctx, ms)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				r.recorder.Eventf(ms, corev1.EventTypeWarning, "FailedCreate", "Failed to create machine: %v", err)
				return
			}
			created = append(created, m)
			r.recorder.Eventf(ms, corev1.EventTypeNormal, "SuccessfulCreate", "Created machine: %s", m.Name)
		})
	}
	wg.Wait()
	return created, errors.Join(errs...)
}

// createMachine creates one machine of ms. Its name is chosen here, as
// the apiserver would generate it, rather than by generateName, so that a
// create whose outcome the API could not tell (etcd lost its leader while
// committing it, the connection broke) can be tried again under the same
// name: AlreadyExists then says the first attempt made it. With
// generateName the retry, or the next reconcile before the cache shows
// the machine, would make a second machine and overshoot.
func (r *machineSetReconciler) createMachine(ctx context.Context, ms *machinev1.MachineSet) (*machinev1.Machine, error) {
	const attempts = 5
	m := newMachineFromTemplate(ms)
	var err error
	for attempt := 1; attempt <= attempts; attempt++ {
		failpoint.Hit(failpoint.MachineSetCreate)
		err = r.client.Create(ctx, m.DeepCopy())
		switch {
		case err == nil:
			return m, nil
		case apierrors.IsAlreadyExists(err):
			// Ours (an earlier attempt committed), or another's of the
			// same name (a name drawn twice): then draw again.
			got := &machinev1.Machine{}
			if err := r.uncached().Get(ctx, client.ObjectKeyFromObject(m), got); err != nil {
				return nil, fmt.Errorf("machine %s exists, but reading it failed: %w", m.Name, err)
			}
			if ref := metav1.GetControllerOf(got); ref != nil && ref.UID == ms.UID {
				return got, nil
			}
			m = newMachineFromTemplate(ms)
		case !outcomeUnknown(err):
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("creating machine %s: %w", m.Name, err)
}

// outcomeUnknown reports whether a failed write may still have been
// carried out: the server failed or timed out, or no answer came.
func outcomeUnknown(err error) bool {
	var status apierrors.APIStatus
	return !errors.As(err, &status) || status.Status().Code >= 500
}

// uncached reads past the cache when the reconciler has a reader.
func (r *machineSetReconciler) uncached() client.Reader {
	if r.reader != nil {
		return r.reader
	}
	return r.client
}

func newMachineFromTemplate(ms *machinev1.MachineSet) *machinev1.Machine {
	t := ms.Spec.Template
	m := &machinev1.Machine{
		ObjectMeta: metav1.ObjectMeta{
			Name:            names.SimpleNameGenerator.GenerateName(ms.Name + "-"),
			Namespace:       ms.Namespace,
			Labels:          copyMap(t.Labels),
			Annotations:     copyMap(t.Annotations),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ms, machineSetKind)},
		},
		Spec: *t.Spec.DeepCopy(),
	}
	return m
}

func copyMap(in map[string]string) map[string]string {
	if in == nil {
		return nil
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}

// waitInCache waits until the cache shows what the controller just did,
// so that the next reconcile does not count the same machines again.
func (r *machineSetReconciler) waitInCache(ctx context.Context, machines []*machinev1.Machine, done func(*machinev1.Machine, error) bool) error {
	for _, m := range machines {
		key := client.ObjectKeyFromObject(m)
		err := waitfor.Poll(ctx, 20*time.Millisecond, 10*time.Second, waitfor.Simple(func(ctx context.Context) (bool, string) {
			got := &machinev1.Machine{}
			err := r.client.Get(ctx, key, got)
			return done(got, err), "not in the cache yet"
		}))
		if err != nil {
			return fmt.Errorf("machine %s: the cache did not catch up: %w", m.Name, err)
		}
	}
	return nil
}

// updateStatus writes the replica counts; it returns when to look again
// for machines that become available after minReadySeconds.
func (r *machineSetReconciler) updateStatus(ctx context.Context, ms *machinev1.MachineSet, machines []*machinev1.Machine) (time.Duration, error) {
	templateLabels := labels.Set(ms.Spec.Template.Labels)
	minReady := time.Duration(ms.Spec.MinReadySeconds) * time.Second
	now := timeNow()
	var st machinev1.MachineSetStatus
	var requeue time.Duration
	for _, m := range machines {
		st.Replicas++
		if labels.SelectorFromSet(templateLabels).Matches(labels.Set(m.Labels)) {
			st.FullyLabeledReplicas++
		}
		node, err := r.nodeOf(ctx, m)
		if err != nil {
			return 0, err
		}
		if node == nil {
			continue
		}
		ready := nodes.Condition(node, corev1.NodeReady)
		if ready == nil || ready.Status != corev1.ConditionTrue {
			continue
		}
		st.ReadyReplicas++
		if since := now.Sub(ready.LastTransitionTime.Time); minReady == 0 || since >= minReady {
			st.AvailableReplicas++
		} else if wait := minReady - since; requeue == 0 || wait < requeue {
			requeue = wait
		}
	}
	st.ObservedGeneration = ms.Generation
	st.ErrorReason, st.ErrorMessage = ms.Status.ErrorReason, ms.Status.ErrorMessage
	st.Conditions = ms.Status.Conditions
	st.AuthoritativeAPI = ms.Status.AuthoritativeAPI
	st.SynchronizedGeneration = ms.Status.SynchronizedGeneration
	if equality.Semantic.DeepEqual(ms.Status, st) {
		return requeue, nil
	}
	base := ms.DeepCopy()
	ms.Status = st
	if err := r.client.Status().Patch(ctx, ms, optimisticMerge(base)); err != nil {
		return 0, fmt.Errorf("updating status of machineset %s: %w", ms.Name, err)
	}
	return requeue, nil
}

func (r *machineSetReconciler) nodeOf(ctx context.Context, m *machinev1.Machine) (*corev1.Node, error) {
	if m.Status.NodeRef == nil {
		return nil, nil
	}
	node := &corev1.Node{}
	err := r.client.Get(ctx, types.NamespacedName{Name: m.Status.NodeRef.Name}, node)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return node, err
}

// machineSetsForMachine maps a machine to its controlling MachineSet, or,
// for an orphan, to every MachineSet whose selector matches it.
func (r *machineSetReconciler) machineSetsForMachine(ctx context.Context, o client.Object) []reconcile.Request {
	if owner := metav1.GetControllerOf(o); owner != nil {
		if owner.Kind != machineSetKind.Kind {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: owner.Name}}}
	}
	sets := &machinev1.MachineSetList{}
	if err := r.client.List(ctx, sets, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range sets.Items {
		sel, err := metav1.LabelSelectorAsSelector(&sets.Items[i].Spec.Selector)
		if err == nil && !sel.Empty() && sel.Matches(labels.Set(o.GetLabels())) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&sets.Items[i])})
		}
	}
	return out
}

// machineSetsForNode maps a node (its readiness counts) to the MachineSet
// of its machine.
func (r *machineSetReconciler) machineSetsForNode(ctx context.Context, o client.Object) []reconcile.Request {
	if m := machineOfNode(ctx, r.client, o); m != nil {
		return r.machineSetsForMachine(ctx, m)
	}
	return nil
}
