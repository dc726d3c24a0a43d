package etcd

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ClientFaultFile is the file of a data dir that cuts or slows the
// traffic between kube-apiserver and etcd, through the proxy the
// apiserver is given (capstan up --etcd-partitionable): "cut" refuses and
// closes every connection, "delay D" holds each chunk a client sends for
// D, "" lets everything through. A fault campaign writes it.
const ClientFaultFile = "etcd-client-faults"

// ClientFault is what the proxy does to the apiserver's traffic.
type ClientFault struct {
	Cut   bool
	Delay time.Duration
	// Only is the one member's client address (host:port) the apiserver
	// still reaches: cut from the others, as a network partition that
	// leaves it beside one member (a minority one, say) would.
	Only string
}

func (f ClientFault) String() string {
	switch {
	case f.Cut:
		return "cut"
	case f.Delay > 0:
		return "delay " + f.Delay.String()
	case f.Only != "":
		return "only " + f.Only
	}
	return ""
}

// ParseClientFault reads the file's content.
func ParseClientFault(s string) (ClientFault, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return ClientFault{}, nil
	case s == "cut":
		return ClientFault{Cut: true}, nil
	case strings.HasPrefix(s, "delay "):
		d, err := time.ParseDuration(strings.TrimSpace(strings.TrimPrefix(s, "delay ")))
		if err != nil || d <= 0 {
			return ClientFault{}, fmt.Errorf("%q: the delay must be a positive duration", s)
		}
		return ClientFault{Delay: d}, nil
	case strings.HasPrefix(s, "only "):
		addr := strings.TrimSpace(strings.TrimPrefix(s, "only "))
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return ClientFault{}, fmt.Errorf("%q: only takes a member's client address, HOST:PORT: %w", s, err)
		}
		return ClientFault{Only: addr}, nil
	}
	return ClientFault{}, fmt.Errorf(`%q is not "cut", "delay DURATION", "only HOST:PORT" or empty`, s)
}

// WriteClientFault sets the fault of dataDir's proxy; the file is
// replaced whole.
func WriteClientFault(dataDir string, f ClientFault) error {
	path := filepath.Join(dataDir, ClientFaultFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(f.String()+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// followClientFaults has the proxy follow the file at path until stop
// closes, reading it every 100ms.
func (p *Proxy) followClientFaults(path string, stop <-chan struct{}) {
	last := ""
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		b, err := os.ReadFile(path)
		if err == nil || os.IsNotExist(err) {
			if s := strings.TrimSpace(string(b)); s != last {
				f, perr := ParseClientFault(s)
				if perr != nil {
					fmt.Fprintf(os.Stderr, "capstan: %s: %v (no fault)\n", path, perr)
				}
				p.SetFault(f)
				last = s
			}
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

// SetFault cuts or slows the proxy's traffic from now on; a cut closes
// the connections open.
func (p *Proxy) SetFault(f ClientFault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fault = f
	for b, conns := range p.conns {
		if f.Cut || (f.Only != "" && b != f.Only) {
			for c := range conns {
				c.Close()
			}
			delete(p.conns, b)
		}
	}
}

func (p *Proxy) currentFault() ClientFault {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fault
}

// copyDelayed copies src to dst, holding each chunk for the proxy's
// delay of the moment.
func (p *Proxy) copyDelayed(dst io.Writer, src io.Reader) error {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := p.currentFault().Delay; d > 0 {
				time.Sleep(d)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}
