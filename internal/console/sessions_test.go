package console

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/capstan-dev/capstan/internal/certs"
)

// standIn is an API server stand-in: it knows one token, alice's, which
// a SelfSubjectReview names; it answers any other request with an empty
// list, or a WebSocket's handshake with a switch, and records the
// headers the console sent it.
type standIn struct {
	*httptest.Server
	mu   sync.Mutex
	seen []http.Header
	// gate, when set, holds every request but a login's until closed,
	// and then answers it 404.
	gate chan struct{}
}

const aliceToken = "alice-token"

func newStandIn(t *testing.T) *standIn {
	t.Helper()
	a := &standIn{}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+aliceToken {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Unauthorized","code":401}`))
			return
		}
		if r.URL.Path == "/apis/authentication.k8s.io/v1/selfsubjectreviews" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"kind":"SelfSubjectReview","apiVersion":"authentication.k8s.io/v1","status":{"userInfo":{"username":"alice","groups":["system:authenticated"]}}}`))
			return
		}
		a.mu.Lock()
		a.seen = append(a.seen, r.Header.Clone())
		gate := a.gate
		a.mu.Unlock()
		if gate != nil {
			<-gate
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`))
			return
		}
		if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			conn, rw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: x\r\n\r\n")
			_ = rw.Flush()
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"SecretList","apiVersion":"v1","items":[]}`))
	}))
	t.Cleanup(a.Close)
	return a
}

// last is the headers of the last request the console passed on.
func (a *standIn) last() http.Header {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.seen) == 0 {
		return nil
	}
	return a.seen[len(a.seen)-1]
}

// login logs alice in on the console at base, as the page does, and
// returns her session's cookie and secret.
func login(t *testing.T, base string) (*http.Cookie, string) {
	t.Helper()
	resp, err := http.Post(base+"/api/login", "application/json", strings.NewReader(`{"token":"`+aliceToken+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v sessionJSON
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != http.StatusOK || v.Secret == "" || len(resp.Cookies()) != 1 {
		t.Fatalf("logging in: %d %+v %v", resp.StatusCode, v, err)
	}
	return resp.Cookies()[0], v.Secret
}

// H1: the session's cookie reaches every server of the console's host
// (browsers keep cookies apart by host, not by port), so the cookie
// alone must be worth nothing. Replayed without the secret that only
// the console's page holds, it gets 401 from the session, the API proxy
// and a watch's WebSocket; a session logged out gets 401 even with its
// secret, after a restart too; a new session key ends every session.
func TestAReplayedCookieIsNoSession(t *testing.T) {
	api := newStandIn(t)
	key := NewSessionKey()
	revoked := filepath.Join(t.TempDir(), "revoked.json")
	start := func(key []byte) *httptest.Server {
		s, err := New(Options{API: &rest.Config{Host: api.URL}, SessionKey: key, RevocationFile: revoked})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(s.Handler())
		t.Cleanup(srv.Close)
		return srv
	}
	console := start(key)
	cookie, secret := login(t, console.URL)

	do := func(base, method, path, secret string, headers ...string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, nil)
		req.AddCookie(cookie)
		if secret != "" {
			req.Header.Set(SessionHeader, secret)
		}
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
		return resp.StatusCode, resp.Header.Get("Sec-WebSocket-Protocol") + b.String()
	}
	ws := []string{"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==", "Origin", console.URL}

	// The attacker's replay: the cookie, no secret, or a guessed one.
	for _, tc := range []struct {
		name, method, path, secret string
		headers                    []string
	}{
		{"the session", "GET", "/api/session", "", nil},
		{"the API proxy", "GET", "/api/kubernetes/api/v1/secrets", "", nil},
		{"a write", "POST", "/api/kubernetes/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", "", []string{"X-CSRF-Token", "guessed"}},
		{"a watch's WebSocket", "GET", "/api/kubernetes/api/v1/secrets?watch=1", "", ws},
		{"a WebSocket with another subprotocol", "GET", "/api/kubernetes/api/v1/secrets?watch=1", "", append(ws, "Sec-WebSocket-Protocol", sessionProtocol+"guessed")},
		{"a guessed secret", "GET", "/api/session", "guessed", nil},
	} {
		if code, body := do(console.URL, tc.method, tc.path, tc.secret, tc.headers...); code != http.StatusUnauthorized || !strings.Contains(body, "not logged in") {
			t.Errorf("the cookie replayed without the secret, %s: %d %s, want 401", tc.name, code, body)
		}
	}
	if h := api.last(); h != nil {
		t.Errorf("a replayed cookie reached the API: %v", h)
	}

	// The page: the cookie and the secret, as a header or, in a
	// WebSocket's handshake, its subprotocol. The API sees alice's
	// token and never the secret.
	if code, body := do(console.URL, "GET", "/api/session", secret); code != http.StatusOK || !strings.Contains(body, `"user":"alice"`) || strings.Contains(body, secret) {
		t.Errorf("the page's own session: %d %s", code, body)
	}
	if code, body := do(console.URL, "GET", "/api/kubernetes/api/v1/secrets", secret); code != http.StatusOK || api.last().Get("Authorization") != "Bearer "+aliceToken || api.last().Get(SessionHeader) != "" {
		t.Errorf("the page's API call: %d %s, the API saw %v", code, body, api.last())
	}
	proto := sessionProtocol + secret
	if code, body := do(console.URL, "GET", "/api/kubernetes/api/v1/secrets?watch=1", "", append(ws, "Sec-WebSocket-Protocol", proto)...); code != http.StatusSwitchingProtocols || !strings.HasPrefix(body, proto) {
		t.Errorf("the page's watch: %d, subprotocol %q, want 101 naming %q", code, body, proto)
	}
	if h := api.last(); h.Get("Sec-WebSocket-Protocol") != "" || h.Get("Authorization") != "Bearer "+aliceToken {
		t.Errorf("the API saw the watch's handshake with Sec-WebSocket-Protocol %q, Authorization %q", h.Get("Sec-WebSocket-Protocol"), h.Get("Authorization"))
	}

	// L6: a hop-by-hop "Connection: Authorization" strips nothing the
	// console adds.
	if code, _ := do(console.URL, "GET", "/api/kubernetes/api/v1/secrets", secret, "Connection", "Authorization"); code != http.StatusOK || api.last().Get("Authorization") != "Bearer "+aliceToken {
		t.Errorf("with Connection: Authorization: %d, the API saw Authorization %q", code, api.last().Get("Authorization"))
	}

	// M2: a browser's request from another site of the host (another
	// port is same-site) is refused, whatever it carries.
	for _, site := range []string{"same-site", "cross-site"} {
		if code, body := do(console.URL, "GET", "/api/session", secret, "Sec-Fetch-Site", site); code != http.StatusForbidden || !strings.Contains(body, "Sec-Fetch-Site "+site) {
			t.Errorf("Sec-Fetch-Site %s: %d %s, want 403", site, code, body)
		}
	}

	// A logout ends the session for good: on this console, and on the
	// next one to start with the same key.
	var csrf struct {
		CSRF string `json:"csrf"`
	}
	_, body := do(console.URL, "GET", "/api/session", secret)
	_ = json.Unmarshal([]byte(body), &csrf)
	if code, body := do(console.URL, "POST", "/api/logout", secret, "X-CSRF-Token", csrf.CSRF); code != http.StatusNoContent {
		t.Fatalf("logging out: %d %s", code, body)
	}
	restarted := start(key)
	for name, base := range map[string]string{"the same console": console.URL, "a restarted console": restarted.URL} {
		for _, path := range []string{"/api/session", "/api/kubernetes/api/v1/secrets"} {
			if code, body := do(base, "GET", path, secret); code != http.StatusUnauthorized || !strings.Contains(body, "logged out") {
				t.Errorf("a session used after its logout, %s, %s: %d %s, want 401", name, path, code, body)
			}
		}
	}

	// A new key ends every session.
	cookie, secret = login(t, restarted.URL)
	if code, body := do(restarted.URL, "GET", "/api/session", secret); code != http.StatusOK {
		t.Fatalf("a new session: %d %s", code, body)
	}
	rotated := start(NewSessionKey())
	if code, body := do(rotated.URL, "GET", "/api/session", secret); code != http.StatusUnauthorized {
		t.Errorf("a session after the key's rotation: %d %s, want 401", code, body)
	}
}

// M4 and L3: off loopback the console needs a certificate, and serves
// HTTPS with HSTS and Secure cookies; on loopback it serves plain HTTP to
// loopback Host names only (a page of another name resolved to
// 127.0.0.1, DNS rebinding, gets 421).
func TestTheConsoleServesTLSOrLoopbackOnly(t *testing.T) {
	for addr, want := range map[string]string{
		"0.0.0.0:9000": `"0.0.0.0" is not a loopback address: the console serves plain HTTP only on loopback`,
		":9000":        "every interface is not loopback only: the console serves plain HTTP only on loopback",
		"10.0.0.1:80":  `"10.0.0.1" is not a loopback address`,
	} {
		if err := CheckAddress(addr, Options{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckAddress(%s) without TLS = %v, want %q", addr, err, want)
		}
	}
	if err := CheckAddress("127.0.0.1:9000", Options{}); err != nil {
		t.Errorf("a loopback console: %v", err)
	}
	if err := CheckAddress("0.0.0.0:9000", Options{TLSCertFile: "x.crt"}); err == nil || !strings.Contains(err.Error(), "needs its key") {
		t.Errorf("a certificate without its key: %v", err)
	}

	dir := t.TempDir()
	ca, err := certs.LoadOrCreateCA(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key"), "test-ca")
	if err != nil {
		t.Fatal(err)
	}
	crt, key := filepath.Join(dir, "console.crt"), filepath.Join(dir, "console.key")
	if err := ca.EnsureLeaf(crt, key, certs.LeafSpec{CommonName: "console", IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true}); err != nil {
		t.Fatal(err)
	}
	if err := CheckAddress("0.0.0.0:9000", Options{TLSCertFile: crt, TLSKeyFile: key}); err != nil {
		t.Errorf("a console with a certificate, off loopback: %v", err)
	}
	api := newStandIn(t)
	serve := func(opts Options) string {
		s, err := New(opts)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Serve(ctx, ln) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
		return s.Scheme() + "://" + ln.Addr().String()
	}

	base := serve(Options{API: &rest.Config{Host: api.URL}, TLSCertFile: crt, TLSKeyFile: key})
	roots := x509.NewCertPool()
	pem, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	roots.AppendCertsFromPEM(pem)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	resp, err := client.Post(base+"/api/login", "application/json", strings.NewReader(`{"token":"`+aliceToken+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !strings.HasPrefix(base, "https://") || resp.StatusCode != http.StatusOK || resp.Header.Get("Strict-Transport-Security") == "" ||
		len(resp.Cookies()) != 1 || !resp.Cookies()[0].Secure {
		t.Errorf("a login over TLS at %s: %d, HSTS %q, cookies %v", base, resp.StatusCode, resp.Header.Get("Strict-Transport-Security"), resp.Cookies())
	}

	plain := serve(Options{API: &rest.Config{Host: api.URL}})
	for host, want := range map[string]int{"": http.StatusOK, "localhost": http.StatusOK, "attacker.example": http.StatusMisdirectedRequest} {
		req, _ := http.NewRequest("GET", plain+"/", nil)
		if host != "" {
			req.Host = host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("plain HTTP, Host %q: %d, want %d", host, resp.StatusCode, want)
		}
	}
}

// M2: explanations read the whole cluster into memory, so however many
// are asked for at once, at most MaxBuilders are computed: the rest get
// 429 at once.
func TestExplanationsAreBounded(t *testing.T) {
	api := newStandIn(t)
	gate := make(chan struct{})
	api.mu.Lock()
	api.gate = gate
	api.mu.Unlock()
	s, err := New(Options{API: &rest.Config{Host: api.URL}})
	if err != nil {
		t.Fatal(err)
	}
	console := httptest.NewServer(s.Handler())
	t.Cleanup(console.Close)
	cookie, secret := login(t, console.URL)
	const asks = 50
	codes := make(chan int, asks)
	var wg sync.WaitGroup
	for i := range asks {
		wg.Go(func() {
			path := fmt.Sprintf("/api/capstan/pods/default/pod-%d/explain", i)
			if i%2 == 1 {
				path = "/api/capstan/nodes/explain"
			}
			req, _ := http.NewRequest("GET", console.URL+path, nil)
			req.AddCookie(cookie)
			req.Header.Set(SessionHeader, secret)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		})
	}
	// Every ask beyond the bound is answered while the bound's own wait
	// on the API.
	refused := 0
	timeout := time.After(time.Minute)
	for refused < asks-MaxBuilders {
		select {
		case c := <-codes:
			if c != http.StatusTooManyRequests {
				t.Fatalf("an explanation answered %d while %d others were being computed", c, MaxBuilders)
			}
			refused++
		case <-timeout:
			close(gate)
			t.Fatalf("of %d explanations asked at once, %d were refused in a minute, want %d (all but %d)", asks, refused, asks-MaxBuilders, MaxBuilders)
		}
	}
	close(gate)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c == http.StatusTooManyRequests {
			t.Errorf("an explanation within the bound got 429")
		}
	}
	if p := s.explained.peak.Load(); p > MaxBuilders || p == 0 {
		t.Errorf("%d explanations were computed at once, want at most %d", p, MaxBuilders)
	}
}
