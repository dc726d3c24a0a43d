package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"

	"github.com/capstan-dev/capstan/internal/console"
	"github.com/capstan-dev/capstan/internal/leader"
)

func newConsoleCommand() *cobra.Command {
	var (
		cf            clientFlags
		rf            runFlags
		listen        string
		prometheusURL string
		policyFile    string
		sessionKey    string
		secureCookies bool
		tlsCert       string
		tlsKey        string
	)
	c := &cobra.Command{
		Use:   "console",
		Short: "Serve the web console for a cluster",
		Long: `Serves capstan's web console for the cluster the kubeconfig names: the
overview with alerts and charts, pending pods and why, nodes, machines and
the autoscaler, machine config pools, and updates (Cluster Settings), all
live. The console holds no rights of its own: people log in with a bearer
token, and every call is made with it.

Alerts and charts come, with each user's own token, from --prometheus-url,
or, in a pod, from the thanos-querier Service in openshift-monitoring
(https://thanos-querier.openshift-monitoring.svc:9091, trusted by the
service CA), as OpenShift's console reaches it. A Route's host is never
used: whoever may write that Route could point it at a server of their own,
which would receive every user's token. When the kubeconfig carries a
bearer token, a one-time login link for it is printed.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			p, err := loadPolicy(policyFile)
			if err != nil {
				return err
			}
			cfg, err := cf.restConfig()
			if err != nil {
				return err
			}
			opts := console.Options{API: cfg, Policy: p, SecureCookies: secureCookies, TLSCertFile: tlsCert, TLSKeyFile: tlsKey}
			if sessionKey != "" {
				if opts.SessionKey, err = console.LoadSessionKey(sessionKey); err != nil {
					return fmt.Errorf("--session-key-file: %w", err)
				}
			}
			if opts.PrometheusURL, opts.PrometheusTLS, err = consolePrometheus(prometheusURL, cfg, inCluster()); err != nil {
				return err
			}
			if opts.PrometheusURL == "" {
				fmt.Fprintln(c.ErrOrStderr(), "capstan: warning: no alerts or charts: out of a cluster, the console asks only the Prometheus --prometheus-url names")
			}
			srv, err := console.New(opts)
			if err != nil {
				return err
			}
			if err := console.CheckAddress(listen, opts); err != nil {
				return fmt.Errorf("--listen %s: %w", listen, err)
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("--listen %s: %w", listen, err)
			}
			base := srv.Scheme() + "://" + ln.Addr().String()
			fmt.Fprintf(c.OutOrStdout(), "Console: %s\n", base)
			// In a pod, the token is the pod's own, and the link would go
			// into its log with an address nobody browses to.
			if token := bearerToken(cfg); token != "" && !inCluster() {
				fmt.Fprintf(c.OutOrStdout(), "Log in as the kubeconfig's user, once, within 10 minutes: %s\n", srv.LoginLink(base, token))
			}
			return rf.run(c, "console", nil, leader.Config{}, nil, func(ctx context.Context) error { return srv.Serve(ctx, ln) })
		},
	}
	cf.addComponent(c.Flags())
	rf.addHealth(c.Flags(), "")
	c.Flags().StringVar(&listen, "listen", "127.0.0.1:9000", "address to serve the console on: plain HTTP on loopback only, HTTPS anywhere with --tls-cert-file")
	c.Flags().StringVar(&tlsCert, "tls-cert-file", "", "PEM certificate to serve HTTPS (and HSTS) with, which the console needs off loopback")
	c.Flags().StringVar(&tlsKey, "tls-key-file", "", "PEM private key of --tls-cert-file")
	c.Flags().StringVar(&prometheusURL, "prometheus-url", "", "Prometheus API to read alerts and charts from, with the user's token (default: in a pod, the thanos-querier Service; elsewhere, none)")
	c.Flags().StringVar(&policyFile, "policy", "", "scheduler Policy file pending pods are explained with (default: the default policy)")
	c.Flags().StringVar(&sessionKey, "session-key-file", "", "file of at least 32 secret bytes that seals sessions into their cookies; replicas that share it share their sessions (default: a random key, sessions ending with the process)")
	c.Flags().BoolVar(&secureCookies, "secure-cookies", false, "mark the session cookie Secure (named __Host-...): set it when the console is reached over HTTPS, as behind a Route or an Ingress")
	return c
}

// thanosService is where a console in a pod reaches the thanos-querier,
// as OpenShift's console does: its Service, by its fixed name.
const thanosService = "https://thanos-querier.openshift-monitoring.svc:9091"

// serviceCAFile is the service CA's bundle OpenShift mounts beside every
// pod's ServiceAccount token.
var serviceCAFile = "/var/run/secrets/kubernetes.io/serviceaccount/service-ca.crt"

// consolePrometheus is where the console asks for alerts and charts with
// its users' tokens, and how it trusts that server: the URL given (its
// certificate by the system's roots or the kubeconfig's CA); in a pod,
// the thanos-querier's Service, by the service CA alone; else nowhere.
func consolePrometheus(flagURL string, cfg *rest.Config, inPod bool) (string, *tls.Config, error) {
	switch {
	case flagURL != "":
		u, err := url.Parse(flagURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return "", nil, fmt.Errorf("--prometheus-url %q: want an http or https URL", flagURL)
		}
		roots, err := systemAndClusterRoots(cfg)
		if err != nil {
			return "", nil, err
		}
		return strings.TrimSuffix(flagURL, "/"), &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}, nil
	case inPod:
		pem, err := os.ReadFile(serviceCAFile)
		if err != nil {
			return "", nil, fmt.Errorf("the service CA, which the thanos-querier Service is trusted by: %w (or pass --prometheus-url)", err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return "", nil, fmt.Errorf("the service CA %s holds no certificate", serviceCAFile)
		}
		return thanosService, &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}, nil
	}
	return "", nil, nil
}

// inCluster reports whether this process runs in a pod.
func inCluster() bool {
	return os.Getenv("KUBERNETES_SERVICE_HOST") != "" && os.Getenv("KUBERNETES_SERVICE_PORT") != ""
}

// bearerToken is the kubeconfig's token, if it has one.
func bearerToken(cfg *rest.Config) string {
	if cfg.BearerToken != "" {
		return cfg.BearerToken
	}
	if cfg.BearerTokenFile != "" {
		if raw, err := os.ReadFile(cfg.BearerTokenFile); err == nil {
			return strings.TrimSpace(string(raw))
		}
	}
	return ""
}
