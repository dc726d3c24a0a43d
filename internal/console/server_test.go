package console

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

func newTestServer(t *testing.T) (*Server, string) {
	t.Helper()
	// The API is never reached: these requests stop at the session.
	s, err := New(Options{API: &rest.Config{Host: "https://127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	return s, sealedCookie(t, s, time.Hour)
}

// testSecret is the browser-held secret of the sessions sealedCookie
// makes.
const testSecret = "the-page's-secret"

// sealedCookie is the cookie value of alice's session on s, ending in d.
func sealedCookie(t *testing.T, s *Server, d time.Duration) string {
	t.Helper()
	v, err := s.seal(&session{id: "session-" + randomString(), token: "t", user: "alice", csrf: "the-csrf", secretDigest: secretDigest(testSecret), expires: time.Now().Add(d)})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// asPage makes req one the console's page sends in the session whose
// cookie is value: the cookie, and the secret.
func asPage(req *http.Request, name, value string) *http.Request {
	req.AddCookie(&http.Cookie{Name: name, Value: value})
	req.Header.Set(SessionHeader, testSecret)
	return req
}

// Nothing but the login page and its assets answers without a session,
// and nothing that changes anything answers without the session's CSRF
// token.
func TestSessionsAndCSRF(t *testing.T) {
	s, id := newTestServer(t)
	h := s.Handler()
	cookie := &http.Cookie{Name: SessionCookie, Value: id}
	for _, tc := range []struct {
		method, path string
		cookie       *http.Cookie
		csrf         string
		want         int
		body         string
	}{
		{"GET", "/api/kubernetes/api/v1/nodes", nil, "", http.StatusUnauthorized, "not logged in"},
		{"GET", "/api/kubernetes/api/v1/nodes", &http.Cookie{Name: SessionCookie, Value: "forged"}, "", http.StatusUnauthorized, "not logged in"},
		{"GET", "/api/session", cookie, "", http.StatusOK, `"user":"alice"`},
		{"PATCH", "/api/kubernetes/api/v1/nodes/n", cookie, "", http.StatusForbidden, "X-CSRF-Token"},
		{"PATCH", "/api/kubernetes/api/v1/nodes/n", cookie, "wrong", http.StatusForbidden, "X-CSRF-Token"},
		{"POST", "/api/capstan/nodes/n/drain", cookie, "", http.StatusForbidden, "X-CSRF-Token"},
		{"POST", "/api/capstan/nodes/Not_A_Name/drain", cookie, "the-csrf", http.StatusBadRequest, `name \"Not_A_Name\"`},
		{"GET", "/api/prometheus/api/v1/alerts", cookie, "", http.StatusServiceUnavailable, "no Prometheus"},
		{"GET", "/", nil, "", http.StatusOK, "<title>capstan console</title>"},
		{"GET", "/assets/app.js", nil, "", http.StatusOK, "class Watch"},
		{"GET", "/login?code=unknown", nil, "", http.StatusSeeOther, ""},
	} {
		req := httptest.NewRequest(tc.method, tc.path, nil)
		if tc.cookie != nil {
			asPage(req, tc.cookie.Name, tc.cookie.Value)
		}
		if tc.csrf != "" {
			req.Header.Set("X-CSRF-Token", tc.csrf)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.want || !strings.Contains(rec.Body.String(), tc.body) {
			t.Errorf("%s %s: %d %s, want %d with %q", tc.method, tc.path, rec.Code, rec.Body.String(), tc.want, tc.body)
		}
		if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("%s %s: Content-Security-Policy %q", tc.method, tc.path, csp)
		}
	}
}

// A login link logs in once: the second use is refused, as is an expired
// one.
func TestLoginLinksAreOneTime(t *testing.T) {
	s, _ := newTestServer(t)
	link := s.LoginLink("http://console", "token")
	code := link[strings.Index(link, "code=")+len("code="):]
	s.mu.Lock()
	_, ok := s.links[code]
	s.mu.Unlock()
	if !ok || !strings.HasPrefix(link, "http://console/login?code=") {
		t.Fatalf("link %q not kept", link)
	}
	// A visit spends nothing (a link preview, a prefetch): it leads to
	// the page, which posts the code.
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/login?code="+code, nil))
	if loc := rec.Header().Get("Location"); loc != "/#/login?link="+code || rec.Header().Get("Set-Cookie") != "" {
		t.Errorf("a visit to a link went to %q, Set-Cookie %q", loc, rec.Header().Get("Set-Cookie"))
	}
	post := func(code string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("POST", "/api/login", strings.NewReader(`{"code":"`+code+`"}`))
		req.Header.Set("Content-Type", "application/json")
		s.Handler().ServeHTTP(rec, req)
		return rec
	}
	// Spent by the page's post (whose login then fails: no API server
	// here), and refused the second time.
	if rec := post(code); rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), "asking the API server") {
		t.Errorf("the first use of a link: %d %s", rec.Code, rec.Body.String())
	}
	if rec := post(code); rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), "used already or has expired") {
		t.Errorf("the second use of a link: %d %s", rec.Code, rec.Body.String())
	}
	// Expired.
	late := s.LoginLink("http://console", "token")
	s.now = func() time.Time { return time.Now().Add(loginLinkTTL + time.Second) }
	if rec := post(late[strings.Index(late, "code=")+len("code="):]); rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), "used already or has expired") {
		t.Errorf("an expired link: %d %s", rec.Code, rec.Body.String())
	}
}

func TestParseReplicas(t *testing.T) {
	for in, want := range map[string]string{
		`3`: "3", `"3"`: "3", `" 12 "`: "12", `0`: "0",
		`"two"`: `replicas "two" is not a whole number`, `1.5`: `replicas "1.5" is not a whole number`,
		`-1`: "replicas -1 is out of range: from 0 to 1000", `1001`: "replicas 1001 is out of range: from 0 to 1000",
		``: "replicas is required", `null`: "replicas is required",
	} {
		n, err := parseReplicas(json.RawMessage(in))
		got := ""
		if err != nil {
			got = err.Error()
		} else {
			got = strconv.Itoa(n)
		}
		if got != want {
			t.Errorf("parseReplicas(%s) = %q, want %q", in, got, want)
		}
	}
}

// A watch's WebSocket from another origin is refused: its handshake
// carries the cookie but no CSRF header.
func TestWebSocketsFromAnotherOriginAreRefused(t *testing.T) {
	s, id := newTestServer(t)
	req := httptest.NewRequest("GET", "http://127.0.0.1:9000/api/kubernetes/api/v1/nodes?watch=1", nil)
	asPage(req, SessionCookie, id)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Origin", "http://evil.example")
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), `origin \"http://evil.example\" is refused`) {
		t.Errorf("a cross-origin WebSocket: %d %s", rec.Code, rec.Body.String())
	}
}
