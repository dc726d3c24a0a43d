// Package hooks is for writing hook-implementing controllers: controllers
// that hold a Machine's deletion at a lifecycle point until they have done
// their part. Declare the hook (name, owner, lifecycle point, the machines
// it applies to) and a function; the controller adds the hook to the
// machines it selects, calls the function while a machine is Deleting and
// the hook is holding it, and removes the hook when the function says done.
package hooks

import (
	"context"
	"fmt"
	"slices"
	"time"

	machinev1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/capstan-dev/capstan/internal/machine"
)

// Point is a lifecycle point of a Machine's deletion.
type Point string

// The lifecycle points of the Deleting phase.
const (
	// PreDrain hooks hold the drain of the machine's node.
	PreDrain Point = "preDrain"
	// PreTerminate hooks hold the deletion of the instance, after the
	// drain.
	PreTerminate Point = "preTerminate"
)

// Result is what a hook's function decided.
type Result struct {
	// Done removes the hook: the deletion may go on.
	Done bool
	// RequeueAfter calls the function again after this long (it is also
	// called on every change of the machine).
	RequeueAfter time.Duration
}

// Hook declares a lifecycle hook and the function that implements it.
type Hook struct {
	// Name and Owner are the hook's entry in spec.lifecycleHooks.
	Name  string
	Owner string
	Point Point
	// Selector chooses the machines that get the hook; nil selects all.
	Selector labels.Selector
	// Handle is called while a selected machine is Deleting and the hook
	// holds it: for PreDrain from the start of the Deleting phase, for
	// PreTerminate once the node is drained (Drained=True). c reads and
	// writes the cluster.
	Handle func(ctx context.Context, c client.Client, m *machinev1.Machine) (Result, error)
}

// Validate checks the declaration.
func (h *Hook) Validate() error {
	switch {
	case len(h.Name) < 3:
		return fmt.Errorf("hook name %q: must be at least 3 characters", h.Name)
	case len(h.Owner) < 3:
		return fmt.Errorf("hook %s: owner %q must be at least 3 characters", h.Name, h.Owner)
	case h.Point != PreDrain && h.Point != PreTerminate:
		return fmt.Errorf("hook %s: lifecycle point %q is neither %s nor %s", h.Name, h.Point, PreDrain, PreTerminate)
	case h.Handle == nil:
		return fmt.Errorf("hook %s: no Handle function", h.Name)
	}
	return nil
}

func (h *Hook) entry() machinev1.LifecycleHook {
	return machinev1.LifecycleHook{Name: h.Name, Owner: h.Owner}
}

func (h *Hook) list(m *machinev1.Machine) *[]machinev1.LifecycleHook {
	if h.Point == PreDrain {
		return &m.Spec.LifecycleHooks.PreDrain
	}
	return &m.Spec.LifecycleHooks.PreTerminate
}

func (h *Hook) selects(m *machinev1.Machine) bool {
	return h.Selector == nil || h.Selector.Matches(labels.Set(m.Labels))
}

// holding reports whether the hook is what the machine waits on now.
func (h *Hook) holding(m *machinev1.Machine) bool {
	if m.DeletionTimestamp.IsZero() || !slices.Contains(*h.list(m), h.entry()) {
		return false
	}
	if h.Point == PreTerminate {
		for _, c := range m.Status.Conditions {
			if c.Type == machinev1.MachineDrained {
				return c.Status == corev1.ConditionTrue
			}
		}
		return false
	}
	return true
}

// Options of a hook controller.
type Options struct {
	// Namespace holds the machines (openshift-machine-api by default).
	Namespace string
	// LeaderElect holds the lease NAMESPACE/capstan-hook-<name> first.
	LeaderElect bool
}

// NewManager returns a manager running a controller for each hook.
func NewManager(cfg *rest.Config, opts Options, hooks ...*Hook) (manager.Manager, error) {
	if len(hooks) == 0 {
		return nil, fmt.Errorf("no hooks to run")
	}
	for _, h := range hooks {
		if err := h.Validate(); err != nil {
			return nil, err
		}
	}
	if opts.Namespace == "" {
		opts.Namespace = machine.Namespace
	}
	machine.SetControllerLogger()
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0
	mgr, err := manager.New(cfg, manager.Options{
		Scheme:  machine.Scheme(),
		Metrics: metricsserver.Options{BindAddress: "0"},
		// One process may run a cluster after another (a simulation
		// and its control run): names are unique within each manager,
		// not across the process's life, which the global check wants.
		Controller:              config.Controller{SkipNameValidation: ptr.To(true)},
		HealthProbeBindAddress:  "0",
		LeaderElection:          opts.LeaderElect,
		LeaderElectionID:        LeaseName(hooks),
		LeaderElectionNamespace: opts.Namespace,
		Cache: cache.Options{DefaultTransform: cache.TransformStripManagedFields(), ByObject: map[client.Object]cache.ByObject{
			&machinev1.Machine{}: {Namespaces: map[string]cache.Config{opts.Namespace: {}}},
			// ProactiveReplacement reads the machine's MachineSet, in the
			// same namespace: the hooks' rights stop there.
			&machinev1.MachineSet{}: {Namespaces: map[string]cache.Config{opts.Namespace: {}}},
		}},
	})
	if err != nil {
		return nil, err
	}
	for _, h := range hooks {
		r := &reconciler{client: mgr.GetClient(), hook: h}
		if err := ctrl.NewControllerManagedBy(mgr).Named("hook-" + sanitize(h.Name)).For(&machinev1.Machine{}).
			// A process may run the same hook controllers more than once
			// (capstan hooks run, beside capstan up's): their names need
			// not be unique process-wide.
			WithOptions(controller.Options{MaxConcurrentReconciles: 10, SkipNameValidation: ptr.To(true)}).Complete(r); err != nil {
			return nil, err
		}
	}
	return mgr, nil
}

// Run runs the hooks' controllers until ctx ends.
func Run(ctx context.Context, cfg *rest.Config, opts Options, hooks ...*Hook) error {
	mgr, err := NewManager(cfg, opts, hooks...)
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}

type reconciler struct {
	client client.Client
	hook   *Hook
}

func (r *reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	m := &machinev1.Machine{}
	if err := r.client.Get(ctx, req.NamespacedName, m); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	h := r.hook
	log := klog.FromContext(ctx).WithValues("hook", h.Name, "machine", klog.KObj(m))
	hooks := h.list(m)
	present := slices.Contains(*hooks, h.entry())
	if m.DeletionTimestamp.IsZero() {
		// Hooks go on while a machine lives: once it is deleted, none may
		// be added.
		switch {
		case h.selects(m) && !present:
			return reconcile.Result{}, r.update(ctx, m, func() { *h.list(m) = append(*h.list(m), h.entry()) })
		case !h.selects(m) && present:
			return reconcile.Result{}, r.update(ctx, m, func() { r.remove(m) })
		}
		return reconcile.Result{}, nil
	}
	if !h.holding(m) {
		return reconcile.Result{}, nil
	}
	res, err := h.Handle(ctx, r.client, m.DeepCopy())
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("hook %s on machine %s: %w", h.Name, m.Name, err)
	}
	if !res.Done {
		log.V(2).Info("Hook holds the machine", "requeueAfter", res.RequeueAfter)
		return reconcile.Result{RequeueAfter: res.RequeueAfter}, nil
	}
	log.Info("Hook done, removing it", "point", h.Point)
	return reconcile.Result{}, r.update(ctx, m, func() { r.remove(m) })
}

func (r *reconciler) remove(m *machinev1.Machine) {
	l := r.hook.list(m)
	*l = slices.DeleteFunc(*l, func(x machinev1.LifecycleHook) bool { return x == r.hook.entry() })
}

// update changes the machine's hooks, guarded by its resourceVersion so
// that another controller's change to the hooks is never lost; a conflict
// retries the reconcile with fresh data.
func (r *reconciler) update(ctx context.Context, m *machinev1.Machine, change func()) error {
	base := m.DeepCopy()
	change()
	err := r.client.Patch(ctx, m, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func sanitize(name string) string {
	out := make([]byte, 0, len(name))
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-':
			out = append(out, c)
		case c >= 'A' && c <= 'Z':
			out = append(out, c+'a'-'A')
		default:
			out = append(out, '-')
		}
	}
	return string(out)
}

// LeaseName is the Lease a set of hook controllers holds: named after
// its first hook.
func LeaseName(hooks []*Hook) string {
	if len(hooks) == 0 {
		return "capstan-hooks"
	}
	return "capstan-hook-" + sanitize(hooks[0].Name)
}
