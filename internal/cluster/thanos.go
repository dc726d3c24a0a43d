package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/capstan-dev/capstan/internal/atomicfile"
	"github.com/capstan-dev/capstan/internal/bearerauth"
	"github.com/capstan-dev/capstan/internal/certs"
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
	ca, err := certs.LoadOrCreateCA(filepath.Join(pki, "ca.crt"), filepath.Join(pki, "ca.key"), "capstan-ca")
	if err != nil {
		return err
	}
	host := ThanosQuerierName + "." + MonitoringNamespace + ".svc"
	certFile, keyFile := filepath.Join(pki, "thanos-querier.crt"), filepath.Join(pki, "thanos-querier.key")
	if err := ca.EnsureLeaf(certFile, keyFile, certs.LeafSpec{CommonName: host, DNSNames: []string{host, "localhost"},
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
	// As the oauth-proxy in front of OpenShift's thanos-querier asks.
	auth := bearerauth.New(authID.kube, "thanos-querier", authzv1.ResourceAttributes{Verb: "get", Resource: "namespaces"})
	srv := &http.Server{Handler: auth.Wrap(c.monitor.Handler()), ReadHeaderTimeout: 10 * time.Second,
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
	return c.ensureAdminToken(ctx, runCtx)
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

// ensureAdminToken gives the admin kubeconfig a bearer token of the
// capstan-admin ServiceAccount (bound to cluster-admin), which oc
// presents to the thanos-querier Route and the console's login link
// carries; the client certificate stays what authenticates to the API
// server. The token is a TokenRequest's, valid AdminTokenLifetime, and a
// new one replaces it in the kubeconfig once half of that has passed,
// for as long as runCtx lasts: no token without an expiry is written.
// A legacy token Secret from an older data dir is deleted, which
// revokes its never-expiring token.
func (c *Cluster) ensureAdminToken(ctx, runCtx context.Context) error {
	if c.AdminToken() != "" {
		return nil
	}
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
	if err := c.Client.CoreV1().Secrets(ns).Delete(ctx, legacyAdminTokenSecret, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the never-expiring token Secret %s/%s: %w", ns, legacyAdminTokenSecret, err)
	}
	if err := c.renewAdminToken(ctx); err != nil {
		return err
	}
	c.run(runCtx, "admin-token", func(ctx context.Context) error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(AdminTokenLifetime / 2):
			}
			// A renewal that fails is tried again a minute later; the
			// token in use is good for half its lifetime still.
			for ctx.Err() == nil {
				if err := c.renewAdminToken(ctx); err == nil {
					break
				} else if ctx.Err() == nil {
					klog.ErrorS(err, "Renewing the admin's bearer token")
				}
				select {
				case <-ctx.Done():
				case <-time.After(time.Minute):
				}
			}
		}
	})
	return nil
}

const (
	// AdminTokenLifetime is how long the admin's bearer token is valid;
	// a new one comes at half of it.
	AdminTokenLifetime = 24 * time.Hour
	// legacyAdminTokenSecret held the admin's token in older data dirs:
	// a kubernetes.io/service-account-token Secret, valid for ever.
	legacyAdminTokenSecret = adminServiceAccount + "-token"
)

// renewAdminToken asks for a new token of the capstan-admin
// ServiceAccount and writes it into the admin kubeconfig.
func (c *Cluster) renewAdminToken(ctx context.Context) error {
	tr, err := c.Client.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, adminServiceAccount, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(AdminTokenLifetime / time.Second))}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("a token for the %s ServiceAccount: %w", adminServiceAccount, err)
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
	cfg.AuthInfos[ctxName.AuthInfo].Token = tr.Status.Token
	raw, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(path, raw, 0o600); err != nil {
		return err
	}
	c.adminMu.Lock()
	c.adminToken = tr.Status.Token
	c.adminMu.Unlock()
	return nil
}
