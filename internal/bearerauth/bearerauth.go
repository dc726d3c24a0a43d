// Package bearerauth lets through HTTP requests whose bearer token the
// API server authenticates (a TokenReview) and allows one action (a
// SubjectAccessReview), as kube-rbac-proxy and OpenShift's oauth-proxy
// guard what sits behind them.
package bearerauth

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/kubernetes"
)

// Answers are kept in a bounded cache, as kube-rbac-proxy's delegating
// authenticator keeps them: an allowed token a minute, a refused one 10
// s, at most CacheSize tokens, the least recently used going first, so a
// stream of made-up tokens costs reviews but no memory. A review the API
// server does not answer is not kept.
const (
	CacheSize   = 1024
	AllowedTTL  = time.Minute
	RefusedTTL  = 10 * time.Second
	ReviewLimit = 10 * time.Second
)

// Auth guards handlers with a bearer token.
type Auth struct {
	client kubernetes.Interface
	realm  string
	attrs  authzv1.ResourceAttributes
	cache  *cache.LRUExpireCache
}

// New makes an Auth that reviews tokens with client and lets through
// those whose user may do attrs; realm names it in WWW-Authenticate.
func New(client kubernetes.Interface, realm string, attrs authzv1.ResourceAttributes) *Auth {
	return &Auth{client: client, realm: realm, attrs: attrs, cache: cache.NewLRUExpireCache(CacheSize)}
}

type result struct {
	status  int
	message string
}

// Wrap serves h to requests with an allowed bearer token, and answers
// 401 (no token, or one the API server does not authenticate), 403 (a
// user not allowed) or 500 (the API server did not answer) to others.
func (a *Auth) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || token == "" {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf("Bearer realm=%q", a.realm))
			http.Error(w, "Unauthorized: a bearer token is required", http.StatusUnauthorized)
			return
		}
		if res := a.check(r.Context(), token); res.status != http.StatusOK {
			http.Error(w, res.message, res.status)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Cached is how many tokens' answers are kept now.
func (a *Auth) Cached() int { return len(a.cache.Keys()) }

func (a *Auth) check(ctx context.Context, token string) result {
	key := sha256.Sum256([]byte(token))
	if res, ok := a.cache.Get(key); ok {
		return res.(result)
	}
	ctx, cancel := context.WithTimeout(ctx, ReviewLimit)
	defer cancel()
	res := a.review(ctx, token)
	switch res.status {
	case http.StatusOK:
		a.cache.Add(key, res, AllowedTTL)
	case http.StatusUnauthorized, http.StatusForbidden:
		a.cache.Add(key, res, RefusedTTL)
	}
	return res
}

func (a *Auth) review(ctx context.Context, token string) result {
	tr, err := a.client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return result{http.StatusInternalServerError, "authenticating the token: " + err.Error()}
	}
	if !tr.Status.Authenticated {
		return result{http.StatusUnauthorized, "Unauthorized: the token is not valid"}
	}
	u := tr.Status.User
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	attrs := a.attrs
	sar, err := a.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra, ResourceAttributes: &attrs,
	}}, metav1.CreateOptions{})
	if err != nil {
		return result{http.StatusInternalServerError, "authorizing the user: " + err.Error()}
	}
	if !sar.Status.Allowed {
		return result{http.StatusForbidden, fmt.Sprintf("Forbidden: user %q cannot %s %s", u.Username, a.attrs.Verb, a.attrs.Resource)}
	}
	return result{http.StatusOK, ""}
}
