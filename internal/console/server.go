// Package console is capstan's web console: the cluster, its pending pods
// and why, its machines, autoscaler, updates and pools, live in the
// browser.
//
// Like OpenShift's console (its "bridge"), the server holds no rights of
// its own. A person logs in with a bearer token; the server keeps it in a
// session and makes every API call as that user: the pages read the
// Kubernetes API through a proxy that adds the user's token (lists and
// watches, so every page is live), the Prometheus API through the
// cluster's thanos-querier with the same token, and the few answers only
// capstan computes (why a pod is pending, why a node stays, an update's
// decision) are computed with a client built from that token, so RBAC
// applies to all of it.
package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/capstan-dev/capstan/internal/ports"
	"github.com/capstan-dev/capstan/internal/scheduler/policy"
)

//go:embed assets
var assets embed.FS

// SessionCookie names the session's cookie.
const SessionCookie = "capstan-console-session"

// Lifetimes of a session and of a one-time login link. A session lasts
// a working day, not the bearer token's lifetime: whoever logs in again
// tomorrow shows the token again.
const (
	sessionTTL   = 8 * time.Hour
	loginLinkTTL = 10 * time.Minute
)

// Options configure a console.
type Options struct {
	// API is where the Kubernetes API is: its host and how to trust it.
	// Its credentials are never used: every call carries the user's
	// token.
	API *rest.Config
	// PrometheusURL is a Prometheus API (the thanos-querier) that
	// accepts the user's bearer token; empty: the console shows no
	// alerts or charts, and says so.
	PrometheusURL string
	// PrometheusTLS trusts PrometheusURL's certificate (nil: the
	// system's roots).
	PrometheusTLS *tls.Config
	// Policy is the scheduler Policy pending pods are explained with
	// (nil: the default policy).
	Policy *policy.Policy
	Logger *slog.Logger
	// SessionKey seals sessions into their cookies (32 bytes; nil: a
	// random key, and sessions last as long as the process). Replicas
	// that share it share their sessions.
	SessionKey []byte
	// SecureCookies marks the session cookie Secure (and names it
	// __Host-...): set it when the console is served over HTTPS, as
	// behind a Route or an Ingress that terminates TLS. A request that
	// came over TLS gets a Secure cookie anyway.
	SecureCookies bool
	// RevocationFile keeps the IDs of the sessions logged out until they
	// would have expired, so that a restart of the console revokes them
	// still (empty: in memory; a new SessionKey ends every session
	// anyway).
	RevocationFile string
	// TLSCertFile and TLSKeyFile, when set, serve the console over HTTPS
	// (with HSTS). Without them it serves plain HTTP, and only on a
	// loopback address (see CheckAddress).
	TLSCertFile, TLSKeyFile string
}

// CheckAddress refuses to serve a console on addr as opts would: plain
// HTTP carries the pasted tokens, the login links and the session
// cookies in the clear, so it is served on loopback only; anywhere else
// the console needs a certificate.
func CheckAddress(addr string, opts Options) error {
	if (opts.TLSCertFile == "") != (opts.TLSKeyFile == "") {
		return errors.New("a TLS certificate needs its key, and a key its certificate")
	}
	if opts.TLSCertFile != "" {
		if _, err := tls.LoadX509KeyPair(opts.TLSCertFile, opts.TLSKeyFile); err != nil {
			return fmt.Errorf("the TLS certificate and key: %w", err)
		}
		return nil
	}
	if err := ports.LoopbackOnly(addr); err != nil {
		return fmt.Errorf("%w: the console serves plain HTTP only on loopback (tokens, login links and session cookies would cross the network in the clear); give it a TLS certificate and key to serve it there", err)
	}
	return nil
}

// Server is a console.
type Server struct {
	opts   Options
	mux    *http.ServeMux
	api    *httputil.ReverseProxy
	prom   *httputil.ReverseProxy
	apiURL *url.URL

	sessionKey []byte
	revoked    *revocations
	reqInfo    *request.RequestInfoFactory
	explained  *explanations
	drains     drains

	mu    sync.Mutex
	links map[string]loginLink
	now   func() time.Time
}

type session struct {
	id     string
	token  string
	user   string
	groups []string
	csrf   string
	// secretDigest is the digest of the secret only the page holds;
	// secret itself is known only while the login is answered.
	secretDigest, secret string
	expires              time.Time
}

type loginLink struct {
	token   string
	expires time.Time
}

// New makes a console over the API that cfg points at.
func New(opts Options) (*Server, error) {
	if opts.API == nil || opts.API.Host == "" {
		return nil, errors.New("console: no API server to talk to")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Policy == nil {
		opts.Policy = policy.Default()
	}
	if opts.SessionKey == nil {
		opts.SessionKey = NewSessionKey()
	}
	if len(opts.SessionKey) != 32 {
		return nil, fmt.Errorf("console: the session key has %d bytes, want 32", len(opts.SessionKey))
	}
	s := &Server{opts: opts, mux: http.NewServeMux(), links: map[string]loginLink{}, now: time.Now, sessionKey: opts.SessionKey, explained: newExplanations(),
		reqInfo: &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}}
	revoked, err := loadRevocations(opts.RevocationFile, func() time.Time { return s.now() })
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	s.revoked = revoked
	anon := anonymous(opts.API)
	transport, err := rest.TransportFor(anon)
	if err != nil {
		return nil, fmt.Errorf("console: the API's transport: %w", err)
	}
	host, _, err := rest.DefaultServerUrlFor(anon)
	if err != nil {
		return nil, fmt.Errorf("console: the API's address %q: %w", opts.API.Host, err)
	}
	s.apiURL = host
	s.api = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(host)
			// The API's own base path (a gateway's /k8s/clusters/ID) stays.
			pr.Out.URL.Path = strings.TrimSuffix(host.Path, "/") + strings.TrimPrefix(pr.In.URL.Path, "/api/kubernetes")
			pr.Out.URL.RawPath = ""
			pr.SetXForwarded()
			withUserToken(pr)
		},
		Transport:     transport,
		FlushInterval: -1, // watches stream
		ErrorHandler:  s.proxyError,
		ModifyResponse: func(resp *http.Response) error {
			// A WebSocket's handshake gets back the subprotocol the page
			// asked for (the one that carried its secret), which the API
			// never saw: a browser fails a handshake whose answer names
			// none.
			if p, ok := resp.Request.Context().Value(wsProtocolKey{}).(string); ok && resp.StatusCode == http.StatusSwitchingProtocols {
				resp.Header.Set("Sec-WebSocket-Protocol", p)
			}
			return inert(resp)
		},
	}
	if opts.PrometheusURL != "" {
		pu, err := url.Parse(opts.PrometheusURL)
		if err != nil || pu.Host == "" {
			return nil, fmt.Errorf("console: the Prometheus URL %q is not a URL", opts.PrometheusURL)
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = opts.PrometheusTLS
		s.prom = &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(pu)
				pr.Out.URL.Path = strings.TrimSuffix(pu.Path, "/") + strings.TrimPrefix(pr.In.URL.Path, "/api/prometheus")
				pr.Out.URL.RawPath = ""
				pr.SetXForwarded()
				withUserToken(pr)
			},
			Transport:      tr,
			ErrorHandler:   s.proxyError,
			ModifyResponse: inert,
		}
	}
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, err
	}
	files := http.FileServerFS(static)
	s.mux.Handle("GET /assets/", http.StripPrefix("/assets/", noCache(files)))
	s.mux.HandleFunc("GET /{$}", s.index)
	s.mux.HandleFunc("GET /login", s.loginWithLink)
	s.mux.HandleFunc("POST /api/login", s.login)
	s.mux.HandleFunc("POST /api/logout", s.withSession(s.logout))
	s.mux.HandleFunc("GET /api/session", s.withSession(s.sessionInfo))
	s.mux.HandleFunc("/api/kubernetes/", s.withSession(s.proxyAPI))
	s.mux.HandleFunc("GET /api/prometheus/", s.withSession(s.proxyPrometheus))
	s.routeActions()
	return s, nil
}

// anonymous is cfg with its credentials taken away: the host and the CA
// stay.
func anonymous(cfg *rest.Config) *rest.Config {
	a := rest.AnonymousClientConfig(cfg)
	a.QPS, a.Burst = -1, -1
	return a
}

// Handler serves the console.
func (s *Server) Handler() http.Handler {
	return securityHeaders(s.mux)
}

// Scheme is the console's URL scheme: https when it has a certificate.
func (s *Server) Scheme() string {
	if s.opts.TLSCertFile != "" {
		return "https"
	}
	return "http"
}

// Serve serves the console on ln until ctx ends: over TLS with HSTS when
// it has a certificate; else plain HTTP, on loopback, to loopback Host
// names only (a page of another name resolved to 127.0.0.1 would read
// the console as its own origin).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	h := s.Handler()
	if s.opts.TLSCertFile == "" {
		h = ports.LoopbackHosts(h)
	} else {
		inner := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Strict-Transport-Security", "max-age=31536000")
			inner.ServeHTTP(w, r)
		})
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12}}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		_ = srv.Close()
	}()
	var err error
	if s.opts.TLSCertFile != "" {
		err = srv.ServeTLS(ln, s.opts.TLSCertFile, s.opts.TLSKeyFile)
	} else {
		err = srv.Serve(ln)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// LoginLink makes a link that logs its first visitor in with token, once,
// within ten minutes: what `capstan up` prints for its admin.
func (s *Server) LoginLink(base, token string) string {
	code := randomString()
	s.mu.Lock()
	for k, old := range s.links {
		if s.now().After(old.expires) {
			delete(s.links, k)
		}
	}
	s.links[code] = loginLink{token: token, expires: s.now().Add(loginLinkTTL)}
	s.mu.Unlock()
	return strings.TrimSuffix(base, "/") + "/login?code=" + url.QueryEscape(code)
}

func randomString() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'")
		w.Header().Set("Cross-Origin-Opener-Policy", "same-origin")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		h.ServeHTTP(w, r)
	})
}

func noCache(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		h.ServeHTTP(w, r)
	})
}

func (s *Server) index(w http.ResponseWriter, r *http.Request) {
	page, err := assets.ReadFile("assets/index.html")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(page)
}

// apiError is every error the console's own endpoints answer: the
// message a page shows, and the status.
type apiError struct {
	Status  int    `json:"status"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, format string, args ...any) {
	writeJSON(w, status, apiError{Status: status, Message: fmt.Sprintf(format, args...)})
}

// writeAPIError answers with the status and message of an API error (a
// Forbidden stays a 403 and says what was refused).
func writeAPIError(w http.ResponseWriter, err error) {
	writeError(w, statusOf(err), "%s", err.Error())
}

// statusOf is an error's API status. A drain's errors come aggregated,
// without their status: a refusal among them is still a 403.
func statusOf(err error) int {
	var se apierrors.APIStatus
	if errors.As(err, &se) && se.Status().Code != 0 {
		return int(se.Status().Code)
	}
	if strings.Contains(err.Error(), "forbidden") {
		return http.StatusForbidden
	}
	return http.StatusInternalServerError
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// readJSON decodes a request body of at most 64 KiB, refusing unknown
// fields.
func readJSON(r *http.Request, into any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return fmt.Errorf("the request body is not the JSON expected: %v", err)
	}
	return nil
}

// review asks the API server who a token is (a SelfSubjectReview made
// with the token itself).
func (s *Server) review(ctx context.Context, token string) (*authnv1.UserInfo, error) {
	client, err := kubernetes.NewForConfig(s.userConfig(token))
	if err != nil {
		return nil, err
	}
	r, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	return &r.Status.UserInfo, nil
}

// userConfig is the API's config with the user's token as the only
// credential.
func (s *Server) userConfig(token string) *rest.Config {
	c := anonymous(s.opts.API)
	c.BearerToken = token
	c.QPS, c.Burst = 50, 100
	return c
}

// startSession logs a token in: the API server must accept it.
func (s *Server) startSession(w http.ResponseWriter, r *http.Request, token string) (*session, error) {
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	u, err := s.review(ctx, token)
	if err != nil {
		if apierrors.IsUnauthorized(err) {
			return nil, errors.New("the API server did not accept the token (it is wrong or has expired)")
		}
		return nil, fmt.Errorf("asking the API server who the token is: %v", err)
	}
	secret := randomString()
	sess := &session{id: randomString(), token: token, user: u.Username, groups: u.Groups, csrf: randomString(),
		secret: secret, secretDigest: secretDigest(secret), expires: s.now().Add(sessionTTL)}
	value, err := s.seal(sess)
	if err != nil {
		return nil, err
	}
	http.SetCookie(w, &http.Cookie{Name: s.cookieName(), Value: value, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: s.opts.SecureCookies || r.TLS != nil, Expires: sess.expires})
	s.opts.Logger.Info("Console login", "user", u.Username)
	return sess, nil
}

// login takes {"token": "..."}, as JSON, from the console's own pages:
// a form on another site cannot log its visitor in as someone else.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if err := sameOriginJSON(r); err != nil {
		writeError(w, http.StatusForbidden, "%v", err)
		return
	}
	var body struct {
		Token string `json:"token"`
		// Code is a login link's one-time code, which the page posts.
		Code string `json:"code"`
	}
	if err := readJSON(r, &body); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	token := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(body.Token), "Bearer "))
	switch {
	case body.Code != "" && token != "":
		writeError(w, http.StatusBadRequest, "a login takes a token or a login link's code, not both")
		return
	case body.Code != "":
		var ok bool
		if token, ok = s.spendLink(body.Code); !ok {
			writeError(w, http.StatusUnauthorized, "that login link was used already or has expired: ask for a new one, or paste a token")
			return
		}
	case token == "":
		writeError(w, http.StatusBadRequest, "a token is required: paste the output of `oc whoami -t` or `kubectl create token NAME`")
		return
	}
	sess, err := s.startSession(w, r, token)
	if err != nil {
		writeError(w, http.StatusUnauthorized, "%v", err)
		return
	}
	v := sessionView(sess)
	v.Secret = sess.secret
	writeJSON(w, http.StatusOK, v)
}

// loginWithLink opens a login link: the page it leads to posts the
// link's code to /api/login, where it is spent. A GET spends nothing (a
// link preview or a prefetch does not use the link up), and the session
// it makes goes to a page of the console's own origin, which alone
// keeps the session's secret.
func (s *Server) loginWithLink(w http.ResponseWriter, r *http.Request) {
	code := r.URL.Query().Get("code")
	if code == "" {
		http.Redirect(w, r, "/#/login?error=link", http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, "/#/login?link="+url.QueryEscape(code), http.StatusSeeOther)
}

// spendLink is the token of a live login link, which it uses up.
func (s *Server) spendLink(code string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	link, ok := s.links[code]
	delete(s.links, code)
	if !ok || s.now().After(link.expires) {
		return "", false
	}
	return link.token, true
}

// logout ends the session for good and clears its cookie (a request with
// the session's CSRF token: another site cannot log the user out).
func (s *Server) logout(w http.ResponseWriter, r *http.Request, sess *session) {
	if err := s.revoked.revoke(sess.id, sess.expires); err != nil {
		s.opts.Logger.Error("Revoking a session", "user", sess.user, "err", err)
		writeError(w, http.StatusInternalServerError, "the session could not be revoked: %v", err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: s.cookieName(), Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: s.opts.SecureCookies || r.TLS != nil})
	w.WriteHeader(http.StatusNoContent)
}

// sameOriginJSON refuses a request that is not JSON from the console's
// own origin: a cross-site form posts text/plain or a form encoding,
// and its browser names the other origin.
func sameOriginJSON(r *http.Request) error {
	if mt, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";"); strings.TrimSpace(strings.ToLower(mt)) != "application/json" {
		return fmt.Errorf("want Content-Type application/json, not %q", r.Header.Get("Content-Type"))
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		return fmt.Errorf("a request from another site (Sec-Fetch-Site %s) is refused", site)
	}
	if o := r.Header.Get("Origin"); o != "" {
		if u, err := url.Parse(o); err != nil || u.Host != r.Host {
			return fmt.Errorf("a request from origin %q is refused", o)
		}
	}
	return nil
}

type sessionJSON struct {
	User   string   `json:"user"`
	Groups []string `json:"groups"`
	CSRF   string   `json:"csrf"`
	// Secret is the session's browser-held secret, in a login's answer
	// only.
	Secret string `json:"secret,omitempty"`
	// Prometheus says whether alerts and charts can be shown.
	Prometheus bool `json:"prometheus"`
}

func sessionView(sess *session) sessionJSON {
	return sessionJSON{User: sess.user, Groups: sess.groups, CSRF: sess.csrf}
}

func (s *Server) sessionInfo(w http.ResponseWriter, r *http.Request, sess *session) {
	v := sessionView(sess)
	v.Prometheus = s.prom != nil
	writeJSON(w, http.StatusOK, v)
}

// withSession lets through requests with a live session: its cookie and
// the secret only its page holds. A request that changes anything must
// also carry the session's CSRF token in the X-CSRF-Token header, and a
// browser's request from another site (another port of the same host
// is one) is refused whatever it carries.
func (s *Server) withSession(h func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
			writeError(w, http.StatusForbidden, "a request from another site (Sec-Fetch-Site %s) is refused", site)
			return
		}
		c, err := r.Cookie(s.cookieName())
		if err != nil {
			writeError(w, http.StatusUnauthorized, "not logged in")
			return
		}
		sess, err := s.open(c.Value)
		if err != nil {
			writeError(w, http.StatusUnauthorized, "not logged in: %v", err)
			return
		}
		if secret := presentedSecret(r); secret == "" {
			writeError(w, http.StatusUnauthorized, "not logged in: the request has the session's cookie but not its %s header, which only the console's own page holds", SessionHeader)
			return
		} else if !sess.holds(secret) {
			writeError(w, http.StatusUnauthorized, "not logged in: the %s header is not the session's", SessionHeader)
			return
		}
		switch r.Method {
		case http.MethodGet, http.MethodHead:
		default:
			if subtle.ConstantTimeCompare([]byte(r.Header.Get("X-CSRF-Token")), []byte(sess.csrf)) != 1 {
				writeError(w, http.StatusForbidden, "the request has no valid X-CSRF-Token header")
				return
			}
		}
		h(w, r, sess)
	}
}

func (s *Server) proxyAPI(w http.ResponseWriter, r *http.Request, sess *session) {
	// A WebSocket (a watch) must come from the console's own pages: a
	// handshake carries no CSRF header, so its Origin is checked.
	if isWebSocket(r) {
		if o, err := url.Parse(r.Header.Get("Origin")); err != nil || o.Host != r.Host {
			writeError(w, http.StatusForbidden, "a WebSocket from origin %q is refused", r.Header.Get("Origin"))
			return
		}
		// The subprotocol carried the session's secret: the API gets
		// none, and the answer names it again (see New).
		if p := r.Header.Get("Sec-WebSocket-Protocol"); p != "" {
			r = r.WithContext(context.WithValue(r.Context(), wsProtocolKey{}, strings.TrimSpace(p)))
			r.Header.Del("Sec-WebSocket-Protocol")
		}
	}
	if err := s.refused(r); err != nil {
		writeError(w, http.StatusForbidden, "%v", err)
		return
	}
	w.Header().Set("Content-Security-Policy", proxiedCSP)
	r.Header.Del("Cookie")
	r.Header.Del("X-CSRF-Token")
	r.Header.Del(SessionHeader)
	s.api.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userTokenKey{}, sess.token)))
}

// userTokenKey holds, in a proxied request's context, the token of the
// session it came in.
type userTokenKey struct{}

// withUserToken makes the outgoing request the session's user's: set on
// the outgoing request, after the hop-by-hop headers went, so that a
// "Connection: Authorization" in the incoming one strips nothing.
func withUserToken(pr *httputil.ProxyRequest) {
	token, _ := pr.In.Context().Value(userTokenKey{}).(string)
	pr.Out.Header.Set("Authorization", "Bearer "+token)
}

// wsProtocolKey holds, in a proxied WebSocket's context, the subprotocol
// its page asked for.
type wsProtocolKey struct{}

func (s *Server) proxyPrometheus(w http.ResponseWriter, r *http.Request, sess *session) {
	if s.prom == nil {
		writeError(w, http.StatusServiceUnavailable, "this console has no Prometheus to ask (no thanos-querier Route, and no --prometheus-url)")
		return
	}
	w.Header().Set("Content-Security-Policy", proxiedCSP)
	r.Header.Del("Cookie")
	r.Header.Del(SessionHeader)
	s.prom.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userTokenKey{}, sess.token)))
}

// refusedSubresources are the API's ways to reach into a workload: the
// proxy to a pod's, a service's or a node's own server, and a
// container's exec, attach and port-forward. No page uses them, and
// what a proxy serves would come from the console's origin, where its
// scripts could act with the user's session.
var refusedSubresources = map[string]bool{"proxy": true, "exec": true, "attach": true, "portforward": true}

// refused says why the console does not pass a request to the API.
func (s *Server) refused(r *http.Request) error {
	in := r.Clone(r.Context())
	in.URL.Path = strings.TrimPrefix(r.URL.Path, "/api/kubernetes")
	info, err := s.reqInfo.NewRequestInfo(in)
	if err != nil {
		return fmt.Errorf("the console does not pass %s: %v", in.URL.Path, err)
	}
	if !info.IsResourceRequest {
		// /version, /openapi, discovery: nothing of a workload's.
		if strings.Contains(in.URL.Path, "/proxy") {
			return fmt.Errorf("the console does not pass %s", in.URL.Path)
		}
		return nil
	}
	if refusedSubresources[info.Subresource] || refusedSubresources[info.Resource] || info.Verb == "proxy" {
		return fmt.Errorf("the console does not pass the %s subresource of %s (it would serve a workload's content from the console's origin); use oc or kubectl", info.Subresource, info.Resource)
	}
	return nil
}

// proxiedCSP is the policy of every answer the console proxies.
const proxiedCSP = "sandbox; default-src 'none'; frame-ancestors 'none'"

// inert makes a proxied answer harmless in the console's origin,
// whatever its source sends: a sandbox (no script runs, no same-origin
// access) as OpenShift's console adds to every proxied answer, no
// cookie set, and anything but the APIs' own formats downloaded rather
// than shown.
func inert(resp *http.Response) error {
	// The proxy handlers set proxiedCSP; the answer's own would be a
	// second policy beside it.
	resp.Header.Del("Content-Security-Policy")
	resp.Header.Del("X-Content-Type-Options")
	resp.Header.Del("Set-Cookie")
	mt, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
	switch strings.TrimSpace(strings.ToLower(mt)) {
	case "application/json", "application/yaml", "application/vnd.kubernetes.protobuf", "application/vnd.kubernetes.protobuf;stream=watch", "text/plain", "":
	default:
		resp.Header.Set("Content-Disposition", "attachment")
	}
	return nil
}

func (s *Server) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	// The cause names internal addresses: it goes to the log only.
	s.opts.Logger.Error("Proxying a request", "method", r.Method, "path", r.URL.Path, "err", err)
	writeError(w, http.StatusBadGateway, "%s %s: the server behind the console did not answer", r.Method, r.URL.Path)
}
