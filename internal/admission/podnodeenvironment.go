package admission

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	corev1listers "k8s.io/client-go/listers/core/v1"
	api "k8s.io/kubernetes/pkg/apis/core"
)

// PodNodeEnvironmentPluginName is OpenShift's name of the plugin that
// merges a project's node selector into its pods.
const PodNodeEnvironmentPluginName = "scheduling.openshift.io/OriginPodNodeEnvironment"

// ProjectNodeSelectorAnnotation is a project's node selector: every pod of
// the namespace is placed on nodes it selects. An empty value selects
// every node; without it the cluster's default applies.
const ProjectNodeSelectorAnnotation = "openshift.io/node-selector"

// schedulers is the cluster's Scheduler configuration, whose
// spec.defaultNodeSelector is the node selector of projects without one.
var schedulers = schema.GroupVersionResource{Group: "config.openshift.io", Version: "v1", Resource: "schedulers"}

// RegisterPodNodeEnvironment registers the plugin with an apiserver's
// admission plugins.
func RegisterPodNodeEnvironment(plugins *admission.Plugins) {
	plugins.Register(PodNodeEnvironmentPluginName, func(io.Reader) (admission.Interface, error) {
		return &podNodeEnvironment{Handler: admission.NewHandler(admission.Create)}, nil
	})
}

// podNodeEnvironment is OpenShift's OriginPodNodeEnvironment: on a pod's
// creation, the node selector of its project (its namespace's
// openshift.io/node-selector, else the cluster's default) is merged into
// the pod's; a pod that asks for another value of one of its labels is
// forbidden.
type podNodeEnvironment struct {
	*admission.Handler
	namespaces corev1listers.NamespaceLister
	synced     func() bool
	dynamic    dynamic.Interface

	mu sync.Mutex
	// defaultSelector is the cluster's default, read at most every
	// defaultTTL.
	defaultSelector string
	defaultRead     time.Time
}

const defaultTTL = 5 * time.Second

var (
	_ admission.MutationInterface       = &podNodeEnvironment{}
	_ admission.InitializationValidator = &podNodeEnvironment{}
)

func (p *podNodeEnvironment) SetExternalKubeInformerFactory(f informers.SharedInformerFactory) {
	ns := f.Core().V1().Namespaces()
	p.namespaces = ns.Lister()
	p.synced = ns.Informer().HasSynced
}

func (p *podNodeEnvironment) SetDynamicClient(c dynamic.Interface) { p.dynamic = c }

func (p *podNodeEnvironment) ValidateInitialization() error {
	if p.namespaces == nil || p.dynamic == nil {
		return errors.New(PodNodeEnvironmentPluginName + " needs a namespace lister and a dynamic client")
	}
	return nil
}

func (p *podNodeEnvironment) Admit(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != api.Resource("pods") || a.GetSubresource() != "" {
		return nil
	}
	pod, ok := a.GetObject().(*api.Pod)
	if !ok {
		return nil
	}
	project, err := p.projectSelector(ctx, a.GetNamespace())
	if err != nil {
		return apierrors.NewForbidden(a.GetResource().GroupResource(), pod.Name, err)
	}
	if SelectorsConflict(project, pod.Spec.NodeSelector) {
		return apierrors.NewForbidden(a.GetResource().GroupResource(), pod.Name, errors.New("pod node label selector conflicts with its project node label selector"))
	}
	if len(project) == 0 {
		return nil
	}
	merged := make(map[string]string, len(project)+len(pod.Spec.NodeSelector))
	for k, v := range project {
		merged[k] = v
	}
	for k, v := range pod.Spec.NodeSelector {
		merged[k] = v
	}
	pod.Spec.NodeSelector = merged
	return nil
}

// projectSelector is the node selector of a namespace's pods.
func (p *podNodeEnvironment) projectSelector(ctx context.Context, namespace string) (map[string]string, error) {
	ns, err := p.namespaces.Get(namespace)
	if apierrors.IsNotFound(err) || (err == nil && !p.synced()) {
		// A namespace created a moment ago may not be in the cache yet.
		var live *corev1.Namespace
		live, err = p.liveNamespace(ctx, namespace)
		ns = live
	}
	if err != nil {
		return nil, err
	}
	if sel, ok := ns.Annotations[ProjectNodeSelectorAnnotation]; ok {
		m, err := ParseNodeSelector(sel)
		if err != nil {
			return nil, fmt.Errorf("namespace %s: annotation %s: %w", namespace, ProjectNodeSelectorAnnotation, err)
		}
		return m, nil
	}
	sel, err := p.clusterDefault(ctx)
	if err != nil {
		return nil, err
	}
	m, err := ParseNodeSelector(sel)
	if err != nil {
		return nil, fmt.Errorf("schedulers.config.openshift.io cluster: spec.defaultNodeSelector: %w", err)
	}
	return m, nil
}

func (p *podNodeEnvironment) liveNamespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	u, err := p.dynamic.Resource(corev1.SchemeGroupVersion.WithResource("namespaces")).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	ns := &corev1.Namespace{}
	ns.Name = u.GetName()
	ns.Annotations = u.GetAnnotations()
	return ns, nil
}

// clusterDefault is the Scheduler configuration's defaultNodeSelector
// ("" without one).
func (p *podNodeEnvironment) clusterDefault(ctx context.Context) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.defaultRead.IsZero() && time.Since(p.defaultRead) < defaultTTL {
		return p.defaultSelector, nil
	}
	u, err := p.dynamic.Resource(schedulers).Get(ctx, "cluster", metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		p.defaultSelector = ""
	case err != nil:
		return "", fmt.Errorf("reading the cluster's default node selector: %w", err)
	default:
		p.defaultSelector, _, _ = unstructured.NestedString(u.Object, "spec", "defaultNodeSelector")
	}
	p.defaultRead = time.Now()
	return p.defaultSelector, nil
}

// ParseNodeSelector reads a project node selector, as OpenShift writes
// them: comma-separated key=value pairs, "" for none.
func ParseNodeSelector(s string) (map[string]string, error) {
	m := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return m, nil
	}
	for _, term := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(term), "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return nil, fmt.Errorf("%q: %q is not key=value", s, term)
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, fmt.Errorf("%q: label key %q: %s", s, k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return nil, fmt.Errorf("%q: label value %q: %s", s, v, strings.Join(errs, "; "))
		}
		if old, dup := m[k]; dup && old != v {
			return nil, fmt.Errorf("%q: %s given twice", s, k)
		}
		m[k] = v
	}
	return m, nil
}

// SelectorsConflict reports whether two node selectors ask for different
// values of one label.
func SelectorsConflict(a, b map[string]string) bool {
	for k, v := range a {
		if w, ok := b[k]; ok && w != v {
			return true
		}
	}
	return false
}
