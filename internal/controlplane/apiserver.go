package controlplane

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"

	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	"k8s.io/apiserver/pkg/authentication/request/union"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/rest"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"

	"github.com/capstan-dev/capstan/internal/admission"
	"github.com/capstan-dev/capstan/internal/datadir"
)

// ServiceAccountIssuer is the issuer of service-account tokens, as in a
// kubeadm or OpenShift cluster.
const ServiceAccountIssuer = "https://kubernetes.default.svc"

// apiserverFlags are the kube-apiserver command-line flags capstan runs
// with. Expressing the configuration as flags keeps it identical to what an
// operator of a real kube-apiserver would write.
func (cp *ControlPlane) apiserverFlags(etcdURL string) []string {
	d := cp.dataDir
	pki := d.PKIDir()
	etcdTLS := datadir.EtcdTLSFiles(pki)
	flags := []string{
		"--etcd-servers=" + etcdURL,
		"--etcd-cafile=" + etcdTLS.CA,
		"--etcd-certfile=" + etcdTLS.ClientCert,
		"--etcd-keyfile=" + etcdTLS.ClientKey,
		"--bind-address=" + cp.cfg.BindAddress,
		"--secure-port=" + strconv.Itoa(cp.cfg.Port),
		"--advertise-address=127.0.0.1",
		"--tls-cert-file=" + pki + "/apiserver.crt",
		"--tls-private-key-file=" + pki + "/apiserver.key",
		"--client-ca-file=" + pki + "/ca.crt",
		"--anonymous-auth=false",
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=" + ServiceAccountIssuer,
		"--service-account-key-file=" + pki + "/sa.pub",
		"--service-account-signing-key-file=" + pki + "/sa.key",
		"--service-cluster-ip-range=10.96.0.0/12",
		"--allow-privileged=true",
		// The kubernetes Service cannot point at a loopback address, and
		// there is no pod network to reach it from anyway.
		"--endpoint-reconciler-type=none",
		"--enable-admission-plugins=" + cp.admissionPlugins(),
		"--admission-control-config-file=" + d.Path("admission", admissionConfigFile),
		"--default-not-ready-toleration-seconds=" + strconv.FormatInt(cp.cfg.DefaultNotReadyTolerationSeconds, 10),
		"--default-unreachable-toleration-seconds=" + strconv.FormatInt(cp.cfg.DefaultUnreachableTolerationSeconds, 10),
		// Aggregated API servers (the metrics API) learn who is asking
		// from these headers, set by the aggregator's front-proxy client.
		"--requestheader-client-ca-file=" + pki + "/front-proxy-ca.crt",
		"--requestheader-allowed-names=" + FrontProxyClientName,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + pki + "/front-proxy-client.crt",
		"--proxy-client-key-file=" + pki + "/front-proxy-client.key",
		"--event-ttl=1h",
		// Every 5 to 7.5 minutes the watch cache's consistency check
		// lists every object of every resource from etcd and compares
		// digests: at 30,000 pods that list holds half a gigabyte of the
		// API server's heap while it lasts, and etcd builds the whole
		// answer in memory. The check guards against bugs of the watch
		// cache itself and changes nothing while the two agree, so a
		// simulator does without it.
		"--feature-gates=DetectCacheInconsistency=false",
		"--profiling=false",
	}
	return append(flags, cp.cfg.ExtraAPIServerFlags...)
}

// admissionPlugins are the admission plugins enabled beside the defaults:
// OpenShift's project node selector too, where OpenShift's APIs are
// served.
func (cp *ControlPlane) admissionPlugins() string {
	plugins := "NodeRestriction,PodNodeSelector,PodTolerationRestriction"
	if !cp.cfg.KubernetesOnly {
		plugins += "," + admission.PodNodeEnvironmentPluginName
	}
	return plugins
}

// runAPIServer builds the kube-apiserver from its own options and runs it
// until ctx ends. listener, when set, is the already-bound secure port.
func (cp *ControlPlane) runAPIServer(ctx context.Context, etcdURL string, listener net.Listener) (<-chan error, error) {
	s := options.NewServerRunOptions()
	if !cp.cfg.KubernetesOnly {
		// OpenShift's project node selector, right after upstream's.
		a := s.Admission.GenericAdmission
		admission.RegisterPodNodeEnvironment(a.Plugins)
		i := slices.Index(a.RecommendedPluginOrder, "PodNodeSelector")
		a.RecommendedPluginOrder = slices.Insert(a.RecommendedPluginOrder, i+1, admission.PodNodeEnvironmentPluginName)
	}
	fs := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	for _, f := range s.Flags().FlagSets {
		fs.AddFlagSet(f)
	}
	audit, err := cp.auditFlags()
	if err != nil {
		return nil, fmt.Errorf("audit policy: %w", err)
	}
	if err := fs.Parse(append(cp.apiserverFlags(etcdURL), audit...)); err != nil {
		return nil, fmt.Errorf("kube-apiserver flags: %w", err)
	}
	if listener != nil {
		s.SecureServing.Listener = listener
		s.SecureServing.BindPort = listener.Addr().(*net.TCPAddr).Port
	}
	if err := s.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
		return nil, fmt.Errorf("kube-apiserver feature gates: %w", err)
	}
	// The loopback clients inside the apiserver should not print warnings
	// about the apiserver's own deprecations.
	rest.SetDefaultWarningHandler(rest.NoWarnings{})
	completed, err := s.Complete(ctx)
	if err != nil {
		return nil, fmt.Errorf("kube-apiserver options: %w", err)
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return nil, fmt.Errorf("kube-apiserver options: %w", utilerrors.NewAggregate(errs))
	}
	done := make(chan error, 1)
	go func() {
		done <- cp.serveAPI(ctx, completed)
		close(done)
	}()
	return done, nil
}

// serveAPI is kube-apiserver's Run, with the nodes' tokens checked before
// its own authenticators in each server of its chain.
func (cp *ControlPlane) serveAPI(ctx context.Context, opts options.CompletedOptions) error {
	config, err := app.NewConfig(opts)
	if err != nil {
		return err
	}
	nodes := bearertoken.New(cp.nodeTokens)
	for _, a := range []*genericapiserver.AuthenticationInfo{&config.KubeAPIs.ControlPlane.Generic.Authentication,
		&config.ApiExtensions.GenericConfig.Authentication, &config.Aggregator.GenericConfig.Authentication} {
		a.Authenticator = union.New(nodes, a.Authenticator)
	}
	completed, err := config.Complete()
	if err != nil {
		return err
	}
	server, err := app.CreateServerChain(completed)
	if err != nil {
		return err
	}
	prepared, err := server.PrepareRun()
	if err != nil {
		return err
	}
	return prepared.Run(ctx)
}
