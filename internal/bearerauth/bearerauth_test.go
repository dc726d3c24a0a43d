package bearerauth

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// The reviews are the API server's (test/e2e's thanos-querier test
// sends real tokens through a real one); this test is about what Auth
// makes of the answers: the statuses, one review per token while its
// answer is kept, and a cache that stays bounded under a stream of
// made-up tokens.
func TestAuth(t *testing.T) {
	client := fake.NewClientset()
	var reviews atomic.Int64
	client.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		reviews.Add(1)
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		switch tr.Spec.Token {
		case "admin":
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "admin"}}
		case "tenant":
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "tenant"}}
		case "down":
			return true, nil, fmt.Errorf("the API server is down")
		}
		return true, tr, nil
	})
	client.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authzv1.SubjectAccessReview)
		sar.Status.Allowed = sar.Spec.User == "admin" && sar.Spec.ResourceAttributes.Verb == "get" && sar.Spec.ResourceAttributes.Resource == "namespaces"
		return true, sar, nil
	})
	auth := New(client, "test", authzv1.ResourceAttributes{Verb: "get", Resource: "namespaces"})
	srv := httptest.NewServer(auth.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "inside") })))
	defer srv.Close()
	get := func(token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = fmt.Fprint(&b, resp.Header.Get("WWW-Authenticate"))
		buf := make([]byte, 200)
		n, _ := resp.Body.Read(buf)
		return resp.StatusCode, b.String() + " " + string(buf[:n])
	}
	for _, tc := range []struct {
		token string
		code  int
		want  string
	}{
		{"", http.StatusUnauthorized, `Bearer realm="test"`},
		{"made-up", http.StatusUnauthorized, "the token is not valid"},
		{"tenant", http.StatusForbidden, `user "tenant" cannot get namespaces`},
		{"down", http.StatusInternalServerError, "the API server is down"},
		{"admin", http.StatusOK, "inside"},
	} {
		if code, body := get(tc.token); code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("token %q: %d %q, want %d with %q", tc.token, code, body, tc.code, tc.want)
		}
	}
	// Answers are kept: no review for a token seen; one that failed for
	// want of the API server is asked again.
	before := reviews.Load()
	get("admin")
	get("tenant")
	get("made-up")
	if n := reviews.Load() - before; n != 0 {
		t.Errorf("%d reviews for tokens whose answers are kept, want 0", n)
	}
	get("down")
	if n := reviews.Load() - before; n != 1 {
		t.Errorf("%d reviews for a token whose review failed, want 1", n)
	}
	// A stream of made-up tokens: every one reviewed, the cache bounded.
	for i := range CacheSize + 500 {
		if code, _ := get(fmt.Sprintf("made-up-%d", i)); code != http.StatusUnauthorized {
			t.Fatalf("made-up token %d: %d", i, code)
		}
	}
	if n := auth.Cached(); n > CacheSize {
		t.Errorf("%d answers kept after %d made-up tokens, want at most %d", n, CacheSize+500, CacheSize)
	}
}
