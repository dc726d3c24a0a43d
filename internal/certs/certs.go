// Package certs issues and keeps capstan's certificates: certificate
// authorities and the leaf certificates they sign, as PEM files, reused
// while they still cover what they are for.
package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"slices"
	"time"

	"github.com/capstan-dev/capstan/internal/atomicfile"
)

// CertificateAuthority is a signing key pair kept on disk as PEM files.
type CertificateAuthority struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
}

// validity of everything capstan issues: long enough that a development
// cluster never sees an expiry.
const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 5 * 365 * 24 * time.Hour
)

// LoadOrCreateCA returns the CA stored as certFile/keyFile, creating both
// when neither exists. Exactly one of the two existing is an error: the data
// dir was damaged and silently replacing the CA would orphan every cert.
func LoadOrCreateCA(certFile, keyFile, commonName string) (*CertificateAuthority, error) {
	certExists, keyExists := fileExists(certFile), fileExists(keyFile)
	switch {
	case certExists && keyExists:
		cert, key, certPEM, err := loadPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		if !cert.IsCA {
			return nil, fmt.Errorf("%s is not a CA certificate", certFile)
		}
		return &CertificateAuthority{Cert: cert, Key: key, CertPEM: certPEM}, nil
	case certExists != keyExists:
		return nil, fmt.Errorf("CA %s and its key %s must both exist or both be absent", certFile, keyFile)
	}
	ca, key, err := NewCA(commonName)
	if err != nil {
		return nil, err
	}
	if err := writePair(certFile, keyFile, ca.CertPEM, key); err != nil {
		return nil, err
	}
	return ca, nil
}

// NewCA creates a CA in memory, for certificates handed out rather than
// kept (the manifests of `capstan admission manifests`).
func NewCA(commonName string) (*CertificateAuthority, *ecdsa.PrivateKey, error) {
	key, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          newSerial(),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("creating CA %q: %w", commonName, err)
	}
	cert, _ := x509.ParseCertificate(der)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return &CertificateAuthority{Cert: cert, Key: key, CertPEM: certPEM}, key, nil
}

// LeafSpec describes a certificate signed by a CertificateAuthority.
type LeafSpec struct {
	CommonName   string
	Organization []string
	DNSNames     []string
	IPs          []net.IP
	Server       bool
	Client       bool
}

// EnsureLeaf makes sure certFile/keyFile hold a certificate for spec signed
// by ca; an existing pair is kept when it was signed by ca and still covers
// every requested name, so restarts do not churn certificates.
func (ca *CertificateAuthority) EnsureLeaf(certFile, keyFile string, spec LeafSpec) error {
	if fileExists(certFile) && fileExists(keyFile) {
		cert, _, _, err := loadPair(certFile, keyFile)
		if err == nil && ca.signed(cert) && covers(cert, spec) && time.Until(cert.NotAfter) > 30*24*time.Hour {
			return nil
		}
	}
	certPEM, keyPEM, err := ca.Issue(spec)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(keyFile, keyPEM, 0o600); err != nil {
		return err
	}
	return atomicfile.Write(certFile, certPEM, 0o644)
}

// Issue signs a fresh key pair for spec and returns both as PEM.
func (ca *CertificateAuthority) Issue(spec LeafSpec) (certPEM, keyPEM []byte, err error) {
	key, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: newSerial(),
		Subject:      pkix.Name{CommonName: spec.CommonName, Organization: spec.Organization},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		DNSNames:     spec.DNSNames,
		IPAddresses:  spec.IPs,
	}
	if spec.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if spec.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("signing certificate for %q: %w", spec.CommonName, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// EnsureKey writes a private key to keyFile and its public half to pubFile
// unless both exist; they sign and verify service-account tokens.
func EnsureKey(keyFile, pubFile string) error {
	if fileExists(keyFile) && fileExists(pubFile) {
		return nil
	}
	key, err := newKey()
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return err
	}
	if err := atomicfile.Write(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return atomicfile.Write(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644)
}

func (ca *CertificateAuthority) signed(cert *x509.Certificate) bool {
	return cert.CheckSignatureFrom(ca.Cert) == nil
}

func covers(cert *x509.Certificate, spec LeafSpec) bool {
	if cert.Subject.CommonName != spec.CommonName || !slices.Equal(cert.Subject.Organization, spec.Organization) ||
		slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageServerAuth) != spec.Server ||
		slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageClientAuth) != spec.Client {
		return false
	}
	have := map[string]bool{}
	for _, n := range cert.DNSNames {
		have[n] = true
	}
	for _, ip := range cert.IPAddresses {
		have[ip.String()] = true
	}
	for _, n := range spec.DNSNames {
		if !have[n] {
			return false
		}
	}
	for _, ip := range spec.IPs {
		if !have[ip.String()] {
			return false
		}
	}
	return true
}

func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func newSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return n.Add(n, big.NewInt(1))
}

func loadPair(certFile, keyFile string) (*x509.Certificate, crypto.Signer, []byte, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, nil, nil, err
	}
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, nil, nil, fmt.Errorf("%s: no PEM certificate", certFile)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", certFile, err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, nil, nil, err
	}
	kblock, _ := pem.Decode(keyPEM)
	if kblock == nil {
		return nil, nil, nil, fmt.Errorf("%s: no PEM key", keyFile)
	}
	parsed, err := x509.ParsePKCS8PrivateKey(kblock.Bytes)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", keyFile, err)
	}
	signer, ok := parsed.(crypto.Signer)
	if !ok {
		return nil, nil, nil, fmt.Errorf("%s: key cannot sign", keyFile)
	}
	return cert, signer, certPEM, nil
}

func writePair(certFile, keyFile string, certPEM []byte, key *ecdsa.PrivateKey) error {
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return atomicfile.Write(certFile, certPEM, 0o644)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
