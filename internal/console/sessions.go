package console

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// A session lives in its cookie, sealed (AES-256-GCM) with the console's
// session key, as OpenShift's console keeps its sessions in encrypted
// cookies: any replica holding the key serves it, a replica's restart
// or a drain logs nobody out, and the server keeps nothing per session.
// The cookie is the user's bearer token, as good as the token for as
// long as both last (a logout clears it from the browser; the token
// itself stays what the API server accepts).

// MinSessionKeySize is the least a session key file holds.
const MinSessionKeySize = 32

// LoadSessionKey reads a session key file (at least 32 bytes of secret,
// raw or encoded in any way: what it holds is hashed to the key).
func LoadSessionKey(path string) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("the session key: %w", err)
	}
	secret := []byte(strings.TrimSpace(string(raw)))
	if len(secret) < MinSessionKeySize {
		return nil, fmt.Errorf("the session key %s holds %d bytes, want at least %d (e.g. head -c 32 /dev/urandom | base64)", path, len(secret), MinSessionKeySize)
	}
	key := sha256.Sum256(secret)
	return key[:], nil
}

// NewSessionKey is a random key: sessions sealed with it last as long as
// the process.
func NewSessionKey() []byte {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return key
}

// sealed is a session as its cookie holds it.
type sealed struct {
	Token   string   `json:"t"`
	User    string   `json:"u"`
	Groups  []string `json:"g,omitempty"`
	CSRF    string   `json:"c"`
	Expires int64    `json:"e"`
}

func (s *Server) aead() cipher.AEAD {
	block, err := aes.NewCipher(s.sessionKey)
	if err != nil {
		panic(err) // a 32-byte key, checked in New
	}
	g, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return g
}

// seal is a session's cookie value.
func (s *Server) seal(sess *session) (string, error) {
	plain, err := json.Marshal(sealed{Token: sess.token, User: sess.user, Groups: sess.groups, CSRF: sess.csrf, Expires: sess.expires.Unix()})
	if err != nil {
		return "", err
	}
	g := s.aead()
	nonce := make([]byte, g.NonceSize(), g.NonceSize()+len(plain)+g.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(g.Seal(nonce, nonce, plain, []byte(s.cookieName()))), nil
}

// open is the session a cookie value holds, if it is one this console
// sealed and it has not expired.
func (s *Server) open(value string) (*session, error) {
	raw, err := base64.RawURLEncoding.DecodeString(value)
	if err != nil {
		return nil, errors.New("the session cookie is not base64")
	}
	g := s.aead()
	if len(raw) < g.NonceSize()+g.Overhead() {
		return nil, errors.New("the session cookie is too short")
	}
	plain, err := g.Open(nil, raw[:g.NonceSize()], raw[g.NonceSize():], []byte(s.cookieName()))
	if err != nil {
		return nil, errors.New("the session cookie was not sealed with this console's key")
	}
	var v sealed
	if err := json.Unmarshal(plain, &v); err != nil {
		return nil, fmt.Errorf("the session cookie: %w", err)
	}
	sess := &session{token: v.Token, user: v.User, groups: v.Groups, csrf: v.CSRF, expires: time.Unix(v.Expires, 0)}
	if !s.now().Before(sess.expires) {
		return nil, errors.New("the session has expired")
	}
	return sess, nil
}

// cookieName is the session cookie's name: __Host-prefixed when cookies
// are Secure (the browser then refuses it from plain HTTP, from another
// path and from a subdomain).
func (s *Server) cookieName() string {
	if s.opts.SecureCookies {
		return "__Host-" + SessionCookie
	}
	return SessionCookie
}
