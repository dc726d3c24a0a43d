package console

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/capstan-dev/capstan/internal/atomicfile"
)

// A session lives in its cookie, sealed (AES-256-GCM) with the console's
// session key, as OpenShift's console keeps its sessions in encrypted
// cookies: any replica holding the key serves it, a replica's restart
// or a drain logs nobody out, and the server keeps nothing per session.
//
// A cookie alone is not a session. Browsers do not keep cookies apart by
// port, so any other server on the console's host (another user's, on
// 127.0.0.1:8081) receives the console's cookie when the admin opens one
// of its pages. So each login also makes a secret that only the page
// holds: the login's answer hands it over, the page keeps it in its
// origin's sessionStorage (per scheme, host and port: no other server's
// page reads it) and sends it with every request, as the
// X-Capstan-Session header, or, for a WebSocket, which carries no
// headers of its own, as a subprotocol. The cookie holds the secret's
// digest. A logout revokes the session for good: the console remembers
// its ID until it would have expired (in a file when it has one, so
// that a restart forgets nothing), and a new session key ends every
// session at once.

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
	ID      string   `json:"i"`
	Token   string   `json:"t"`
	User    string   `json:"u"`
	Groups  []string `json:"g,omitempty"`
	CSRF    string   `json:"c"`
	Secret  string   `json:"k"`
	Expires int64    `json:"e"`
}

// SessionHeader carries the session's browser-held secret on every
// request but a WebSocket's handshake.
const SessionHeader = "X-Capstan-Session"

// sessionProtocol prefixes the WebSocket subprotocol that carries the
// secret in a handshake (a browser's WebSocket sets no other header).
const sessionProtocol = "capstan.session."

// secretDigest is what a cookie holds of its session's secret.
func secretDigest(secret string) string {
	d := sha256.Sum256([]byte(secret))
	return base64.RawURLEncoding.EncodeToString(d[:])
}

// holds says whether secret is the session's own.
func (sess *session) holds(secret string) bool {
	return secret != "" && subtle.ConstantTimeCompare([]byte(secretDigest(secret)), []byte(sess.secretDigest)) == 1
}

// presentedSecret is the session secret a request carries: its header,
// or in a WebSocket handshake the subprotocol that holds it (the only
// one a page asks for).
func presentedSecret(r *http.Request) string {
	if v := r.Header.Get(SessionHeader); v != "" {
		return v
	}
	if !isWebSocket(r) {
		return ""
	}
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for p := range strings.SplitSeq(h, ",") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(p), sessionProtocol); ok {
				return v
			}
		}
	}
	return ""
}

func isWebSocket(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
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
	plain, err := json.Marshal(sealed{ID: sess.id, Token: sess.token, User: sess.user, Groups: sess.groups, CSRF: sess.csrf, Secret: sess.secretDigest, Expires: sess.expires.Unix()})
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
	sess := &session{id: v.ID, token: v.Token, user: v.User, groups: v.Groups, csrf: v.CSRF, secretDigest: v.Secret, expires: time.Unix(v.Expires, 0)}
	if !s.now().Before(sess.expires) {
		return nil, errors.New("the session has expired")
	}
	if sess.id == "" || sess.secretDigest == "" {
		return nil, errors.New("the session cookie is of an older console: log in again")
	}
	if s.revoked.has(sess.id) {
		return nil, errors.New("the session was logged out")
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

// revocations are the IDs of the sessions logged out, each kept until
// the session would have expired; in a file, when there is one, so that
// a restart revokes them still.
type revocations struct {
	mu   sync.Mutex
	file string
	ids  map[string]int64 // ID: when the session expires, Unix seconds
	now  func() time.Time
}

func loadRevocations(file string, now func() time.Time) (*revocations, error) {
	rv := &revocations{file: file, ids: map[string]int64{}, now: now}
	if file == "" {
		return rv, nil
	}
	raw, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return rv, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the revoked sessions: %w", err)
	}
	if err := json.Unmarshal(raw, &rv.ids); err != nil {
		return nil, fmt.Errorf("the revoked sessions %s: %w", file, err)
	}
	return rv, nil
}

func (rv *revocations) has(id string) bool {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	_, ok := rv.ids[id]
	return ok
}

// revoke ends the session id, which would have lasted until expires.
func (rv *revocations) revoke(id string, expires time.Time) error {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	now := rv.now().Unix()
	maps.DeleteFunc(rv.ids, func(_ string, until int64) bool { return until < now })
	rv.ids[id] = expires.Unix()
	if rv.file == "" {
		return nil
	}
	raw, err := json.Marshal(rv.ids)
	if err != nil {
		return err
	}
	return atomicfile.Write(rv.file, raw, 0o600)
}
