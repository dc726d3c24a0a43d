// Package etcdretry makes API clients ride out an etcd leader election.
//
// While etcd elects a leader, kube-apiserver answers 500 with etcd's own
// message: "etcdserver: leader changed" or "etcdserver: no leader" (the
// request was not carried out), or "etcdserver: request timed out,
// possibly due to previous leader failure" or, when its connection to a
// member broke, "rpc error: code = Unavailable desc = ..." (it may have
// been). client-go
// does not try such a request again, so every component would see an
// error for what is a second of the cluster's life. Wrap gives a client
// configuration a transport that tries again, within a bounded window,
// every request for which that is safe:
//
//   - a request etcd refused before doing anything: always;
//   - a request whose outcome is unknown: when doing it twice is the same
//     as doing it once, that is reads, updates (a stale resourceVersion
//     conflicts), patches and deletes (the second finds the object gone),
//     and creates of a named object (the second finds it exists). A create
//     by generateName, or of a subresource such as an eviction, is not
//     tried again: its caller must find out what happened.
package etcdretry

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// Window bounds how long one request is tried again: several elections
// at etcd's one-second election timeout.
const Window = 15 * time.Second

// Messages of etcd (go.etcd.io/etcd/server/v3/etcdserver/errors) that the
// apiserver passes on.
var (
	// notDone: the request was refused before it was proposed.
	notDone = []string{"etcdserver: leader changed", "etcdserver: no leader"}
	// unknown: the proposal timed out, or the connection to etcd broke:
	// it may still commit.
	unknown = []string{"etcdserver: request timed out", "code = Unavailable desc"}
)

// Wrap returns a copy of cfg whose requests are tried again, for up to
// Window, while etcd elects a leader.
func Wrap(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &RoundTripper{Next: rt, Window: Window} })
	return c
}

// RoundTripper tries requests again while etcd elects a leader.
type RoundTripper struct {
	Next http.RoundTripper
	// Window bounds the time spent on one request's retries.
	Window time.Duration
}

var requestInfos = &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}

// RoundTrip implements http.RoundTripper.
func (r *RoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	deadline := time.Now().Add(r.Window)
	wait := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		resp, err := r.Next.RoundTrip(req)
		if err != nil || resp.StatusCode < 500 {
			return resp, err
		}
		body, readErr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		if readErr != nil {
			return resp, nil
		}
		safe := containsAny(body, notDone) || containsAny(body, unknown) && idempotent(req)
		if !safe || time.Now().Add(wait).After(deadline) || req.Context().Err() != nil {
			return resp, nil
		}
		next, ok := rewind(req)
		if !ok {
			return resp, nil
		}
		klog.V(2).InfoS("Trying a request again: etcd is electing a leader", "method", req.Method, "url", req.URL.Path, "attempt", attempt)
		select {
		case <-req.Context().Done():
			return resp, nil
		case <-time.After(wait):
		}
		req = next
		wait = min(2*wait, time.Second)
	}
}

func containsAny(body []byte, msgs []string) bool {
	for _, m := range msgs {
		if bytes.Contains(body, []byte(m)) {
			return true
		}
	}
	return false
}

// rewind returns a copy of req to send again, with its body read anew.
func rewind(req *http.Request) (*http.Request, bool) {
	next := req.Clone(req.Context())
	if req.Body == nil || req.Body == http.NoBody {
		return next, true
	}
	if req.GetBody == nil {
		return nil, false
	}
	b, err := req.GetBody()
	if err != nil {
		return nil, false
	}
	next.Body = b
	return next, true
}

// idempotent reports whether doing req twice is the same as doing it once.
func idempotent(req *http.Request) bool {
	info, err := requestInfos.NewRequestInfo(req)
	if err != nil || !info.IsResourceRequest {
		return req.Method == http.MethodGet || req.Method == http.MethodHead
	}
	switch info.Verb {
	case "get", "list", "watch", "update", "patch", "delete", "deletecollection":
		return true
	case "create":
		return info.Subresource == "" && createsNamed(req)
	}
	return false
}

// createsNamed reports whether a create's body names its object (rather
// than asking for a generated name).
func createsNamed(req *http.Request) bool {
	if req.GetBody == nil {
		return false
	}
	rc, err := req.GetBody()
	if err != nil {
		return false
	}
	defer rc.Close()
	raw, err := io.ReadAll(io.LimitReader(rc, 8<<20))
	if err != nil {
		return false
	}
	// A name given wins over generateName: such a create cannot make a
	// second object.
	if strings.Contains(req.Header.Get("Content-Type"), "protobuf") {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(raw, nil, nil)
		if err != nil {
			return false
		}
		m, err := meta.Accessor(obj)
		return err == nil && m.GetName() != ""
	}
	var partial metav1.PartialObjectMetadata
	return json.Unmarshal(raw, &partial) == nil && partial.Name != ""
}
