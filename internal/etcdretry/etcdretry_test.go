package etcdretry

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"
)

const (
	leaderChanged = `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"etcdserver: leader changed","reason":"InternalError","code":500}`
	timedOut      = `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"etcdserver: request timed out, possibly due to previous leader failure","code":500}`
	unavailable   = `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"rpc error: code = Unavailable desc = error reading from server: EOF","code":500}`
	otherFailure  = `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Internal error occurred: something else","code":500}`
)

// apiServer fails its first `fails` requests with 500 and body, then
// answers 201; it records every body it received.
type apiServer struct {
	mu     sync.Mutex
	fails  int
	body   string
	bodies []string
}

func (s *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bodies = append(s.bodies, string(raw))
	if len(s.bodies) <= s.fails {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, s.body)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

func protobufPod(t *testing.T, meta metav1.ObjectMeta) string {
	t.Helper()
	var buf bytes.Buffer
	pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: meta}
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(pod, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func TestRoundTripper(t *testing.T) {
	named := `{"apiVersion":"machine.openshift.io/v1beta1","kind":"Machine","metadata":{"name":"m-1"}}`
	generated := `{"apiVersion":"machine.openshift.io/v1beta1","kind":"Machine","metadata":{"generateName":"workers-"}}`
	for _, tc := range []struct {
		name                string
		method, path, ctype string
		body, failure       string
		fails               int
		window              time.Duration
		wantStatus          int
		wantRequests        int
	}{
		{name: "a read through a leader change", method: "GET", path: "/api/v1/nodes", failure: leaderChanged, fails: 2, wantStatus: 201, wantRequests: 3},
		{name: "a generated create etcd refused", method: "POST", path: "/apis/machine.openshift.io/v1beta1/namespaces/x/machines", body: generated, failure: leaderChanged, fails: 1, wantStatus: 201, wantRequests: 2},
		{name: "a generated create that may have happened is not repeated", method: "POST", path: "/apis/machine.openshift.io/v1beta1/namespaces/x/machines", body: generated, failure: timedOut, fails: 1, wantStatus: 500, wantRequests: 1},
		{name: "a named create that may have happened", method: "POST", path: "/apis/machine.openshift.io/v1beta1/namespaces/x/machines", body: named, failure: timedOut, fails: 1, wantStatus: 201, wantRequests: 2},
		{name: "a named protobuf create that may have happened", method: "POST", path: "/api/v1/namespaces/x/pods", ctype: "application/vnd.kubernetes.protobuf",
			body: protobufPod(t, metav1.ObjectMeta{Name: "p"}), failure: timedOut, fails: 1, wantStatus: 201, wantRequests: 2},
		{name: "a generated protobuf create that may have happened", method: "POST", path: "/api/v1/namespaces/x/pods", ctype: "application/vnd.kubernetes.protobuf",
			body: protobufPod(t, metav1.ObjectMeta{GenerateName: "p-"}), failure: timedOut, fails: 1, wantStatus: 500, wantRequests: 1},
		{name: "an eviction that may have happened", method: "POST", path: "/api/v1/namespaces/x/pods/p/eviction", body: `{"metadata":{"name":"p"}}`, failure: timedOut, fails: 1, wantStatus: 500, wantRequests: 1},
		{name: "a named create through a broken connection to etcd", method: "POST", path: "/apis/machineconfiguration.openshift.io/v1/machineconfigpools",
			body: `{"metadata":{"name":"worker"}}`, failure: unavailable, fails: 2, wantStatus: 201, wantRequests: 3},
		{name: "a generated create through a broken connection to etcd", method: "POST", path: "/apis/machine.openshift.io/v1beta1/namespaces/x/machines", body: generated, failure: unavailable, fails: 1, wantStatus: 500, wantRequests: 1},
		{name: "a patch that may have happened", method: "PATCH", path: "/api/v1/nodes/n", body: `{"metadata":{"labels":{"a":"b"}}}`, failure: timedOut, fails: 1, wantStatus: 201, wantRequests: 2},
		{name: "another server error", method: "GET", path: "/api/v1/nodes", failure: otherFailure, fails: 1, wantStatus: 500, wantRequests: 1},
		{name: "an election longer than the window", method: "GET", path: "/api/v1/nodes", failure: leaderChanged, fails: 100, window: 50 * time.Millisecond, wantStatus: 500, wantRequests: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &apiServer{fails: tc.fails, body: tc.failure}
			srv := httptest.NewServer(s)
			defer srv.Close()
			window := tc.window
			if window == 0 {
				window = Window
			}
			client := &http.Client{Transport: &RoundTripper{Next: http.DefaultTransport, Window: window}}
			var body io.Reader
			if tc.body != "" {
				body = bytes.NewReader([]byte(tc.body))
			}
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, body)
			if err != nil {
				t.Fatal(err)
			}
			if tc.ctype != "" {
				req.Header.Set("Content-Type", tc.ctype)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.wantStatus {
				t.Errorf("status %d (%s), want %d", resp.StatusCode, got, tc.wantStatus)
			}
			if resp.StatusCode == 500 && string(got) != tc.failure {
				t.Errorf("the failure's body reached the caller as %q, want %q", got, tc.failure)
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if len(s.bodies) != tc.wantRequests {
				t.Errorf("%d requests reached the server, want %d", len(s.bodies), tc.wantRequests)
			}
			for i, b := range s.bodies {
				if b != tc.body {
					t.Errorf("request %d carried %q, want %q", i+1, b, tc.body)
				}
			}
		})
	}
}
