package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/capstan-dev/capstan/internal/admission"
	"github.com/capstan-dev/capstan/internal/controlplane"
)

// startAdmission serves capstan's admission webhooks (PodNodeConstraints)
// with a CA of their own and registers them with the apiserver.
func (c *Cluster) startAdmission(ctx, runCtx context.Context) error {
	d := c.ControlPlane.DataDir()
	raw, err := os.ReadFile(d.EffectiveAdmissionFile(controlplane.PodNodeConstraintsConfigFile))
	if err != nil {
		return err
	}
	cfg, err := admission.ParsePodNodeConstraintsConfig(raw)
	if err != nil {
		return err
	}
	pki := d.PKIDir()
	ca, err := controlplane.LoadOrCreateCA(filepath.Join(pki, "webhook-ca.crt"), filepath.Join(pki, "webhook-ca.key"), "capstan-webhook-ca")
	if err != nil {
		return err
	}
	certFile, keyFile := filepath.Join(pki, "webhook.crt"), filepath.Join(pki, "webhook.key")
	if err := ca.EnsureLeaf(certFile, keyFile, controlplane.LeafSpec{CommonName: "capstan-webhook",
		DNSNames: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true}); err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return err
	}
	l, err := d.WebhookListener()
	if err != nil {
		return fmt.Errorf("admission webhook listener: %w", err)
	}
	srv := admission.NewServer(l, cert, admission.NewPodNodeConstraints(c.Client, cfg))
	c.webhookDone = make(chan error, 1)
	go func() { c.webhookDone <- srv.Run(runCtx) }()
	url := fmt.Sprintf("https://%s%s", l.Addr().String(), admission.PodNodeConstraintsPath)
	return admission.Register(ctx, c.Client, admission.WebhookConfiguration(admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca.CertPEM}))
}
