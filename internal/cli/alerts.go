package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/capstan-dev/capstan/internal/cluster"
	"github.com/capstan-dev/capstan/internal/cvo"
)

// clusterAlerts fetches the cluster's alerts as `oc adm upgrade status`
// does: the thanos-querier Route's admitted hosts, asked for
// /api/v1/alerts with the kubeconfig's bearer token. Besides the system's
// roots, the kubeconfig's CA is trusted (capstan serves the Route with
// the cluster CA's certificate).
func clusterAlerts(ctx context.Context, cfg *rest.Config) ([]cvo.StatusAlert, error) {
	body, err := getThanos(ctx, cfg, "/api/v1/alerts")
	if err != nil {
		return nil, fmt.Errorf("failed to get alerts from Thanos: %w", err)
	}
	return cvo.ParseAlerts(body)
}

func getThanos(ctx context.Context, cfg *rest.Config, path string) ([]byte, error) {
	token := bearerToken(cfg)
	if token == "" {
		return nil, fmt.Errorf("no token is currently in use for this session")
	}
	hosts, tlsConfig, err := thanosRoute(ctx, cfg)
	if err != nil {
		return nil, err
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, TLSClientConfig: tlsConfig}}
	var errs []error
	for _, host := range hosts {
		u := url.URL{Scheme: "https", Host: host, Path: path}
		body, err := checkedGet(ctx, client, u.String(), token)
		if err == nil {
			return body, nil
		}
		errs = append(errs, fmt.Errorf("%s->%w", host, err))
	}
	name := cluster.MonitoringNamespace + "/" + cluster.ThanosQuerierName
	if len(errs) == 1 {
		return nil, fmt.Errorf("unable to get %s from URI in the %s Route: %s", path, name, utilerrors.NewAggregate(errs))
	}
	return nil, fmt.Errorf("unable to get %s from any of %d URIs in the %s Route: %s", path, len(errs), name, utilerrors.NewAggregate(errs))
}

func checkedGet(ctx context.Context, client *http.Client, u, token string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return body, fmt.Errorf("GET status code=%d", resp.StatusCode)
	}
	return body, nil
}

// systemAndClusterRoots trusts the system's roots and the kubeconfig's
// CA (capstan serves its thanos-querier with the cluster CA's
// certificate); an unreadable CA file is an error, beside the roots.
func systemAndClusterRoots(cfg *rest.Config) (*x509.CertPool, error) {
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool()
	}
	ca := cfg.CAData
	if len(ca) == 0 && cfg.CAFile != "" {
		if ca, err = os.ReadFile(cfg.CAFile); err != nil {
			return roots, fmt.Errorf("the kubeconfig's CA: %w", err)
		}
	}
	roots.AppendCertsFromPEM(ca)
	return roots, nil
}

// thanosRoute finds where the thanos-querier Route is served (its
// admitted hosts) and how to trust it: the system's roots and the
// kubeconfig's CA (capstan serves the Route with the cluster CA's
// certificate).
func thanosRoute(ctx context.Context, cfg *rest.Config) ([]string, *tls.Config, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	route, err := dyn.Resource(cluster.RouteResource).Namespace(cluster.MonitoringNamespace).Get(ctx, cluster.ThanosQuerierName, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	roots, _ := systemAndClusterRoots(cfg)
	ingress, _, err := unstructured.NestedSlice(route.Object, "status", "ingress")
	if err != nil {
		return nil, nil, fmt.Errorf("the %s/%s Route's status: %w", cluster.MonitoringNamespace, cluster.ThanosQuerierName, err)
	}
	var hosts []string
	for _, in := range ingress {
		m, _ := in.(map[string]any)
		if host, _ := m["host"].(string); host != "" {
			hosts = append(hosts, host)
		}
	}
	return hosts, &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}, nil
}
