package ports

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
)

// LoopbackOnly refuses an address to listen on that is not a loopback
// one (127.0.0.0/8, ::1, localhost).
func LoopbackOnly(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "" {
		return errors.New("every interface is not loopback only")
	}
	if !loopbackHost(host) {
		return fmt.Errorf("%q is not a loopback address", host)
	}
	return nil
}

func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	return ip != nil && ip.IsLoopback()
}

// LoopbackHosts serves only requests whose Host is a loopback one
// (127.0.0.0/8, [::1], localhost, with any port), as a listener on
// loopback must: a web page whose own name resolves to 127.0.0.1 (DNS
// rebinding) reaches a loopback listener from the browser with its own
// name as the Host, and then reads the answers as its own origin's.
// Anything else gets 421 Misdirected Request.
func LoopbackHosts(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if hp, _, err := net.SplitHostPort(host); err == nil {
			host = hp
		}
		if !loopbackHost(host) {
			http.Error(w, fmt.Sprintf("Host %q is not this loopback listener's: only 127.0.0.1, [::1] and localhost are served", r.Host), http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}
