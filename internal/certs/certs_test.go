package certs

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadOrCreateCAIsStable(t *testing.T) {
	dir := t.TempDir()
	crt, key := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	ca1, err := LoadOrCreateCA(crt, key, "test-ca")
	if err != nil {
		t.Fatal(err)
	}
	ca2, err := LoadOrCreateCA(crt, key, "test-ca")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ca1.CertPEM, ca2.CertPEM) {
		t.Errorf("second load created a new CA")
	}
	if !ca1.Cert.IsCA || ca1.Cert.Subject.CommonName != "test-ca" {
		t.Errorf("CA cert: IsCA=%v CN=%q", ca1.Cert.IsCA, ca1.Cert.Subject.CommonName)
	}
	if info, _ := os.Stat(key); info.Mode().Perm() != 0o600 {
		t.Errorf("CA key mode %v, want 0600", info.Mode().Perm())
	}
	os.Remove(key)
	if _, err := LoadOrCreateCA(crt, key, "test-ca"); err == nil || !strings.Contains(err.Error(), "must both exist") {
		t.Errorf("CA without key: %v, want an error", err)
	}
}

func TestEnsureLeafReusesAndReissues(t *testing.T) {
	dir := t.TempDir()
	ca, err := LoadOrCreateCA(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key"), "test-ca")
	if err != nil {
		t.Fatal(err)
	}
	crt, key := filepath.Join(dir, "s.crt"), filepath.Join(dir, "s.key")
	spec := LeafSpec{CommonName: "kube-apiserver", DNSNames: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true}
	if err := ca.EnsureLeaf(crt, key, spec); err != nil {
		t.Fatal(err)
	}
	first, _ := os.ReadFile(crt)
	if err := ca.EnsureLeaf(crt, key, spec); err != nil {
		t.Fatal(err)
	}
	if second, _ := os.ReadFile(crt); !bytes.Equal(first, second) {
		t.Errorf("an up-to-date certificate was reissued")
	}
	spec.DNSNames = append(spec.DNSNames, "new.example")
	if err := ca.EnsureLeaf(crt, key, spec); err != nil {
		t.Fatal(err)
	}
	third, _ := os.ReadFile(crt)
	block, _ := pem.Decode(third)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := cert.VerifyHostname("new.example"); err != nil {
		t.Errorf("reissued cert does not cover the new name: %v", err)
	}
	if err := cert.CheckSignatureFrom(ca.Cert); err != nil {
		t.Errorf("leaf not signed by the CA: %v", err)
	}
	if len(cert.ExtKeyUsage) != 1 || cert.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
		t.Errorf("ext key usage %v, want server auth", cert.ExtKeyUsage)
	}
}

func TestIssueClientCertCarriesGroups(t *testing.T) {
	dir := t.TempDir()
	ca, err := LoadOrCreateCA(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key"), "test-ca")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, _, err := ca.Issue(LeafSpec{CommonName: "admin", Organization: []string{"system:masters"}, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(certPEM)
	cert, _ := x509.ParseCertificate(block.Bytes)
	if cert.Subject.CommonName != "admin" || len(cert.Subject.Organization) != 1 || cert.Subject.Organization[0] != "system:masters" {
		t.Errorf("subject %v", cert.Subject)
	}
}
