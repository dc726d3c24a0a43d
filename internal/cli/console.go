package cli

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

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
	)
	c := &cobra.Command{
		Use:   "console",
		Short: "Serve the web console for a cluster",
		Long: `Serves capstan's web console for the cluster the kubeconfig names: the
overview with alerts and charts, pending pods and why, nodes, machines and
the autoscaler, machine config pools, and updates (Cluster Settings), all
live. The console holds no rights of its own: people log in with a bearer
token, and every call is made with it.

Alerts and charts come from the thanos-querier Route in
openshift-monitoring (as oc reads them), or from --prometheus-url.
When the kubeconfig carries a bearer token, a one-time login link for it
is printed.`,
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
			opts := console.Options{API: cfg, Policy: p, SecureCookies: secureCookies}
			if sessionKey != "" {
				if opts.SessionKey, err = console.LoadSessionKey(sessionKey); err != nil {
					return fmt.Errorf("--session-key-file: %w", err)
				}
			}
			ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			switch {
			case prometheusURL != "":
				u, err := url.Parse(prometheusURL)
				if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					return fmt.Errorf("--prometheus-url %q: want an http or https URL", prometheusURL)
				}
				opts.PrometheusURL = strings.TrimSuffix(prometheusURL, "/")
			default:
				rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
				hosts, tlsConfig, err := thanosRoute(rctx, cfg)
				cancel()
				if err == nil && len(hosts) > 0 {
					opts.PrometheusURL, opts.PrometheusTLS = "https://"+hosts[0], tlsConfig
				} else {
					fmt.Fprintf(c.ErrOrStderr(), "capstan: warning: no alerts or charts: the thanos-querier Route is not there (%v); pass --prometheus-url\n", errOrNoHost(err))
				}
			}
			srv, err := console.New(opts)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("--listen %s: %w", listen, err)
			}
			base := "http://" + ln.Addr().String()
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
	c.Flags().StringVar(&listen, "listen", "127.0.0.1:9000", "address to serve the console on (plain HTTP: keep it on loopback, or put TLS in front)")
	c.Flags().StringVar(&prometheusURL, "prometheus-url", "", "Prometheus API to read alerts and charts from, with the user's token (default: the thanos-querier Route)")
	c.Flags().StringVar(&policyFile, "policy", "", "scheduler Policy file pending pods are explained with (default: the default policy)")
	c.Flags().StringVar(&sessionKey, "session-key-file", "", "file of at least 32 secret bytes that seals sessions into their cookies; replicas that share it share their sessions (default: a random key, sessions ending with the process)")
	c.Flags().BoolVar(&secureCookies, "secure-cookies", false, "mark the session cookie Secure (named __Host-...): set it when the console is reached over HTTPS, as behind a Route or an Ingress")
	return c
}

// inCluster reports whether this process runs in a pod.
func inCluster() bool {
	return os.Getenv("KUBERNETES_SERVICE_HOST") != "" && os.Getenv("KUBERNETES_SERVICE_PORT") != ""
}

func errOrNoHost(err error) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("it has no admitted host")
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
