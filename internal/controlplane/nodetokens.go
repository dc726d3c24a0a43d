package controlplane

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/rest"

	"github.com/capstan-dev/capstan/internal/atomicfile"
	"github.com/capstan-dev/capstan/internal/etcdretry"
)

// Each simulated kubelet authenticates as its node, system:node:NAME in
// system:nodes, as an OpenShift kubelet does with its client certificate.
// A certificate each would mean a TLS connection each: thousands of
// connections into one process for what is a credential check. Instead a
// node's credential is a bearer token, the node's name signed with a key
// kept in the data dir's PKI (HMAC-SHA256), which the API server checks
// before its other authenticators; the simulated kubelets share one
// connection without a client certificate. Anyone who can read the key
// can act as any node, as anyone who can read the CA's key can; both are
// readable by the data dir's owner only.

// nodeTokenKeyFile is the signing key of the nodes' tokens in the PKI
// directory.
const nodeTokenKeyFile = "node-tokens.key"

// nodeTokenPrefix starts every node token, so that other tokens are
// passed on at once.
const nodeTokenPrefix = "capstan-node."

type nodeTokens struct{ key []byte }

// loadOrCreateNodeTokens reads the signing key at path, or makes one.
func loadOrCreateNodeTokens(path string) (*nodeTokens, error) {
	key, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		// Whole or not at all: a power cut must not leave an empty key.
		if err := atomicfile.Write(path, key, 0o600); err != nil {
			return nil, fmt.Errorf("writing the nodes' token key: %w", err)
		}
		return &nodeTokens{key: key}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the nodes' token key: %w", err)
	}
	if len(key) < 32 {
		return nil, fmt.Errorf("the nodes' token key %s holds %d bytes, not 32 or more", path, len(key))
	}
	return &nodeTokens{key: key}, nil
}

func (n *nodeTokens) sign(node string) []byte {
	mac := hmac.New(sha256.New, n.key)
	mac.Write([]byte(node))
	return mac.Sum(nil)
}

// token is the bearer token of node's kubelet.
func (n *nodeTokens) token(node string) string {
	enc := base64.RawURLEncoding
	return nodeTokenPrefix + enc.EncodeToString([]byte(node)) + "." + enc.EncodeToString(n.sign(node))
}

// AuthenticateToken accepts a node's token as its node: system:node:NAME
// in system:nodes. Any other token is left to the next authenticator.
func (n *nodeTokens) AuthenticateToken(_ context.Context, token string) (*authenticator.Response, bool, error) {
	rest, ok := strings.CutPrefix(token, nodeTokenPrefix)
	if !ok {
		return nil, false, nil
	}
	name64, sig64, ok := strings.Cut(rest, ".")
	enc := base64.RawURLEncoding
	name, err1 := enc.DecodeString(name64)
	sig, err2 := enc.DecodeString(sig64)
	if !ok || err1 != nil || err2 != nil || len(name) == 0 || !hmac.Equal(sig, n.sign(string(name))) {
		return nil, false, errors.New("invalid node token")
	}
	return &authenticator.Response{User: &user.DefaultInfo{
		Name:   "system:node:" + string(name),
		Groups: []string{user.NodesGroup, user.AllAuthenticated},
	}}, true, nil
}

// NodeToken is the bearer token the kubelet of node authenticates with.
func (cp *ControlPlane) NodeToken(node string) string { return cp.nodeTokens.token(node) }

// NodeClientConfig is a client configuration with no credential of its
// own, for requests that each carry a node's token (NodeToken): all of
// them share its connection.
func (cp *ControlPlane) NodeClientConfig() *rest.Config {
	return etcdretry.Wrap(&rest.Config{
		Host:            cp.serverURL,
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.ca.CertPEM},
		QPS:             2000,
		Burst:           4000,
	})
}
