package cluster

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"

	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/capstan-dev/capstan/internal/controlplane"
	"github.com/capstan-dev/capstan/internal/waitfor"
)

// Where OpenShift serves its cluster's alerts and queries: the
// thanos-querier Route in openshift-monitoring, which `oc adm upgrade
// status` reads.
const (
	MonitoringNamespace = "openshift-monitoring"
	ThanosQuerierName   = "thanos-querier"
	// adminServiceAccount's token, in the admin kubeconfig, is the bearer
	// token oc presents to the thanos-querier Route.
	adminServiceAccount = "capstan-admin"
)

// RouteResource is route.openshift.io's Route.
var RouteResource = schema.GroupVersionResource{Group: "route.openshift.io", Version: "v1", Resource: "routes"}

// startThanosQuerier serves the Prometheus API over TLS, with the cluster
// CA's certificate, to bearer tokens the API server accepts and allows
// to get namespaces (as the oauth-proxy in front of OpenShift's
// thanos-querier asks), and publishes it as the thanos-querier Route.
func (c *Cluster) startThanosQuerier(ctx, runCtx context.Context) error {
	pki := c.ControlPlane.DataDir().PKIDir()
	ca, err := controlplane.LoadOrCreateCA(filepath.Join(pki, "ca.crt"), filepath.Join(pki, "ca.key"), "capstan-ca")
	if err != nil {
		return err
	}
	host := ThanosQuerierName + "." + MonitoringNamespace + ".svc"
	certFile, keyFile := filepath.Join(pki, "thanos-querier.crt"), filepath.Join(pki, "thanos-querier.key")
	if err := ca.EnsureLeaf(certFile, keyFile, controlplane.LeafSpec{CommonName: host, DNSNames: []string{host, "localhost"},
		IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true}); err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.opts.Monitoring.ThanosAddress)
	if err != nil {
		// An extra, as the metrics endpoint: a busy port is a warning.
		c.Warnings = append(c.Warnings, fmt.Sprintf("thanos-querier %s: %v", c.opts.Monitoring.ThanosAddress, err))
		return nil
	}
	authID, err := c.as(ctx, "thanos-querier")
	if err != nil {
		return err
	}
	auth := newBearerAuth(authID.kube)
	srv := &http.Server{Handler: auth.wrap(c.monitor.Handler()), ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	c.run(runCtx, "thanos-querier", func(ctx context.Context) error {
		go func() {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	c.ThanosQuerierURL = "https://" + ln.Addr().String()
	if err := c.publishThanosRoute(ctx, ln.Addr().String()); err != nil {
		return fmt.Errorf("the thanos-querier Route: %w", err)
	}
	return c.ensureAdminToken(ctx)
}

// publishThanosRoute makes the thanos-querier Service and Route, the
// Route admitted at addr.
func (c *Cluster) publishThanosRoute(ctx context.Context, addr string) error {
	if err := ensureNamespace(ctx, c, MonitoringNamespace); err != nil {
		return err
	}
	_, portStr, _ := net.SplitHostPort(addr)
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return fmt.Errorf("the thanos-querier address %s: %w", addr, err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: ThanosQuerierName, Namespace: MonitoringNamespace},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost",
			Ports: []corev1.ServicePort{{Name: "web", Port: 9091, TargetPort: intstr.FromInt32(int32(port)), Protocol: corev1.ProtocolTCP}}}}
	if _, err := c.Client.CoreV1().Services(MonitoringNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		return err
	}
	routes := dyn.Resource(RouteResource).Namespace(MonitoringNamespace)
	route := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "route.openshift.io/v1", "kind": "Route",
		"metadata": map[string]any{"name": ThanosQuerierName, "namespace": MonitoringNamespace},
		"spec": map[string]any{
			"host":           ThanosQuerierName + "-" + MonitoringNamespace + ".apps.capstan.local",
			"to":             map[string]any{"kind": "Service", "name": ThanosQuerierName, "weight": int64(100)},
			"port":           map[string]any{"targetPort": "web"},
			"tls":            map[string]any{"termination": "reencrypt", "insecureEdgeTerminationPolicy": "Redirect"},
			"wildcardPolicy": "None",
		},
	}}
	got, err := routes.Create(ctx, route, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		got, err = routes.Get(ctx, ThanosQuerierName, metav1.GetOptions{})
	}
	if err != nil {
		return err
	}
	// The router's admission: where the Route is served, which oc asks
	// for (host and port, capstan having no router on 443).
	ingress := []any{map[string]any{
		"host": addr, "routerName": "default", "wildcardPolicy": "None",
		"conditions": []any{map[string]any{"type": "Admitted", "status": "True", "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}},
	}}
	if err := unstructured.SetNestedSlice(got.Object, ingress, "status", "ingress"); err != nil {
		return err
	}
	_, err = routes.UpdateStatus(ctx, got, metav1.UpdateOptions{})
	return err
}

// ensureAdminToken gives the admin kubeconfig a bearer token (the
// capstan-admin ServiceAccount's, bound to cluster-admin), which oc
// presents to the thanos-querier Route; the client certificate stays
// what authenticates to the API server.
func (c *Cluster) ensureAdminToken(ctx context.Context) error {
	ns := "kube-system"
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: adminServiceAccount, Namespace: ns}}
	if _, err := c.Client.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: adminServiceAccount},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: adminServiceAccount, Namespace: ns}}}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: adminServiceAccount + "-token", Namespace: ns,
		Annotations: map[string]string{corev1.ServiceAccountNameKey: adminServiceAccount}}, Type: corev1.SecretTypeServiceAccountToken}
	if _, err := c.Client.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	var token string
	err := waitfor.Poll(ctx, 100*time.Millisecond, time.Minute, waitfor.Simple(func(ctx context.Context) (bool, string) {
		s, err := c.Client.CoreV1().Secrets(ns).Get(ctx, secret.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		token = string(s.Data[corev1.ServiceAccountTokenKey])
		return token != "", "the token controller has not filled " + secret.Name
	}))
	if err != nil {
		return err
	}
	path := c.ControlPlane.KubeconfigPath()
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return err
	}
	ctxName := cfg.Contexts[cfg.CurrentContext]
	if ctxName == nil || cfg.AuthInfos[ctxName.AuthInfo] == nil {
		return fmt.Errorf("%s has no current user", path)
	}
	c.adminToken = token
	if cfg.AuthInfos[ctxName.AuthInfo].Token == token {
		return nil
	}
	cfg.AuthInfos[ctxName.AuthInfo].Token = token
	return clientcmd.WriteToFile(*cfg, path)
}

// bearerAuth lets through requests whose bearer token the API server
// authenticates (TokenReview) and allows to get namespaces
// (SubjectAccessReview). Answers are kept in a bounded cache, as
// kube-rbac-proxy's delegating authenticator keeps them: an allowed
// token a minute, a refused one 10 s, at most authCacheSize tokens, the
// least recently used going first, so a stream of made-up tokens costs
// reviews but no memory.
type bearerAuth struct {
	client kubernetes.Interface
	cache  *cache.LRUExpireCache
}

const (
	authCacheSize   = 1024
	authAllowedTTL  = time.Minute
	authRefusedTTL  = 10 * time.Second
	authReviewLimit = 10 * time.Second
)

func newBearerAuth(client kubernetes.Interface) *bearerAuth {
	return &bearerAuth{client: client, cache: cache.NewLRUExpireCache(authCacheSize)}
}

type authResult struct {
	status  int
	message string
}

func (a *bearerAuth) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || token == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="thanos-querier"`)
			http.Error(w, "Unauthorized: a bearer token is required", http.StatusUnauthorized)
			return
		}
		res := a.check(r.Context(), token)
		if res.status != http.StatusOK {
			http.Error(w, res.message, res.status)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (a *bearerAuth) check(ctx context.Context, token string) authResult {
	key := sha256.Sum256([]byte(token))
	if res, ok := a.cache.Get(key); ok {
		return res.(authResult)
	}
	ctx, cancel := context.WithTimeout(ctx, authReviewLimit)
	defer cancel()
	res := a.review(ctx, token)
	switch res.status {
	case http.StatusOK:
		a.cache.Add(key, res, authAllowedTTL)
	case http.StatusUnauthorized, http.StatusForbidden:
		a.cache.Add(key, res, authRefusedTTL)
	}
	return res
}

func (a *bearerAuth) review(ctx context.Context, token string) authResult {
	tr, err := a.client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return authResult{http.StatusInternalServerError, "authenticating the token: " + err.Error()}
	}
	if !tr.Status.Authenticated {
		return authResult{http.StatusUnauthorized, "Unauthorized: the token is not valid"}
	}
	u := tr.Status.User
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	sar, err := a.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
		ResourceAttributes: &authzv1.ResourceAttributes{Verb: "get", Resource: "namespaces"},
	}}, metav1.CreateOptions{})
	if err != nil {
		return authResult{http.StatusInternalServerError, "authorizing the user: " + err.Error()}
	}
	if !sar.Status.Allowed {
		return authResult{http.StatusForbidden, fmt.Sprintf("Forbidden: user %q cannot get namespaces", u.Username)}
	}
	return authResult{http.StatusOK, ""}
}
