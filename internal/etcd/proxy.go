package etcd

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Proxy forwards TCP connections to the members that are up: kube-apiserver
// is given its one address, and the members behind it can change. TLS
// passes through untouched (every member's certificate is for 127.0.0.1),
// so the apiserver talks to a member as if directly.
type Proxy struct {
	ln net.Listener

	mu       sync.Mutex
	backends []string
	next     int
	// conns are the open connections by backend, closed when their
	// backend leaves so their clients reconnect elsewhere.
	conns  map[string]map[net.Conn]struct{}
	closed bool
	// fault cuts or slows the traffic (see ClientFaultFile); stop ends
	// the following of its file.
	fault ClientFault
	stop  chan struct{}
}

// NewProxy listens on addr (127.0.0.1:0 picks a port).
func NewProxy(addr string) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, conns: map[string]map[net.Conn]struct{}{}, stop: make(chan struct{})}
	go p.serve()
	return p, nil
}

// Addr is where the proxy listens.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetBackends replaces the members' client addresses (host:port); the
// connections to those that left are closed.
func (p *Proxy) SetBackends(addrs []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	keep := map[string]bool{}
	for _, a := range addrs {
		keep[a] = true
	}
	for b, conns := range p.conns {
		if !keep[b] {
			for c := range conns {
				c.Close()
			}
			delete(p.conns, b)
		}
	}
	p.backends = append([]string(nil), addrs...)
}

// Close stops the proxy and its connections.
func (p *Proxy) Close() {
	p.mu.Lock()
	if !p.closed {
		close(p.stop)
	}
	p.closed = true
	for _, conns := range p.conns {
		for c := range conns {
			c.Close()
		}
	}
	p.conns = map[string]map[net.Conn]struct{}{}
	p.mu.Unlock()
	p.ln.Close()
}

func (p *Proxy) serve() {
	backoff := time.Duration(0)
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors, say: wait before trying again
			// rather than spin, as net/http's server does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		go p.forward(c)
	}
}

// forward connects a client to the first backend that answers, starting
// after the one the previous connection took.
func (p *Proxy) forward(client net.Conn) {
	fault := p.currentFault()
	if fault.Cut {
		client.Close()
		return
	}
	p.mu.Lock()
	backends := append([]string(nil), p.backends...)
	if fault.Only != "" {
		// Whether or not the membership sends clients there: the
		// network leaves no other way.
		backends = []string{fault.Only}
	}
	start := p.next
	p.next++
	p.mu.Unlock()
	var upstream net.Conn
	var backend string
	for i := range backends {
		b := backends[(start+i)%len(backends)]
		c, err := net.DialTimeout("tcp", b, time.Second)
		if err == nil {
			upstream, backend = c, b
			break
		}
	}
	if upstream == nil {
		client.Close()
		return
	}
	if !p.track(backend, client, upstream) {
		client.Close()
		upstream.Close()
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		dst.Close()
		src.Close()
		done <- struct{}{}
	}
	go func() {
		// The client's requests wait out the delay of a slow link.
		_ = p.copyDelayed(upstream, client)
		upstream.Close()
		client.Close()
		done <- struct{}{}
	}()
	go pipe(client, upstream)
	<-done
	<-done
	p.mu.Lock()
	if conns := p.conns[backend]; conns != nil {
		delete(conns, client)
		delete(conns, upstream)
	}
	p.mu.Unlock()
}

// track records a connection pair, unless its backend has left or the
// proxy closed meanwhile.
func (p *Proxy) track(backend string, conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	found := p.fault.Only == backend
	for _, b := range p.backends {
		found = found || b == backend
	}
	if !found {
		return false
	}
	if p.conns[backend] == nil {
		p.conns[backend] = map[net.Conn]struct{}{}
	}
	for _, c := range conns {
		p.conns[backend][c] = struct{}{}
	}
	return true
}
