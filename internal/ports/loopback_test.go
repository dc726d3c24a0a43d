package ports

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestLoopbackOnly(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:9000": true, "127.1.2.3:1": true, "[::1]:9000": true, "localhost:9000": true,
		":9000": false, "0.0.0.0:9000": false, "10.0.0.1:9000": false, "example.com:9000": false, "[::]:9000": false, "9000": false,
	} {
		if err := LoopbackOnly(addr); (err == nil) != ok {
			t.Errorf("LoopbackOnly(%q) = %v, want loopback %v", addr, err, ok)
		}
	}
}

// L3: DNS rebinding. A page of attacker.example, its name resolved to
// 127.0.0.1, sends its requests to a loopback listener with Host
// attacker.example: they are refused; the loopback names are served.
func TestLoopbackHostsRefuseRebinding(t *testing.T) {
	h := LoopbackHosts(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("secret metrics")) }))
	for host, ok := range map[string]bool{
		"127.0.0.1:9090": true, "127.0.0.1": true, "[::1]:9090": true, "localhost:9090": true, "LOCALHOST": true,
		"attacker.example:9090": false, "attacker.example": false, "127.0.0.1.attacker.example": false, "": false,
	} {
		req := httptest.NewRequest("GET", "/api/v1/query?query=up", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if got := rec.Code == http.StatusOK; got != ok {
			t.Errorf("Host %q: %d %s, want served %v", host, rec.Code, rec.Body.String(), ok)
		}
	}
}
