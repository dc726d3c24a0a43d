package etcd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// Network partitions, for fault campaigns (capstan up --etcd-partitionable):
// a member then serves its peer port through a proxy in its own process,
// in front of etcd listening on a port of its own. Every raft message
// between two members is an HTTP request one of them serves (a stream is
// opened by the receiver on the sender's port, a pipeline message posted
// by the sender on the receiver's), and carries the other's ID
// (X-Server-From): the proxy refuses, and cuts when a partition starts,
// every request between a member the partition file lists and any other.
// Both sides of a partitioned member are cut, as a network partition
// does; the member keeps serving clients.

// PartitionFile is the file of a data dir that lists the partitioned
// members, one name per line, and the delayed ones, "NAME delay
// DURATION"; a fault campaign writes it.
const PartitionFile = "etcd-partitions"

// WritePeerDelay delays every raft message to and from the named members
// of dataDir's cluster by d, each way (none: no delay, and no partition).
// The file is replaced whole.
func WritePeerDelay(dataDir string, d time.Duration, names ...string) error {
	if d <= 0 {
		return fmt.Errorf("a peer delay must be positive, not %s", d)
	}
	lines := make([]string, len(names))
	for i, n := range names {
		lines[i] = n + " delay " + d.String()
	}
	return WritePartition(dataDir, lines...)
}

// WriteLinkCuts cuts the links between the pairs of members of dataDir's
// cluster, both ways, and only those: a member cut from one peer still
// reaches the others (Jepsen's bridge: the leader reaches both followers,
// they not each other). The file is replaced whole.
func WriteLinkCuts(dataDir string, pairs ...[2]string) error {
	lines := make([]string, len(pairs))
	for i, p := range pairs {
		lines[i] = p[0] + " cut " + p[1]
	}
	return WritePartition(dataDir, lines...)
}

// WritePartition partitions the named members of dataDir's cluster from
// the others (none: heals every partition). The file is replaced whole.
func WritePartition(dataDir string, names ...string) error {
	path := filepath.Join(dataDir, PartitionFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(names, "\n")+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// peerProxy is a member's peer port when it can be partitioned.
type peerProxy struct {
	self string
	file string
	e    *embed.Etcd

	mu          sync.Mutex
	partitioned []string
	links       map[[2]string]bool
	delayed     map[string]time.Duration
	streams     map[*stream]bool
}

type stream struct {
	from   string
	cancel context.CancelFunc
}

// partitionableListenURL is a free loopback port for etcd's own peer
// listener; servePeers proxies the member's advertised peer port to it.
func partitionableListenURL() (url.URL, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return url.URL{}, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return url.URL{Scheme: "https", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}, nil
}

// servePeers serves the member's peer port, forwarding to etcd's own
// peer listener at inner unless a partition cuts the request.
func servePeers(c memberConfig, e *embed.Etcd, inner url.URL) (io.Closer, error) {
	pair, pool, err := loadPairAndCA("the peer certificate", c.tls.PeerCert, c.tls.PeerKey, c.tls.CA)
	if err != nil {
		return nil, err
	}
	p := &peerProxy{self: c.spec.Name, file: c.partitionFile, e: e, streams: map[*stream]bool{}}
	rp := httputil.NewSingleHostReverseProxy(&inner)
	rp.FlushInterval = -1 // raft streams
	rp.ErrorLog = log.New(io.Discard, "", 0)
	rp.Transport = &http.Transport{TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12},
		MaxIdleConnsPerHost: 16, IdleConnTimeout: 30 * time.Second}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		from := p.nameOf(r.Header.Get("X-Server-From"))
		if p.cut(from) {
			// As a dropped network: no answer at all.
			panic(http.ErrAbortHandler)
		}
		if d := p.delay(from); d > 0 {
			// The request's way: it arrives d late.
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
			// The answer's way: each chunk leaves d after it was written.
			dw := newDelayedWriter(w, d)
			defer dw.close()
			w = dw
		}
		ctx, cancel := context.WithCancel(r.Context())
		s := &stream{from: from, cancel: cancel}
		p.mu.Lock()
		p.streams[s] = true
		p.mu.Unlock()
		defer func() {
			p.mu.Lock()
			delete(p.streams, s)
			p.mu.Unlock()
			cancel()
		}()
		rp.ServeHTTP(w, r.WithContext(ctx))
	})
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(c.spec.PeerPort)))
	if err != nil {
		return nil, fmt.Errorf("the peer port: %w", err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12,
			// A peer carries the peer certificate's name, as etcd's own
			// listener requires (PeerTLSInfo.AllowedCNs).
			VerifyPeerCertificate: func(_ [][]byte, chains [][]*x509.Certificate) error {
				for _, chain := range chains {
					if len(chain) > 0 && chain[0].Subject.CommonName == PeerCommonName {
						return nil
					}
				}
				return fmt.Errorf("a peer must present a certificate named %s", PeerCommonName)
			}}}
	ctx, stop := context.WithCancel(context.Background())
	go p.follow(ctx)
	go func() { _ = srv.ServeTLS(l, "", "") }()
	return closerFunc(func() error {
		stop()
		return srv.Close()
	}), nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// nameOf is the name of the member of the hexadecimal ID (the ID itself
// when the member is not known yet).
func (p *peerProxy) nameOf(id string) string {
	if id == "" {
		return ""
	}
	for _, m := range p.e.Server.Cluster().Members() {
		if m.ID.String() == id {
			return m.Name
		}
	}
	return id
}

// cut reports whether a request from the member from is cut: this member
// or that one is partitioned (a request without a sender, a lease's
// forwarding or a probe, is cut only when this member is).
func (p *peerProxy) cut(from string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if from == p.self {
		return false
	}
	return slices.Contains(p.partitioned, p.self) || (from != "" && slices.Contains(p.partitioned, from)) || p.links[link(p.self, from)]
}

// link is the pair of two members, in either order.
func link(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

// delay is how late messages between this member and the member from
// arrive, each way.
func (p *peerProxy) delay(from string) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if from == p.self {
		return 0
	}
	return max(p.delayed[p.self], p.delayed[from])
}

// parsePeerFaults reads the partition file's lines: NAME (cut from every
// other), NAME cut OTHER (the link between the two cut) or NAME delay
// DURATION. A line it cannot read cuts nothing and delays nothing.
func parsePeerFaults(raw string) (cut []string, links map[[2]string]bool, delayed map[string]time.Duration) {
	delayed, links = map[string]time.Duration{}, map[[2]string]bool{}
	for _, l := range strings.Split(raw, "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 1:
			cut = append(cut, f[0])
		case len(f) == 3 && f[1] == "cut" && f[0] != f[2]:
			links[link(f[0], f[2])] = true
		case len(f) == 3 && f[1] == "delay":
			if d, err := time.ParseDuration(f[2]); err == nil && d > 0 {
				delayed[f[0]] = d
			}
		}
	}
	return cut, links, delayed
}

// delayedWriter holds each chunk an answer writes for d before it goes
// out, as a link with that latency would: the writes return at once, in
// order, and a goroutine sends each when it is due.
type delayedWriter struct {
	w     http.ResponseWriter
	d     time.Duration
	chunk chan delayedChunk
	done  chan struct{}
}

type delayedChunk struct {
	data []byte
	due  time.Time
}

func newDelayedWriter(w http.ResponseWriter, d time.Duration) *delayedWriter {
	dw := &delayedWriter{w: w, d: d, chunk: make(chan delayedChunk, 1024), done: make(chan struct{})}
	go func() {
		defer close(dw.done)
		rc := http.NewResponseController(w)
		failed := false
		for c := range dw.chunk {
			if failed {
				continue
			}
			time.Sleep(time.Until(c.due))
			if _, err := w.Write(c.data); err != nil {
				failed = true
				continue
			}
			_ = rc.Flush()
		}
	}()
	return dw
}

func (dw *delayedWriter) Header() http.Header { return dw.w.Header() }

// WriteHeader goes at once: the status line is the stream's start.
func (dw *delayedWriter) WriteHeader(code int) {
	dw.w.WriteHeader(code)
	_ = http.NewResponseController(dw.w).Flush()
}

func (dw *delayedWriter) Write(b []byte) (int, error) {
	dw.chunk <- delayedChunk{data: slices.Clone(b), due: time.Now().Add(dw.d)}
	return len(b), nil
}

// Flush does nothing: each chunk is flushed when it goes out.
func (dw *delayedWriter) Flush() {}

// close sends what is held and waits for it to go.
func (dw *delayedWriter) close() {
	close(dw.chunk)
	<-dw.done
}

// follow rereads the partition file and cuts the streams a new partition
// forbids.
func (p *peerProxy) follow(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		var names []string
		delayed, links := map[string]time.Duration{}, map[[2]string]bool{}
		if raw, err := os.ReadFile(p.file); err == nil {
			names, links, delayed = parsePeerFaults(string(raw))
		}
		p.mu.Lock()
		changed := !slices.Equal(names, p.partitioned)
		before := p.links
		newlyCut := func(from string) bool { return links[link(p.self, from)] && !before[link(p.self, from)] }
		// A delay that starts or ends restarts the streams it concerns:
		// a stream takes the delay of its start.
		delayedBefore := p.delayed
		redelay := func(name string) bool {
			return name != "" && delayed[name] != delayedBefore[name]
		}
		p.partitioned, p.delayed, p.links = names, delayed, links
		var cut []*stream
		for s := range p.streams {
			if s.from == p.self {
				continue
			}
			if (changed && (slices.Contains(names, p.self) || slices.Contains(names, s.from))) || newlyCut(s.from) || redelay(p.self) || redelay(s.from) {
				cut = append(cut, s)
			}
		}
		p.mu.Unlock()
		for _, s := range cut {
			s.cancel()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
