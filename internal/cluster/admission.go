package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"k8s.io/klog/v2"
	"net"
	"os"
	"path/filepath"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/capstan-dev/capstan/internal/admission"
	"github.com/capstan-dev/capstan/internal/certs"
	"github.com/capstan-dev/capstan/internal/controlplane"
	"github.com/capstan-dev/capstan/internal/machine"
)

// startAdmission serves capstan's admission webhooks (PodNodeConstraints,
// the Machine API's validation) with a CA of their own and registers them
// with the apiserver.
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
	id, err := c.as(ctx, "admission")
	if err != nil {
		return err
	}
	pki := d.PKIDir()
	ca, err := certs.LoadOrCreateCA(filepath.Join(pki, "webhook-ca.crt"), filepath.Join(pki, "webhook-ca.key"), "capstan-webhook-ca")
	if err != nil {
		return err
	}
	certFile, keyFile := filepath.Join(pki, "webhook.crt"), filepath.Join(pki, "webhook.key")
	if err := ca.EnsureLeaf(certFile, keyFile, certs.LeafSpec{CommonName: "capstan-webhook",
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
	srv := admission.NewServer(l, cert, map[string]admission.Reviewer{
		admission.PodNodeConstraintsPath: admission.NewPodNodeConstraints(id.kube, cfg),
		machine.MachineWebhookPath:       machine.MachineReviewer{},
		machine.MachineSetWebhookPath:    machine.MachineSetReviewer{},
	})
	c.run(runCtx, "admission webhooks", srv.Run)
	klog.InfoS("Serving the admission webhooks", "address", l.Addr().String())
	clientConfig := func(path string) admissionregistrationv1.WebhookClientConfig {
		url := fmt.Sprintf("https://%s%s", l.Addr().String(), path)
		return admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca.CertPEM}
	}
	if err := admission.Register(ctx, c.Client, admission.WebhookConfiguration(clientConfig(admission.PodNodeConstraintsPath))); err != nil {
		return err
	}
	return admission.Register(ctx, c.Client, machine.WebhookConfiguration(clientConfig(machine.MachineWebhookPath), clientConfig(machine.MachineSetWebhookPath)))
}
