package registry

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"github.com/capstan-dev/capstan/internal/atomicfile"
)

// CredentialsFile, in the registry's directory, holds its credentials
// (mode 0600), made at the first start and kept after.
const CredentialsFile = "credentials.json"

// DefaultUsername is the user the credentials are made for.
const DefaultUsername = "capstan"

type credentials struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

func loadOrCreateCredentials(path string) (user, password string, err error) {
	raw, err := os.ReadFile(path)
	switch {
	case err == nil:
		var c credentials
		if err := json.Unmarshal(raw, &c); err != nil || c.Username == "" || c.Password == "" {
			return "", "", fmt.Errorf("registry credentials %s: want {\"username\": ..., \"password\": ...}, both set", path)
		}
		return c.Username, c.Password, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", "", fmt.Errorf("registry credentials: %w", err)
	}
	secret := make([]byte, 24)
	if _, err := rand.Read(secret); err != nil {
		return "", "", err
	}
	c := credentials{Username: DefaultUsername, Password: base64.RawURLEncoding.EncodeToString(secret)}
	raw, err = json.Marshal(c)
	if err != nil {
		return "", "", err
	}
	if err := atomicfile.Write(path, raw, 0o600); err != nil {
		return "", "", fmt.Errorf("registry credentials: %w", err)
	}
	return c.Username, c.Password, nil
}

// authorized lets a request through with the registry's credentials, or
// without them when it only reads and comes from this host.
func (r *Registry) authorized(req *http.Request) bool {
	if user, password, ok := req.BasicAuth(); ok {
		u := subtle.ConstantTimeCompare([]byte(user), []byte(r.Username))
		p := subtle.ConstantTimeCompare([]byte(password), []byte(r.Password))
		return u&p == 1
	}
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		return false
	}
	host, _, err := net.SplitHostPort(req.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// WriteDockerConfig writes a Docker config (auth.json, as podman, oc -a
// and go-containerregistry read it) granting the registry's credentials
// for host, with mode 0600.
func (r *Registry) WriteDockerConfig(path, host string) error {
	auth := base64.StdEncoding.EncodeToString([]byte(r.Username + ":" + r.Password))
	raw, err := json.MarshalIndent(map[string]any{"auths": map[string]any{host: map[string]string{"auth": auth}}}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, append(raw, '\n'), 0o600)
}
