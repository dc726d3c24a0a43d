package release

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
)

type keychainKey struct{}

// WithKeychain makes Read and Write authenticate with kc (before the
// default Docker keychain) for registry references.
func WithKeychain(ctx context.Context, kc authn.Keychain) context.Context {
	return context.WithValue(ctx, keychainKey{}, kc)
}

// Keychain is the keychain Read and Write use under ctx.
func Keychain(ctx context.Context) authn.Keychain {
	if kc, ok := ctx.Value(keychainKey{}).(authn.Keychain); ok {
		return authn.NewMultiKeychain(kc, authn.DefaultKeychain)
	}
	return authn.DefaultKeychain
}

// authFile is a Docker config (auth.json): credentials by registry host.
type authFile map[string]authn.AuthConfig

// ReadAuthFile reads a Docker config, as oc's --registry-config (-a) and
// podman's auth.json hold it: "auths" maps a registry host to its "auth"
// (base64 of user:password) or its "username" and "password".
func ReadAuthFile(path string) (authn.Keychain, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("registry config: %w", err)
	}
	var doc struct {
		Auths map[string]struct {
			Auth     string `json:"auth"`
			Username string `json:"username"`
			Password string `json:"password"`
		} `json:"auths"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("registry config %s: %w", path, err)
	}
	out := authFile{}
	for host, a := range doc.Auths {
		c := authn.AuthConfig{Username: a.Username, Password: a.Password}
		if a.Auth != "" {
			dec, err := base64.StdEncoding.DecodeString(a.Auth)
			user, password, ok := strings.Cut(string(dec), ":")
			if err != nil || !ok {
				return nil, fmt.Errorf("registry config %s: the auth of %s is not base64 of user:password", path, host)
			}
			c.Username, c.Password = user, password
		}
		if c.Username == "" {
			return nil, fmt.Errorf("registry config %s: %s has no credentials", path, host)
		}
		out[strings.TrimPrefix(strings.TrimPrefix(host, "https://"), "http://")] = c
	}
	return out, nil
}

// Resolve gives the credentials for the registry of target.
func (f authFile) Resolve(target authn.Resource) (authn.Authenticator, error) {
	if c, ok := f[target.RegistryStr()]; ok {
		return authn.FromConfig(c), nil
	}
	return authn.Anonymous, nil
}
