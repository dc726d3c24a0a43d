// Package operators reports the ClusterOperators of a release's operator
// workloads, as each operator reports its own in OpenShift: a Deployment
// labelled capstan.dev/cluster-operator=<name> is the operator; while it
// rolls out a new RELEASE_VERSION the ClusterOperator is Progressing, and
// once it has rolled out the ClusterOperator reports the new version.
// capstan's own components (the scheduler, the Machine API, the
// autoscaler) add their health: their ClusterOperator is Available only
// while the component really runs.
//
// Faults are injected with annotations on the Deployment or its
// namespace (the Deployment's win): DelayAnnotation slows the report of a
// new version, StuckAnnotation withholds it, DegradedAnnotation,
// UnavailableAnnotation and NotUpgradeableAnnotation ("Reason: message")
// set those conditions.
package operators

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode"

	configv1 "github.com/openshift/api/config/v1"
	configclient "github.com/openshift/client-go/config/clientset/versioned"
	configinformers "github.com/openshift/client-go/config/informers/externalversions"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/capstan-dev/capstan/internal/cvo"
	"github.com/capstan-dev/capstan/internal/updateservice/demo"
)

// Fault-injection annotations, on an operator's Deployment or namespace.
const (
	// DelayAnnotation ("30s") is how long the operator takes, after its
	// Deployment has rolled out, to report the new version.
	DelayAnnotation = "sim.capstan.dev/operator-delay"
	// StuckAnnotation "true": the operator never reports a new version.
	StuckAnnotation = "sim.capstan.dev/operator-stuck"
	// DegradedAnnotation "Reason: message": Degraded=True.
	DegradedAnnotation = "sim.capstan.dev/operator-degraded"
	// UnavailableAnnotation "Reason: message": Available=False.
	UnavailableAnnotation = "sim.capstan.dev/operator-unavailable"
	// NotUpgradeableAnnotation "Reason: message": Upgradeable=False,
	// which holds minor updates.
	NotUpgradeableAnnotation = "sim.capstan.dev/operator-not-upgradeable"
)

// Health says whether a component capstan runs itself is up; reason and
// message explain when it is not.
type Health func() (ok bool, reason, message string)

// Operand is what an operator capstan runs itself (the Machine Config
// Operator) says of its operands at a release version.
type Operand func(version string) OperandState

// OperandState holds an operator back from reporting a version until its
// operands run it, and adds its own Degraded and Upgradeable.
type OperandState struct {
	AtVersion bool
	// Progressing is the message while not AtVersion.
	Progressing                                 string
	DegradedReason, DegradedMessage             string
	NotUpgradeableReason, NotUpgradeableMessage string
}

// Controller reports ClusterOperators.
type Controller struct {
	kube     kubernetes.Interface
	config   configclient.Interface
	health   map[string]Health
	operands map[string]Operand
	clock    clock.Clock

	deployments appslisters.DeploymentLister
	namespaces  corelisters.NamespaceLister
	queue       workqueue.TypedRateLimitingInterface[string]

	mu sync.Mutex
	// rolledOut is when a ClusterOperator's Deployment was first seen
	// rolled out at a version (for DelayAnnotation).
	rolledOut map[string]time.Time
}

// New returns a controller; health maps ClusterOperator names to the
// health of the component capstan runs for them, operands to what their
// operands say.
func New(kube kubernetes.Interface, config configclient.Interface, health map[string]Health, operands map[string]Operand) *Controller {
	return &Controller{kube: kube, config: config, health: health, operands: operands, clock: clock.RealClock{}, rolledOut: map[string]time.Time{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "cluster-operators"})}
}

// Run reports until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer c.queue.ShutDown()
	kf := informers.NewSharedInformerFactoryWithOptions(c.kube, 10*time.Minute, informers.WithTransform(crcache.TransformStripManagedFields()),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = demo.OperatorLabel }))
	nf := informers.NewSharedInformerFactoryWithOptions(c.kube, 10*time.Minute, informers.WithTransform(crcache.TransformStripManagedFields()))
	cf := configinformers.NewSharedInformerFactoryWithOptions(c.config, 10*time.Minute, configinformers.WithTransform(crcache.TransformStripManagedFields()))
	deps := kf.Apps().V1().Deployments()
	nss := nf.Core().V1().Namespaces()
	cos := cf.Config().V1().ClusterOperators()
	c.deployments, c.namespaces = deps.Lister(), nss.Lister()
	onDeployment := func(obj any) {
		if d, ok := obj.(*appsv1.Deployment); ok {
			c.queue.Add(d.Labels[demo.OperatorLabel])
		}
	}
	if _, err := deps.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onDeployment,
		UpdateFunc: func(_, n any) { onDeployment(n) }, DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			onDeployment(obj)
		}}); err != nil {
		return err
	}
	onNamespace := func(obj any) {
		ns, ok := obj.(*corev1.Namespace)
		if !ok {
			return
		}
		list, _ := c.deployments.Deployments(ns.Name).List(labels.Everything())
		for _, d := range list {
			c.queue.Add(d.Labels[demo.OperatorLabel])
		}
	}
	if _, err := nss.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onNamespace, UpdateFunc: func(_, n any) { onNamespace(n) }}); err != nil {
		return err
	}
	onCO := func(obj any) {
		if co, ok := obj.(*configv1.ClusterOperator); ok {
			c.queue.Add(co.Name)
		}
	}
	if _, err := cos.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onCO, UpdateFunc: func(_, n any) { onCO(n) }}); err != nil {
		return err
	}
	kf.Start(ctx.Done())
	nf.Start(ctx.Done())
	cf.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), deps.Informer().HasSynced, nss.Informer().HasSynced, cos.Informer().HasSynced) {
		return ctx.Err()
	}
	// The health of capstan's own components is looked at again every
	// few seconds: it has no object to watch.
	go wait.UntilWithContext(ctx, func(context.Context) {
		for name := range c.health {
			c.queue.Add(name)
		}
		for name := range c.operands {
			c.queue.Add(name)
		}
	}, 2*time.Second)
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	for {
		name, shutdown := c.queue.Get()
		if shutdown {
			return nil
		}
		after, err := c.sync(ctx, name)
		switch {
		case err != nil:
			klog.FromContext(ctx).V(2).Info("Reporting a ClusterOperator", "clusterOperator", name, "err", err)
			c.queue.AddRateLimited(name)
		case after > 0:
			c.queue.Forget(name)
			c.queue.AddAfter(name, after)
		default:
			c.queue.Forget(name)
		}
		c.queue.Done(name)
	}
}

// reasonMessage splits "Reason: message".
func reasonMessage(v, defaultReason string) (string, string) {
	reason, msg, ok := strings.Cut(v, ":")
	if !ok || strings.TrimSpace(reason) == "" || strings.ContainsFunc(strings.TrimSpace(reason), unicode.IsSpace) {
		return defaultReason, strings.TrimSpace(v)
	}
	return strings.TrimSpace(reason), strings.TrimSpace(msg)
}

// sync reports one ClusterOperator; a positive duration asks to be
// called again then.
func (c *Controller) sync(ctx context.Context, name string) (time.Duration, error) {
	if name == "" {
		return 0, nil
	}
	deps, err := c.deployments.List(labels.SelectorFromSet(labels.Set{demo.OperatorLabel: name}))
	if err != nil || len(deps) == 0 {
		return 0, err
	}
	sort.Slice(deps, func(i, j int) bool { return deps[i].Namespace+"/"+deps[i].Name < deps[j].Namespace+"/"+deps[j].Name })
	dep := deps[0]
	ann := map[string]string{}
	if ns, err := c.namespaces.Get(dep.Namespace); err == nil {
		for k, v := range ns.Annotations {
			ann[k] = v
		}
	}
	for k, v := range dep.Annotations {
		ann[k] = v
	}
	want := ""
	if cs := dep.Spec.Template.Spec.Containers; len(cs) > 0 {
		for _, e := range cs[0].Env {
			if e.Name == demo.VersionEnv {
				want = e.Value
			}
		}
	}
	replicas := int32(1)
	if dep.Spec.Replicas != nil {
		replicas = *dep.Spec.Replicas
	}
	st := dep.Status
	rolledOut := dep.Generation <= st.ObservedGeneration && st.UpdatedReplicas == replicas && st.Replicas == replicas && st.AvailableReplicas == replicas

	cos := c.config.ConfigV1().ClusterOperators()
	co, err := cos.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		co, err = cos.Create(ctx, &configv1.ClusterOperator{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	}
	if err != nil {
		return 0, err
	}
	reported := ""
	for _, v := range co.Status.Versions {
		if v.Name == "operator" {
			reported = v.Version
		}
	}
	available := configv1.ClusterOperatorStatusCondition{Type: configv1.OperatorAvailable, Status: configv1.ConditionTrue, Reason: "AsExpected"}
	if st.AvailableReplicas == 0 {
		if cvo.FindCondition(co.Status.Conditions, configv1.OperatorAvailable) != nil {
			// The operator is down (its pod evicted in a drain, say): it
			// cannot write its ClusterOperator, which keeps its last word.
			return 0, nil
		}
		available.Status, available.Reason = configv1.ConditionFalse, "DeploymentUnavailable"
		available.Message = fmt.Sprintf("deployment %s/%s has no available replicas", dep.Namespace, dep.Name)
	}
	var operand *OperandState
	if fn := c.operands[name]; fn != nil && want != "" {
		s := fn(want)
		operand = &s
	}
	var again time.Duration
	now := c.clock.Now()
	if rolledOut && want != "" && reported != want && ann[StuckAnnotation] != "true" && (operand == nil || operand.AtVersion) {
		delay, _ := time.ParseDuration(ann[DelayAnnotation])
		key := name + "@" + want
		c.mu.Lock()
		first, seen := c.rolledOut[key]
		if !seen {
			first = now
			c.rolledOut[key] = now
		}
		c.mu.Unlock()
		if left := first.Add(delay).Sub(now); left > 0 {
			again = left
		} else {
			reported = want
		}
	}

	status := co.Status.DeepCopy()
	status.Versions = nil
	if reported != "" {
		status.Versions = []configv1.OperandVersion{{Name: "operator", Version: reported}}
	}
	switch h := c.health[name]; {
	case ann[UnavailableAnnotation] != "":
		available.Status = configv1.ConditionFalse
		available.Reason, available.Message = reasonMessage(ann[UnavailableAnnotation], "Unavailable")
	case h != nil:
		if ok, reason, msg := h(); !ok {
			available.Status, available.Reason, available.Message = configv1.ConditionFalse, reason, msg
		}
	}
	progressing := configv1.ClusterOperatorStatusCondition{Type: configv1.OperatorProgressing, Status: configv1.ConditionFalse, Reason: "AsExpected"}
	if want != "" && reported != want {
		progressing.Status, progressing.Reason = configv1.ConditionTrue, "Deploying"
		progressing.Message = fmt.Sprintf("deployment %s/%s is rolling out version %s", dep.Namespace, dep.Name, want)
		if rolledOut {
			progressing.Message = fmt.Sprintf("deployment %s/%s has rolled out; the operator is updating its operands to %s", dep.Namespace, dep.Name, want)
			if operand != nil && !operand.AtVersion {
				progressing.Message = operand.Progressing
			}
		}
	}
	degraded := configv1.ClusterOperatorStatusCondition{Type: configv1.OperatorDegraded, Status: configv1.ConditionFalse, Reason: "AsExpected"}
	if v := ann[DegradedAnnotation]; v != "" {
		degraded.Status = configv1.ConditionTrue
		degraded.Reason, degraded.Message = reasonMessage(v, "Degraded")
	} else if operand != nil && operand.DegradedReason != "" {
		degraded.Status, degraded.Reason, degraded.Message = configv1.ConditionTrue, operand.DegradedReason, operand.DegradedMessage
	}
	upgradeable := configv1.ClusterOperatorStatusCondition{Type: configv1.OperatorUpgradeable, Status: configv1.ConditionTrue, Reason: "AsExpected"}
	if v := ann[NotUpgradeableAnnotation]; v != "" {
		upgradeable.Status = configv1.ConditionFalse
		upgradeable.Reason, upgradeable.Message = reasonMessage(v, "NotUpgradeable")
	} else if operand != nil && operand.NotUpgradeableReason != "" {
		upgradeable.Status, upgradeable.Reason, upgradeable.Message = configv1.ConditionFalse, operand.NotUpgradeableReason, operand.NotUpgradeableMessage
	}
	for _, cond := range []configv1.ClusterOperatorStatusCondition{available, progressing, degraded, upgradeable} {
		cvo.SetCondition(&status.Conditions, cond, metav1.NewTime(now))
	}
	status.RelatedObjects = []configv1.ObjectReference{
		{Resource: "namespaces", Name: dep.Namespace},
		{Group: "apps", Resource: "deployments", Namespace: dep.Namespace, Name: dep.Name},
	}
	if equality.Semantic.DeepEqual(&co.Status, status) {
		return again, nil
	}
	co.Status = *status
	_, err = cos.UpdateStatus(ctx, co, metav1.UpdateOptions{})
	return again, err
}
