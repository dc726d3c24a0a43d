package machine

import (
	"context"
	"fmt"
	"github.com/capstan-dev/capstan/internal/simclock"
	"k8s.io/utils/clock"
	"sync"
	"time"

	cpmsv1 "github.com/openshift/api/machine/v1"
	machinev1 "github.com/openshift/api/machine/v1beta1"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Options configure the Machine API controllers.
type Options struct {
	// Namespace holds the Machine API objects (openshift-machine-api).
	Namespace string
	// Actuator creates and deletes instances.
	Actuator Actuator
	// LeaderElect runs the controllers only while holding the lease
	// LeaderElectionNamespace/capstan-machine-api.
	LeaderElect             bool
	LeaderElectionNamespace string
	// DrainTimeout bounds one drain attempt; pods not gone by then are
	// retried on the next.
	DrainTimeout time.Duration
	// DrainBackoffBase and DrainBackoffMax bound the exponential backoff
	// between failed drains of a machine.
	DrainBackoffBase, DrainBackoffMax time.Duration
	// InstancePollInterval is how often a booting or terminating instance
	// is looked at again.
	InstancePollInterval time.Duration
	// Concurrency is how many machines each controller works on at once.
	Concurrency int
	// RemediationRebootDuration is how long the simulated remediator keeps
	// a node it power-cycles down.
	RemediationRebootDuration time.Duration
	// Clock runs the durations above: nil is the real clock, a
	// simulation's runs them at its speed (simclock.Scaled).
	Clock clock.PassiveClock
}

// real are the options with their durations as long as they last on the
// clock.
func (o Options) real() Options {
	for _, d := range []*time.Duration{&o.DrainTimeout, &o.DrainBackoffBase, &o.DrainBackoffMax, &o.InstancePollInterval, &o.RemediationRebootDuration} {
		*d = simclock.Real(o.Clock, *d)
	}
	return o
}

// DefaultOptions are OpenShift's timings: 20s drain attempts backing off
// from 5s to 1000s.
func DefaultOptions() Options {
	return Options{
		Namespace:                 Namespace,
		LeaderElectionNamespace:   Namespace,
		DrainTimeout:              20 * time.Second,
		DrainBackoffBase:          5 * time.Second,
		DrainBackoffMax:           1000 * time.Second,
		InstancePollInterval:      5 * time.Second,
		Concurrency:               20,
		RemediationRebootDuration: 5 * time.Second,
	}
}

// LeaderElectionID is the lease the Machine API controllers hold.
const LeaderElectionID = "capstan-machine-api"

// Scheme knows the built-in and machine.openshift.io types.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = machinev1.Install(s)
	_ = cpmsv1.Install(s)
	return s
}

var setLoggerOnce sync.Once

// SetControllerLogger sends controller-runtime's logs to klog, as every
// capstan command logs, once per process.
func SetControllerLogger() { setLoggerOnce.Do(func() { ctrl.SetLogger(klog.NewKlogr()) }) }

// NewManager sets up the Machine API controllers on cfg; Start runs them.
func NewManager(cfg *rest.Config, opts Options) (manager.Manager, error) {
	opts = opts.real()
	if opts.Actuator == nil {
		return nil, fmt.Errorf("machine API: no actuator")
	}
	if opts.Namespace == "" {
		return nil, fmt.Errorf("machine API: no namespace")
	}
	if opts.Concurrency <= 0 {
		return nil, fmt.Errorf("machine API: concurrency must be positive, got %d", opts.Concurrency)
	}
	SetControllerLogger()
	cfg = rest.CopyConfig(cfg)
	// The controllers' own writes are what the Machine API is made of:
	// no client-side throttling.
	cfg.QPS, cfg.Burst = -1, 0
	remediations := &unstructured.Unstructured{}
	remediations.SetGroupVersionKind(RebootRemediationKind)
	mgr, err := manager.New(cfg, manager.Options{
		Scheme:  Scheme(),
		Metrics: metricsserver.Options{BindAddress: "0"},
		// One process may run a cluster after another (a simulation
		// and its control run): names are unique within each manager,
		// not across the process's life, which the global check wants.
		Controller:              config.Controller{SkipNameValidation: ptr.To(true)},
		HealthProbeBindAddress:  "0",
		LeaderElection:          opts.LeaderElect,
		LeaderElectionID:        LeaderElectionID,
		LeaderElectionNamespace: opts.LeaderElectionNamespace,
		Cache: cache.Options{
			// As kube-controller-manager trims them: no controller reads
			// managedFields, and they are much of an object's size.
			DefaultTransform: cache.TransformStripManagedFields(),
			// Every object is looked at again this often, as OpenShift's
			// Machine API does, whatever the events.
			SyncPeriod: ptr.To(10 * time.Minute), ByObject: map[client.Object]cache.ByObject{
				&machinev1.Machine{}:             {Namespaces: map[string]cache.Config{opts.Namespace: {}}},
				&machinev1.MachineSet{}:          {Namespaces: map[string]cache.Config{opts.Namespace: {}}},
				&machinev1.MachineHealthCheck{}:  {Namespaces: map[string]cache.Config{opts.Namespace: {}}},
				&cpmsv1.ControlPlaneMachineSet{}: {Namespaces: map[string]cache.Config{opts.Namespace: {}}},
				remediations:                     {Namespaces: map[string]cache.Config{opts.Namespace: {}}},
			}},
	})
	if err != nil {
		return nil, fmt.Errorf("machine API manager: %w", err)
	}
	if err := addControllers(mgr, cfg, &opts); err != nil {
		return nil, err
	}
	return mgr, nil
}

// Run runs the Machine API controllers until ctx ends.
func Run(ctx context.Context, cfg *rest.Config, opts Options) error {
	mgr, err := NewManager(cfg, opts)
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}

func addControllers(mgr manager.Manager, cfg *rest.Config, opts *Options) error {
	ctx := context.Background()
	idx := mgr.GetFieldIndexer()
	for _, f := range []struct {
		obj client.Object
		key string
		fn  client.IndexerFunc
	}{
		{&machinev1.Machine{}, machineProviderIDIndex, indexMachineProviderID},
		{&machinev1.Machine{}, machineInternalIPIndex, indexMachineInternalIP},
		{&corev1.Node{}, nodeProviderIDIndex, indexNodeProviderID},
		{&corev1.Node{}, nodeMachineIndex, indexNodeMachine},
	} {
		if err := idx.IndexField(ctx, f.obj, f.key, f.fn); err != nil {
			return fmt.Errorf("indexing %s: %w", f.key, err)
		}
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	c := mgr.GetClient()
	machines := &machineReconciler{client: c, reader: mgr.GetAPIReader(), actuator: opts.Actuator, recorder: mgr.GetEventRecorderFor("machine-controller"), opts: opts}
	if err := ctrl.NewControllerManagedBy(mgr).Named("machine-controller").For(&machinev1.Machine{}).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(machineRequestOfNode)).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.Concurrency}).Complete(machines); err != nil {
		return err
	}
	drains := &drainReconciler{client: c, reader: mgr.GetAPIReader(), kube: kube, recorder: mgr.GetEventRecorderFor("machine-drain-controller"), opts: opts}
	if err := ctrl.NewControllerManagedBy(mgr).Named("machine-drain-controller").For(&machinev1.Machine{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.Concurrency, RateLimiter: drainRateLimiter(opts)}).Complete(drains); err != nil {
		return err
	}
	links := &nodeLinkReconciler{client: c, namespace: opts.Namespace}
	if err := ctrl.NewControllerManagedBy(mgr).Named("nodelink-controller").For(&corev1.Node{}).
		Watches(&machinev1.Machine{}, handler.EnqueueRequestsFromMapFunc(links.nodesForMachine)).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.Concurrency}).Complete(links); err != nil {
		return err
	}
	sets := &machineSetReconciler{client: c, reader: mgr.GetAPIReader(), recorder: mgr.GetEventRecorderFor("machineset-controller"), opts: opts}
	if err := ctrl.NewControllerManagedBy(mgr).Named("machineset-controller").For(&machinev1.MachineSet{}).
		Watches(&machinev1.Machine{}, handler.EnqueueRequestsFromMapFunc(sets.machineSetsForMachine)).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(sets.machineSetsForNode)).
		Complete(sets); err != nil {
		return err
	}
	cpms := &cpmsReconciler{client: c, reader: mgr.GetAPIReader(), recorder: mgr.GetEventRecorderFor("control-plane-machine-set-operator"), opts: opts}
	if err := ctrl.NewControllerManagedBy(mgr).Named("control-plane-machine-set").For(&cpmsv1.ControlPlaneMachineSet{}).
		Watches(&machinev1.Machine{}, handler.EnqueueRequestsFromMapFunc(cpmsOfMachine)).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(cpms.cpmsOfNode)).
		Complete(cpms); err != nil {
		return err
	}
	// The simulated remediator, where its API is served.
	if _, err := mgr.GetRESTMapper().RESTMapping(RebootRemediationKind.GroupKind(), RebootRemediationKind.Version); err == nil {
		rr := &unstructured.Unstructured{}
		rr.SetGroupVersionKind(RebootRemediationKind)
		rem := &remediator{client: c, kube: kube, recorder: mgr.GetEventRecorderFor("reboot-remediator"), down: opts.RemediationRebootDuration}
		if err := ctrl.NewControllerManagedBy(mgr).Named("reboot-remediator").For(rr).Complete(rem); err != nil {
			return err
		}
	}
	checks := &mhcReconciler{client: c, recorder: mgr.GetEventRecorderFor("machinehealthcheck-controller")}
	return ctrl.NewControllerManagedBy(mgr).Named("machinehealthcheck-controller").For(&machinev1.MachineHealthCheck{}).
		Watches(&machinev1.Machine{}, handler.EnqueueRequestsFromMapFunc(checks.healthChecksFor)).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(checks.healthChecksForNode)).
		Complete(checks)
}

// machineRequestOfNode maps a node to its machine (the nodelink
// annotation): a node that goes away may mean an instance that did.
func machineRequestOfNode(_ context.Context, o client.Object) []reconcile.Request {
	key, ok := MachineOfNode(o)
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: key}}
}

// drainRateLimiter backs failed drains off exponentially, like OpenShift's
// (a drain is slow, so it starts at seconds, not milliseconds).
func drainRateLimiter(opts *Options) workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](opts.DrainBackoffBase, opts.DrainBackoffMax),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}
