package cli

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/capstan-dev/capstan/internal/admission"
	"github.com/capstan-dev/capstan/internal/certs"
)

func newAdmissionCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "admission",
		Short: "capstan's admission webhooks (PodNodeConstraints) outside capstan up",
	}
	c.AddCommand(newAdmissionServeCommand(), newAdmissionManifestsCommand())
	return c
}

func loadPNCConfig(path string) (*admission.PodNodeConstraintsConfig, error) {
	if path == "" {
		return admission.DefaultPodNodeConstraintsConfig(), nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cfg, err := admission.ParsePodNodeConstraintsConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

func newAdmissionServeCommand() *cobra.Command {
	cf := &clientFlags{}
	var certFile, keyFile, addr, configFile string
	c := &cobra.Command{
		Use:   "serve",
		Short: "Serve the PodNodeConstraints webhook (in a pod, or anywhere the apiserver reaches)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			cfg, err := loadPNCConfig(configFile)
			if err != nil {
				return err
			}
			cert, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return fmt.Errorf("serving certificate: %w", err)
			}
			// In a pod without --kubeconfig, client-go's rules find the
			// in-cluster configuration.
			client, _, err := cf.client()
			if err != nil {
				return err
			}
			l, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("listening on %s: %w", addr, err)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			fmt.Fprintf(c.OutOrStdout(), "Serving %s on %s\n", admission.PodNodeConstraintsPath, l.Addr())
			return admission.NewServer(l, cert, map[string]admission.Reviewer{admission.PodNodeConstraintsPath: admission.NewPodNodeConstraints(client, cfg)}).Run(ctx)
		},
	}
	cf.addComponent(c.Flags())
	c.Flags().StringVar(&certFile, "tls-cert-file", "/var/run/secrets/capstan-admission/tls.crt", "serving certificate")
	c.Flags().StringVar(&keyFile, "tls-key-file", "/var/run/secrets/capstan-admission/tls.key", "serving key")
	c.Flags().StringVar(&addr, "bind-address", ":8443", "address to serve on")
	c.Flags().StringVar(&configFile, "config", "", "PodNodeConstraintsConfig file (default: blacklist kubernetes.io/hostname)")
	return c
}

func newAdmissionManifestsCommand() *cobra.Command {
	var ns, image, configFile string
	c := &cobra.Command{
		Use:   "manifests",
		Short: "Print the manifests that deploy the PodNodeConstraints webhook to another cluster",
		Long: `Prints a Namespace, RBAC, a Secret with a freshly generated CA and serving
certificate, a ConfigMap with the configuration, a Deployment running
'capstan admission serve', a Service and the ValidatingWebhookConfiguration.
Apply with: capstan admission manifests --image IMAGE | kubectl apply -f -`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			cfg, err := loadPNCConfig(configFile)
			if err != nil {
				return err
			}
			return writeAdmissionManifests(c.OutOrStdout(), ns, image, cfg)
		},
	}
	c.Flags().StringVar(&ns, "namespace", "capstan-admission", "namespace to deploy into")
	c.Flags().StringVar(&image, "image", "", "container image holding the capstan binary (required)")
	c.Flags().StringVar(&configFile, "config", "", "PodNodeConstraintsConfig file (default: blacklist kubernetes.io/hostname)")
	_ = c.MarkFlagRequired("image")
	return c
}

func writeAdmissionManifests(out io.Writer, ns, image string, cfg *admission.PodNodeConstraintsConfig) error {
	const name = "capstan-admission"
	ca, _, err := certs.NewCA("capstan-admission-ca")
	if err != nil {
		return err
	}
	svcHost := name + "." + ns + ".svc"
	certPEM, keyPEM, err := ca.Issue(certs.LeafSpec{CommonName: svcHost, DNSNames: []string{svcHost, svcHost + ".cluster.local"}, Server: true})
	if err != nil {
		return err
	}
	cfgYAML, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	labels := map[string]string{"app": name}
	objs := []any{
		&corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}},
		&rbacv1.ClusterRole{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"}, ObjectMeta: metav1.ObjectMeta{Name: name},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}}}},
		&rbacv1.ClusterRoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"}, ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}},
		&corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: metav1.ObjectMeta{Name: name + "-tls", Namespace: ns},
			Type: corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM}},
		&corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Data: map[string]string{"podnodeconstraints.yaml": string(cfgYAML)}},
		&appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}, ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
					ServiceAccountName: name,
					Containers: []corev1.Container{{Name: "webhook", Image: image,
						Args:  []string{"admission", "serve", "--config", "/etc/capstan-admission/podnodeconstraints.yaml"},
						Ports: []corev1.ContainerPort{{Name: "https", ContainerPort: 8443}},
						VolumeMounts: []corev1.VolumeMount{{Name: "tls", MountPath: "/var/run/secrets/capstan-admission", ReadOnly: true},
							{Name: "config", MountPath: "/etc/capstan-admission", ReadOnly: true}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8443), Scheme: corev1.URISchemeHTTPS}}},
					}},
					Volumes: []corev1.Volume{
						{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name + "-tls"}}},
						{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}},
					},
				}}}},
		&corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}, ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(8443)}}}},
		admission.WebhookConfiguration(admissionregistrationv1.WebhookClientConfig{
			Service:  &admissionregistrationv1.ServiceReference{Namespace: ns, Name: name, Path: ptr.To(admission.PodNodeConstraintsPath), Port: ptr.To[int32](443)},
			CABundle: ca.CertPEM,
		}),
	}
	for _, o := range objs {
		raw, err := yaml.Marshal(o)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "---\n%s", raw)
	}
	return nil
}
