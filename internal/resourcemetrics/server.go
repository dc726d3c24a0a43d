package resourcemetrics

import (
	"github.com/capstan-dev/capstan/internal/certs"
	"github.com/capstan-dev/capstan/internal/namespaces"

	"context"
	"errors"
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	clientrest "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/klog/v2"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	generatedopenapi "k8s.io/kubernetes/pkg/generated/openapi"
	"k8s.io/metrics/pkg/apis/metrics"
	metricsinstall "k8s.io/metrics/pkg/apis/metrics/install"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// Where OpenShift runs its metrics server, and the APIService that routes
// metrics.k8s.io to it.
const (
	Namespace   = "openshift-monitoring"
	ServiceName = "metrics-server"
	APIService  = "v1beta1.metrics.k8s.io"
)

var errUnknownObject = errors.New("not a metrics object")

// Options configure the metrics server.
type Options struct {
	// Window is the interval each sample covers, metrics-server's
	// --metric-resolution. The HorizontalPodAutoscaler ignores a new
	// pod's CPU sample until the pod has been ready for one window.
	Window time.Duration
	// Clock stamps the samples (tests).
	Clock clock.PassiveClock
	// Informers, when set, is a factory of pod and node informers shared
	// with the other components of the process, which its owner starts
	// and stops: the metrics server reads pods and nodes through it and
	// decodes no event of theirs a second time. Nothing it reads there
	// may be changed.
	Informers informers.SharedInformerFactory
}

// DefaultOptions are metrics-server's defaults.
func DefaultOptions() Options {
	return Options{Window: 15 * time.Second}
}

// Run serves the resource metrics API on a loopback port and registers it
// with the cluster's aggregator until ctx ends. kubeconfig is the file its
// delegated authentication and authorization (TokenReview,
// SubjectAccessReview, the front-proxy CA) read the cluster with.
func Run(ctx context.Context, cfg *clientrest.Config, kubeconfig string, opts Options) error {
	if opts.Window <= 0 {
		return fmt.Errorf("metrics window must be positive, got %s", opts.Window)
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	// Events go as JSON; the watches are protobuf, as for every
	// component of capstan's that reads Kubernetes' own types.
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	watcher, err := kubernetes.NewForConfig(protobuf(cfg))
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactoryWithOptions(watcher, 0, informers.WithTransform(keepWhatIsRead))
	podsAndNodes := factory
	if opts.Informers != nil {
		podsAndNodes = opts.Informers
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	m := &model{
		listers: listers{
			pods:         podsAndNodes.Core().V1().Pods().Lister(),
			nodes:        podsAndNodes.Core().V1().Nodes().Lister(),
			replicaSets:  factory.Apps().V1().ReplicaSets().Lister(),
			deployments:  factory.Apps().V1().Deployments().Lister(),
			statefulSets: factory.Apps().V1().StatefulSets().Lister(),
		},
		clock:    opts.Clock,
		window:   opts.Window,
		recorder: broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "metrics-server"}),
		reported: map[string]bool{},
	}
	ctx, cancel := context.WithCancel(ctx)
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	defer cancel()
	if podsAndNodes != factory {
		// Started by its owner already; the informers asked for here
		// start with this.
		podsAndNodes.Start(ctx.Done())
		for typ, ok := range podsAndNodes.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return fmt.Errorf("metrics server: %v cache did not sync", typ)
			}
		}
	}
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("metrics server: %v cache did not sync", typ)
		}
	}

	ca, _, err := certs.NewCA("metrics-server-ca")
	if err != nil {
		return err
	}
	host := ServiceName + "." + Namespace + ".svc"
	certPEM, keyPEM, err := ca.Issue(certs.LeafSpec{CommonName: host, DNSNames: []string{host, "localhost"},
		IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("metrics server: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	server, err := newServer(m, ln, certPEM, keyPEM, kubeconfig)
	if err != nil {
		ln.Close()
		return err
	}
	done := make(chan error, 1)
	go func() { done <- server.PrepareRun().RunWithContext(ctx) }()
	if err := register(ctx, cfg, client, int32(port), ca.CertPEM); err != nil {
		return errors.Join(err, <-done)
	}
	klog.FromContext(ctx).Info("Serving the resource metrics API", "address", ln.Addr().String(), "apiservice", APIService)
	return <-done
}

// newServer builds the aggregated API server: metrics.k8s.io/v1beta1
// nodes and pods, read-only, behind delegated authentication and
// authorization as every aggregated API server is.
func newServer(m *model, ln net.Listener, certPEM, keyPEM []byte, kubeconfig string) (*genericapiserver.GenericAPIServer, error) {
	sch := runtime.NewScheme()
	metricsinstall.Install(sch)
	metav1.AddToGroupVersion(sch, schema.GroupVersion{Version: "v1"})
	sch.AddUnversionedTypes(schema.GroupVersion{Version: "v1"},
		&metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{}, &metav1.APIGroup{}, &metav1.APIResourceList{})
	codecs := serializer.NewCodecFactory(sch)

	cfg := genericapiserver.NewRecommendedConfig(codecs)
	cert, err := dynamiccertificates.NewStaticCertKeyContent("metrics-server", certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	serving := genericoptions.NewSecureServingOptions().WithLoopback()
	serving.Listener = ln
	serving.BindPort = ln.Addr().(*net.TCPAddr).Port
	serving.ServerCert.GeneratedCert = cert
	if err := serving.ApplyTo(&cfg.SecureServing, &cfg.LoopbackClientConfig); err != nil {
		return nil, fmt.Errorf("metrics server serving: %w", err)
	}
	authn := genericoptions.NewDelegatingAuthenticationOptions()
	authn.RemoteKubeConfigFile = kubeconfig
	if err := authn.ApplyTo(&cfg.Authentication, cfg.SecureServing, nil); err != nil {
		return nil, fmt.Errorf("metrics server authentication: %w", err)
	}
	authz := genericoptions.NewDelegatingAuthorizationOptions()
	authz.RemoteKubeConfigFile = kubeconfig
	if err := authz.ApplyTo(&cfg.Authorization); err != nil {
		return nil, fmt.Errorf("metrics server authorization: %w", err)
	}
	namer := openapinamer.NewDefinitionNamer(sch)
	cfg.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(generatedopenapi.GetOpenAPIDefinitions, namer)
	cfg.OpenAPIConfig.Info.Title = "metrics-server"
	cfg.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(generatedopenapi.GetOpenAPIDefinitions, namer)
	cfg.OpenAPIV3Config.Info.Title = "metrics-server"
	cfg.ExternalAddress = ln.Addr().String()
	cfg.EffectiveVersion = basecompatibility.NewEffectiveVersionFromString(kubeVersion, "", "")
	// Nothing to drain: the requests are short reads.
	cfg.ShutdownDelayDuration = 0
	server, err := cfg.Complete().New("metrics-server", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, err
	}
	group := genericapiserver.NewDefaultAPIGroupInfo(metrics.GroupName, sch, metav1.ParameterCodec, codecs)
	group.VersionedResourcesStorageMap["v1beta1"] = map[string]rest.Storage{
		"nodes": &nodeStorage{m: m},
		"pods":  &podStorage{m: m},
	}
	if err := server.InstallAPIGroup(&group); err != nil {
		return nil, err
	}
	return server, nil
}

// kubeVersion is the Kubernetes minor the embedded components are.
const kubeVersion = "1.36"

// Preinstall creates, with the installer's rights (cfg), what
// metrics-server then points at itself: its Service and the APIService
// v1beta1.metrics.k8s.io, until then without a port or CA it serves.
// RBAC cannot grant the create of one APIService by name, and a
// component that may create any could claim any group the API server
// does not serve; so metrics-server keeps get and update on its own
// two objects, and the installer makes them. Objects that exist are
// left as they are.
func Preinstall(ctx context.Context, cfg *clientrest.Config) error {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := namespaces.Ensure(ctx, client, Namespace); err != nil {
		return err
	}
	svc := service(443)
	if _, err := client.CoreV1().Services(Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating service %s/%s: %w", Namespace, ServiceName, err)
	}
	agg, err := aggregator.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if _, err := agg.ApiregistrationV1().APIServices().Create(ctx, apiService(443, nil), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating APIService %s: %w", APIService, err)
	}
	return nil
}

// service is metrics-server's Service: an ExternalName naming the local
// host (a loopback address cannot be an endpoint) on port.
func service(port int32) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: ServiceName, Namespace: Namespace, Labels: map[string]string{"app.kubernetes.io/name": ServiceName}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost",
			Ports: []corev1.ServicePort{{Name: "https", Port: port, TargetPort: intstr.FromInt32(port), Protocol: corev1.ProtocolTCP}}},
	}
}

func apiService(port int32, caPEM []byte) *apiregistrationv1.APIService {
	return &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: APIService},
		Spec: apiregistrationv1.APIServiceSpec{
			Group: metrics.GroupName, Version: "v1beta1",
			Service:              &apiregistrationv1.ServiceReference{Namespace: Namespace, Name: ServiceName, Port: ptr.To(port)},
			CABundle:             caPEM,
			GroupPriorityMinimum: 100,
			VersionPriority:      100,
		},
	}
}

// register points the aggregator at this server: the Service and the
// APIService Preinstall made get this run's port and CA.
func register(ctx context.Context, cfg *clientrest.Config, client kubernetes.Interface, port int32, caPEM []byte) error {
	services := client.CoreV1().Services(Namespace)
	cur, err := services.Get(ctx, ServiceName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("service %s/%s does not exist: the installer creates it (resourcemetrics.Preinstall), as metrics-server may not create services", Namespace, ServiceName)
	}
	if err != nil {
		return err
	}
	want := service(port)
	cur.Spec.Type, cur.Spec.ExternalName, cur.Spec.Ports = want.Spec.Type, want.Spec.ExternalName, want.Spec.Ports
	cur.Spec.ClusterIP, cur.Spec.ClusterIPs, cur.Spec.Selector = "", nil, nil
	if _, err := services.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating service %s/%s: %w", Namespace, ServiceName, err)
	}
	agg, err := aggregator.NewForConfig(cfg)
	if err != nil {
		return err
	}
	apis := agg.ApiregistrationV1().APIServices()
	api, err := apis.Get(ctx, APIService, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("APIService %s does not exist: the installer creates it (resourcemetrics.Preinstall), as metrics-server may not create APIServices", APIService)
	}
	if err != nil {
		return err
	}
	api.Spec = apiService(port, caPEM).Spec
	if _, err := apis.Update(ctx, api, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("registering APIService %s: %w", APIService, err)
	}
	return nil
}

// keepWhatIsRead keeps of a pod what the model reads: its metadata (less
// managedFields), node, phase and container names, for the cache holds
// every pod of the cluster; of other objects all but managedFields.
func keepWhatIsRead(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		if m, err := meta.Accessor(obj); err == nil {
			m.SetManagedFields(nil)
		}
		return obj, nil
	}
	kept := &corev1.Pod{ObjectMeta: p.ObjectMeta, Spec: corev1.PodSpec{NodeName: p.Spec.NodeName}, Status: corev1.PodStatus{Phase: p.Status.Phase}}
	kept.ManagedFields = nil
	kept.Spec.Containers = make([]corev1.Container, len(p.Spec.Containers))
	for i, c := range p.Spec.Containers {
		kept.Spec.Containers[i].Name = c.Name
	}
	return kept, nil
}

// protobuf is cfg speaking protobuf, which Kubernetes' own types decode
// from at a fraction of JSON's cost.
func protobuf(cfg *clientrest.Config) *clientrest.Config {
	c := clientrest.CopyConfig(cfg)
	c.ContentType = "application/vnd.kubernetes.protobuf"
	c.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	return c
}
