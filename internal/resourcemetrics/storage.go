package resourcemetrics

import (
	"context"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/metrics/pkg/apis/metrics"
)

var everything = labels.Everything()

func metav1Accessor(obj runtime.Object) (metav1.Object, error) { return meta.Accessor(obj) }

// selection is a list request's label and field selectors.
type selection struct {
	labels labels.Selector
	fields fields.Selector
}

func selectionOf(opts *metainternalversion.ListOptions) selection {
	s := selection{labels: everything, fields: fields.Everything()}
	if opts != nil && opts.LabelSelector != nil {
		s.labels = opts.LabelSelector
	}
	if opts != nil && opts.FieldSelector != nil {
		s.fields = opts.FieldSelector
	}
	return s
}

func (s selection) matches(m metav1.Object) bool {
	return s.labels.Matches(labels.Set(m.GetLabels())) &&
		s.fields.Matches(fields.Set{"metadata.name": m.GetName(), "metadata.namespace": m.GetNamespace()})
}

// table is the server-side printing of both kinds (kubectl get
// podmetrics / nodemetrics).
type table struct{}

var tableColumns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "Name of the resource"},
	{Name: "CPU", Type: "string", Description: "CPU usage"},
	{Name: "Memory", Type: "string", Description: "Memory usage (working set)"},
	{Name: "Window", Type: "string", Description: "Interval the usage was measured over"},
}

func (table) ConvertToTable(_ context.Context, obj runtime.Object, _ runtime.Object) (*metav1.Table, error) {
	t := &metav1.Table{ColumnDefinitions: tableColumns}
	row := func(o runtime.Object, name string, usage corev1.ResourceList, window time.Duration) {
		t.Rows = append(t.Rows, metav1.TableRow{
			Cells:  []any{name, usage.Cpu().String(), usage.Memory().String(), duration.HumanDuration(window)},
			Object: runtime.RawExtension{Object: o},
		})
	}
	switch o := obj.(type) {
	case *metrics.NodeMetrics:
		row(o, o.Name, o.Usage, o.Window.Duration)
	case *metrics.NodeMetricsList:
		t.ResourceVersion = o.ResourceVersion
		for i := range o.Items {
			row(&o.Items[i], o.Items[i].Name, o.Items[i].Usage, o.Items[i].Window.Duration)
		}
	case *metrics.PodMetrics:
		row(o, o.Name, podTotal(o), o.Window.Duration)
	case *metrics.PodMetricsList:
		t.ResourceVersion = o.ResourceVersion
		for i := range o.Items {
			row(&o.Items[i], o.Items[i].Name, podTotal(&o.Items[i]), o.Items[i].Window.Duration)
		}
	default:
		return nil, apierrors.NewInternalError(errUnknownObject)
	}
	return t, nil
}

func podTotal(p *metrics.PodMetrics) corev1.ResourceList {
	total := corev1.ResourceList{}
	for _, c := range p.Containers {
		for r, q := range c.Usage {
			sum := total[r]
			sum.Add(q)
			total[r] = sum
		}
	}
	return total
}

// nodeStorage serves nodes.metrics.k8s.io.
type nodeStorage struct {
	table
	m *model
}

var (
	_ rest.Storage      = &nodeStorage{}
	_ rest.KindProvider = &nodeStorage{}
	_ rest.Scoper       = &nodeStorage{}
	_ rest.Getter       = &nodeStorage{}
	_ rest.Lister       = &nodeStorage{}
)

func (*nodeStorage) New() runtime.Object     { return &metrics.NodeMetrics{} }
func (*nodeStorage) Destroy()                {}
func (*nodeStorage) Kind() string            { return "NodeMetrics" }
func (*nodeStorage) NamespaceScoped() bool   { return false }
func (*nodeStorage) GetSingularName() string { return "node" }
func (*nodeStorage) NewList() runtime.Object { return &metrics.NodeMetricsList{} }
func (s *nodeStorage) nodeMetrics(sm *sample, n *corev1.Node) *metrics.NodeMetrics {
	usage, ok := sm.nodes[n.Name]
	if !ok {
		return nil
	}
	return &metrics.NodeMetrics{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels, CreationTimestamp: sm.at},
		Timestamp:  sm.at, Window: metav1.Duration{Duration: s.m.window}, Usage: usage,
	}
}

func (s *nodeStorage) Get(_ context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	n, err := s.m.nodes.Get(name)
	if err != nil {
		return nil, notFound("nodes", name, err)
	}
	sm, err := s.m.scrape()
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if nm := s.nodeMetrics(sm, n); nm != nil {
		return nm, nil
	}
	return nil, apierrors.NewNotFound(metrics.Resource("nodes"), name)
}

func (s *nodeStorage) List(_ context.Context, opts *metainternalversion.ListOptions) (runtime.Object, error) {
	sel := selectionOf(opts)
	nodes, err := s.m.nodes.List(sel.labels)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	sm, err := s.m.scrape()
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	out := &metrics.NodeMetricsList{}
	for _, n := range nodes {
		if !sel.matches(n) {
			continue
		}
		if nm := s.nodeMetrics(sm, n); nm != nil {
			out.Items = append(out.Items, *nm)
		}
	}
	sort.Slice(out.Items, func(i, j int) bool { return out.Items[i].Name < out.Items[j].Name })
	return out, nil
}

// podStorage serves pods.metrics.k8s.io.
type podStorage struct {
	table
	m *model
}

var (
	_ rest.Storage      = &podStorage{}
	_ rest.KindProvider = &podStorage{}
	_ rest.Scoper       = &podStorage{}
	_ rest.Getter       = &podStorage{}
	_ rest.Lister       = &podStorage{}
)

func (*podStorage) New() runtime.Object     { return &metrics.PodMetrics{} }
func (*podStorage) Destroy()                {}
func (*podStorage) Kind() string            { return "PodMetrics" }
func (*podStorage) NamespaceScoped() bool   { return true }
func (*podStorage) GetSingularName() string { return "pod" }
func (*podStorage) NewList() runtime.Object { return &metrics.PodMetricsList{} }

func (s *podStorage) podMetrics(sm *sample, p *corev1.Pod) *metrics.PodMetrics {
	ps, ok := sm.pods[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}]
	if !ok || ps.pod.UID != p.UID {
		return nil
	}
	pm := &metrics.PodMetrics{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels, CreationTimestamp: sm.at},
		Timestamp:  sm.at, Window: metav1.Duration{Duration: s.m.window},
	}
	for _, c := range ps.containers {
		pm.Containers = append(pm.Containers, metrics.ContainerMetrics{Name: c.name, Usage: c.usage})
	}
	return pm
}

func (s *podStorage) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	ns := genericapirequest.NamespaceValue(ctx)
	p, err := s.m.pods.Pods(ns).Get(name)
	if err != nil {
		return nil, notFound("pods", name, err)
	}
	sm, err := s.m.scrape()
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if pm := s.podMetrics(sm, p); pm != nil {
		return pm, nil
	}
	return nil, apierrors.NewNotFound(metrics.Resource("pods"), name)
}

func (s *podStorage) List(ctx context.Context, opts *metainternalversion.ListOptions) (runtime.Object, error) {
	sel := selectionOf(opts)
	ns := genericapirequest.NamespaceValue(ctx)
	pods, err := s.m.pods.Pods(ns).List(sel.labels)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	sm, err := s.m.scrape()
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	out := &metrics.PodMetricsList{}
	for _, p := range pods {
		if !sel.matches(p) {
			continue
		}
		if pm := s.podMetrics(sm, p); pm != nil {
			out.Items = append(out.Items, *pm)
		}
	}
	sort.Slice(out.Items, func(i, j int) bool {
		if out.Items[i].Namespace != out.Items[j].Namespace {
			return out.Items[i].Namespace < out.Items[j].Namespace
		}
		return out.Items[i].Name < out.Items[j].Name
	})
	return out, nil
}

func notFound(resource, name string, err error) error {
	if apierrors.IsNotFound(err) {
		return apierrors.NewNotFound(metrics.Resource(resource), name)
	}
	return apierrors.NewInternalError(err)
}
