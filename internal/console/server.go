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
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/capstan-dev/capstan/internal/scheduler/policy"
)

//go:embed assets
var assets embed.FS

// SessionCookie names the session's cookie.
const SessionCookie = "capstan-console-session"

// Lifetimes of a session and of a one-time login link.
const (
	sessionTTL   = 12 * time.Hour
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
}

// Server is a console.
type Server struct {
	opts   Options
	mux    *http.ServeMux
	api    *httputil.ReverseProxy
	prom   *httputil.ReverseProxy
	apiURL *url.URL

	mu       sync.Mutex
	sessions map[string]*session
	links    map[string]loginLink
	now      func() time.Time
}

type session struct {
	token   string
	user    string
	groups  []string
	csrf    string
	expires time.Time
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
	s := &Server{opts: opts, mux: http.NewServeMux(), sessions: map[string]*session{}, links: map[string]loginLink{}, now: time.Now}
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
			pr.Out.URL.Path = strings.TrimPrefix(pr.In.URL.Path, "/api/kubernetes")
			pr.Out.URL.RawPath = ""
		},
		Transport:     transport,
		FlushInterval: -1, // watches stream
		ErrorHandler:  s.proxyError,
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
			},
			Transport:    tr,
			ErrorHandler: s.proxyError,
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
	s.mux.HandleFunc("POST /api/logout", s.logout)
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

// Serve serves the console on ln until ctx ends.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// LoginLink makes a link that logs its first visitor in with token, once,
// within ten minutes: what `capstan up` prints for its admin.
func (s *Server) LoginLink(base, token string) string {
	code := randomString()
	s.mu.Lock()
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
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'")
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
	id := randomString()
	sess := &session{token: token, user: u.Username, groups: u.Groups, csrf: randomString(), expires: s.now().Add(sessionTTL)}
	s.mu.Lock()
	for k, old := range s.sessions {
		if s.now().After(old.expires) {
			delete(s.sessions, k)
		}
	}
	s.sessions[id] = sess
	s.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: id, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil, Expires: sess.expires})
	s.opts.Logger.Info("Console login", "user", u.Username)
	return sess, nil
}

// login takes {"token": "..."}.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Token string `json:"token"`
	}
	if err := readJSON(r, &body); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	token := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(body.Token), "Bearer "))
	if token == "" {
		writeError(w, http.StatusBadRequest, "a token is required: paste the output of `oc whoami -t` or `kubectl create token NAME`")
		return
	}
	sess, err := s.startSession(w, r, token)
	if err != nil {
		writeError(w, http.StatusUnauthorized, "%v", err)
		return
	}
	writeJSON(w, http.StatusOK, sessionView(sess))
}

// loginWithLink takes a one-time code from LoginLink.
func (s *Server) loginWithLink(w http.ResponseWriter, r *http.Request) {
	code := r.URL.Query().Get("code")
	s.mu.Lock()
	link, ok := s.links[code]
	delete(s.links, code)
	s.mu.Unlock()
	if code == "" || !ok || s.now().After(link.expires) {
		http.Redirect(w, r, "/#/login?error=link", http.StatusSeeOther)
		return
	}
	if _, err := s.startSession(w, r, link.token); err != nil {
		http.Redirect(w, r, "/#/login?error=link", http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, "/#/overview", http.StatusSeeOther)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(SessionCookie); err == nil {
		s.mu.Lock()
		delete(s.sessions, c.Value)
		s.mu.Unlock()
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	w.WriteHeader(http.StatusNoContent)
}

type sessionJSON struct {
	User   string   `json:"user"`
	Groups []string `json:"groups"`
	CSRF   string   `json:"csrf"`
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

// withSession lets through requests with a live session; a request that
// changes anything must also carry the session's CSRF token in the
// X-CSRF-Token header.
func (s *Server) withSession(h func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie(SessionCookie)
		var sess *session
		if err == nil {
			s.mu.Lock()
			sess = s.sessions[c.Value]
			if sess != nil && s.now().After(sess.expires) {
				delete(s.sessions, c.Value)
				sess = nil
			}
			s.mu.Unlock()
		}
		if sess == nil {
			writeError(w, http.StatusUnauthorized, "not logged in")
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
	if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		if o, err := url.Parse(r.Header.Get("Origin")); err != nil || o.Host != r.Host {
			writeError(w, http.StatusForbidden, "a WebSocket from origin %q is refused", r.Header.Get("Origin"))
			return
		}
	}
	r.Header.Del("Cookie")
	r.Header.Del("X-CSRF-Token")
	r.Header.Set("Authorization", "Bearer "+sess.token)
	s.api.ServeHTTP(w, r)
}

func (s *Server) proxyPrometheus(w http.ResponseWriter, r *http.Request, sess *session) {
	if s.prom == nil {
		writeError(w, http.StatusServiceUnavailable, "this console has no Prometheus to ask (no thanos-querier Route, and no --prometheus-url)")
		return
	}
	r.Header.Del("Cookie")
	r.Header.Set("Authorization", "Bearer "+sess.token)
	s.prom.ServeHTTP(w, r)
}

func (s *Server) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	writeError(w, http.StatusBadGateway, "%s %s: %v", r.Method, r.URL.Path, err)
}
