package etcd

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// The client faults: a cut refuses and closes the apiserver's
// connections, a delay holds what clients send, none lets it through.
func TestProxyClientFaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		want    ClientFault
		wantErr string
	}{
		{in: "", want: ClientFault{}},
		{in: "cut\n", want: ClientFault{Cut: true}},
		{in: "delay 50ms", want: ClientFault{Delay: 50 * time.Millisecond}},
		{in: "delay -1s", wantErr: "the delay must be a positive duration"},
		{in: "only 127.0.0.1:2379", want: ClientFault{Only: "127.0.0.1:2379"}},
		{in: "only master-0", wantErr: "only takes a member's client address"},
		{in: "drop", wantErr: `"drop" is not "cut", "delay DURATION", "only HOST:PORT" or empty`},
	} {
		got, err := ParseClientFault(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseClientFault(%q) = %v, want an error with %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseClientFault(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}

	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	p, err := NewProxy("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.SetBackends([]string{echo.Addr().String()})
	roundTrip := func() (time.Duration, error) {
		c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
		if err != nil {
			return 0, err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		start := time.Now()
		if _, err := c.Write([]byte("ping")); err != nil {
			return 0, err
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c, buf); err != nil {
			return 0, err
		}
		return time.Since(start), nil
	}
	if _, err := roundTrip(); err != nil {
		t.Fatalf("no fault: %v", err)
	}
	// An open connection is closed by the cut, a new one refused.
	open, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	if _, err := open.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(open, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	p.SetFault(ClientFault{Cut: true})
	_ = open.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := open.Read(make([]byte, 1)); err == nil {
		t.Error("a connection open when the cut came still reads")
	}
	if _, err := roundTrip(); err == nil {
		t.Error("a connection through a cut proxy got its answer")
	}
	p.SetFault(ClientFault{Delay: 300 * time.Millisecond})
	d, err := roundTrip()
	if err != nil || d < 300*time.Millisecond {
		t.Errorf("through a 300ms delay: %s, %v", d, err)
	}
	p.SetFault(ClientFault{})
	if _, err := roundTrip(); err != nil {
		t.Errorf("healed: %v", err)
	}

	// Only one member reachable: the connections to the others close,
	// new ones go to it alone, even a member the membership left out.
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	accepted := make(chan struct{}, 16)
	go func() {
		for {
			c, err := other.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	open2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer open2.Close()
	if _, err := open2.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(open2, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	p.SetFault(ClientFault{Only: other.Addr().String()})
	_ = open2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := open2.Read(make([]byte, 1)); err == nil {
		t.Error("a connection to a member cut off still reads")
	}
	if _, err := roundTrip(); err != nil {
		t.Fatalf("only %s: %v", other.Addr(), err)
	}
	select {
	case <-accepted:
	default:
		t.Error("a connection with only one member reachable did not go to it")
	}
}
