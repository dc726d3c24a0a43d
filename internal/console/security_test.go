package console

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// hostile is an API server stand-in whose every answer is what a
// tenant's pod would serve through a proxy: a page with a script, and a
// cookie for the console's origin. The console must never pass a
// request for a workload's content, and must make anything it passes
// inert.
func hostile(t *testing.T) (*httptest.Server, *atomic.Value) {
	t.Helper()
	var last atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		last.Store(r.Clone(r.Context()))
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Set-Cookie", SessionCookie+"=attacker; Path=/")
		_, _ = w.Write([]byte(`<script>fetch("/api/session").then(r => r.json()).then(s => fetch("/api/kubernetes/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {method: "POST", headers: {"X-CSRF-Token": s.csrf}}))</script>`))
	}))
	t.Cleanup(srv.Close)
	return srv, &last
}

// A tenant's page cannot reach the console's origin: the proxy, exec,
// attach and port-forward subresources are refused before the API is
// asked, and whatever else comes back is sandboxed, cookie-less and,
// unless it is one of the API's formats, a download.
func TestWorkloadContentNeverComesFromTheConsolesOrigin(t *testing.T) {
	api, last := hostile(t)
	s, err := New(Options{API: &rest.Config{Host: api.URL + "/k8s/clusters/c1"}})
	if err != nil {
		t.Fatal(err)
	}
	cookie := &http.Cookie{Name: SessionCookie, Value: sealedCookie(t, s, time.Hour)}
	do := func(method, path string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, nil)
		asPage(req, cookie.Name, cookie.Value)
		req.Header.Set("X-CSRF-Token", "the-csrf")
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		return rec
	}
	for _, path := range []string{
		"/api/v1/namespaces/tenant/services/http:evil:80/proxy/",
		"/api/v1/namespaces/tenant/services/evil/proxy/x.js",
		"/api/v1/namespaces/tenant/pods/evil:8080/proxy/index.html",
		"/api/v1/nodes/worker-0/proxy/logs/",
		"/api/v1/proxy/namespaces/tenant/services/evil/",
		"/api/v1/namespaces/tenant/pods/evil/exec?command=sh",
		"/api/v1/namespaces/tenant/pods/evil/attach",
		"/api/v1/namespaces/tenant/pods/evil/portforward",
	} {
		last.Store((*http.Request)(nil))
		for _, method := range []string{"GET", "POST"} {
			rec := do(method, "/api/kubernetes"+path)
			if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "does not pass") {
				t.Errorf("%s %s: %d %s, want 403", method, path, rec.Code, rec.Body.String())
			}
		}
		if r, _ := last.Load().(*http.Request); r != nil {
			t.Errorf("%s reached the API", path)
		}
	}

	// A ConfigMap named proxy is no subresource: it passes, under the
	// API's base path, with the user's token and not the console's
	// cookie; what comes back is inert.
	rec := do("GET", "/api/kubernetes/api/v1/namespaces/tenant/configmaps/proxy")
	if rec.Code != http.StatusOK {
		t.Fatalf("a ConfigMap named proxy: %d %s", rec.Code, rec.Body.String())
	}
	r := last.Load().(*http.Request)
	if r.URL.Path != "/k8s/clusters/c1/api/v1/namespaces/tenant/configmaps/proxy" || r.Header.Get("Authorization") != "Bearer t" ||
		r.Header.Get("Cookie") != "" || r.Header.Get("X-CSRF-Token") != "" || r.Header.Get(SessionHeader) != "" {
		t.Errorf("the API was asked %s with Authorization %q, Cookie %q, X-CSRF-Token %q", r.URL.Path,
			r.Header.Get("Authorization"), r.Header.Get("Cookie"), r.Header.Get("X-CSRF-Token"))
	}
	if csp := rec.Header().Values("Content-Security-Policy"); len(csp) != 1 || !strings.HasPrefix(csp[0], "sandbox;") {
		t.Errorf("a proxied answer's Content-Security-Policy is %q, want one, a sandbox", csp)
	}
	if rec.Header().Get("Set-Cookie") != "" {
		t.Errorf("a proxied answer sets a cookie: %q", rec.Header().Get("Set-Cookie"))
	}
	if cd := rec.Header().Get("Content-Disposition"); cd != "attachment" {
		t.Errorf("proxied HTML is shown (Content-Disposition %q), want a download", cd)
	}
}

// Sessions live in their sealed cookies: another replica with the same
// key serves them, one with another key does not, and an expired,
// altered or forged cookie is refused.
func TestSessionsSurviveAReplicaChange(t *testing.T) {
	key := NewSessionKey()
	replica := func(key []byte) *Server {
		s, err := New(Options{API: &rest.Config{Host: "https://127.0.0.1:1"}, SessionKey: key})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b, other := replica(key), replica(key), replica(NewSessionKey())
	value := sealedCookie(t, a, time.Hour)
	session := func(s *Server, value string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", "/api/session", nil)
		asPage(req, SessionCookie, value)
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		return rec
	}
	if rec := session(b, value); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"csrf":"the-csrf"`) {
		t.Errorf("a session sealed by one replica, on another: %d %s", rec.Code, rec.Body.String())
	}
	altered := []byte(value)
	altered[len(altered)/2] ^= 1
	for name, tc := range map[string]struct {
		s     *Server
		value string
	}{
		"another key": {other, value},
		"expired":     {b, sealedCookie(t, a, -time.Second)},
		"altered":     {b, string(altered)},
		"forged":      {b, "c2Vzc2lvbg"},
	} {
		if rec := session(tc.s, tc.value); rec.Code != http.StatusUnauthorized {
			t.Errorf("a session cookie, %s: %d %s, want 401", name, rec.Code, rec.Body.String())
		}
	}
	if _, err := New(Options{API: &rest.Config{Host: "https://127.0.0.1:1"}, SessionKey: []byte("short")}); err == nil {
		t.Error("a 5-byte session key was taken")
	}
}

// Another site can neither log its visitor in as someone else (a form
// posts text/plain or comes from its own origin) nor log them out (no
// CSRF token); behind TLS the cookie is Secure and __Host- named.
func TestLoginAndLogoutRefuseOtherSites(t *testing.T) {
	s, value := newTestServer(t)
	for _, tc := range []struct {
		name    string
		headers map[string]string
		want    string
	}{
		{"a text/plain form", map[string]string{"Content-Type": "text/plain"}, "want Content-Type application/json"},
		{"another origin", map[string]string{"Content-Type": "application/json", "Origin": "http://evil.example"}, `origin \"http://evil.example\" is refused`},
		{"another site", map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, "Sec-Fetch-Site cross-site"},
	} {
		req := httptest.NewRequest("POST", "http://console.example/api/login", strings.NewReader(`{"token":"x=","token":"attacker"}`))
		for k, v := range tc.headers {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), tc.want) || rec.Header().Get("Set-Cookie") != "" {
			t.Errorf("login, %s: %d %s, want 403 with %q and no cookie", tc.name, rec.Code, rec.Body.String(), tc.want)
		}
	}
	req := httptest.NewRequest("POST", "/api/logout", nil)
	asPage(req, SessionCookie, value)
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden || rec.Header().Get("Set-Cookie") != "" {
		t.Errorf("logout without the CSRF token: %d %s", rec.Code, rec.Body.String())
	}

	secure, err := New(Options{API: &rest.Config{Host: "https://127.0.0.1:1"}, SecureCookies: true})
	if err != nil {
		t.Fatal(err)
	}
	req = httptest.NewRequest("POST", "/api/logout", nil)
	asPage(req, "__Host-"+SessionCookie, sealedCookie(t, secure, time.Hour))
	req.Header.Set("X-CSRF-Token", "the-csrf")
	rec = httptest.NewRecorder()
	secure.Handler().ServeHTTP(rec, req)
	if c := rec.Header().Get("Set-Cookie"); rec.Code != http.StatusNoContent || !strings.HasPrefix(c, "__Host-"+SessionCookie+"=;") || !strings.Contains(c, "Secure") {
		t.Errorf("logout behind TLS: %d, Set-Cookie %q, want a cleared Secure __Host- cookie", rec.Code, c)
	}
}
