// Package ports finds free loopback TCP ports.
//
// A port capstan records and listens on again after a restart (an etcd
// member's) must not be one the kernel hands out on its own: a port of
// the ephemeral range is the source port of any outgoing connection and
// what any listener on port 0 gets, so while capstan is down another
// program can take it. Free therefore picks below the ephemeral range.
package ports

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// lowest is the first port Free considers: above the well-known and most
// registered service ports.
const lowest = 10000

// attempts bounds the random picks before Free settles for a port the
// kernel chooses.
const attempts = 64

// Free returns a TCP port on 127.0.0.1 nothing listens on now, below the
// kernel's ephemeral range when there is room there.
func Free() (int, error) { return FreeExcept(nil) }

// FreeExcept is Free, never returning a port of taken: ports recorded for
// programs that are not listening now (a stopped etcd member's) are not
// free for another.
func FreeExcept(taken map[int]bool) (int, error) {
	lo, _ := ephemeralRange()
	if lo > lowest {
		for range attempts {
			p := lowest + rand.IntN(lo-lowest)
			if taken[p] {
				continue
			}
			if Available(p) {
				return p, nil
			}
		}
	}
	for range attempts {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !taken[p] {
			return p, nil
		}
	}
	return 0, fmt.Errorf("no free loopback port found in %d tries", 2*attempts)
}

// Available reports whether nothing listens on port of 127.0.0.1 now.
func Available(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// ephemeralRange is the kernel's range of ports for outgoing connections
// and port-0 listeners (Linux's default when it cannot be read).
func ephemeralRange() (lo, hi int) {
	lo, hi = 32768, 60999
	raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	if r, err := parseRange(string(raw)); err == nil {
		return r[0], r[1]
	}
	return lo, hi
}

func parseRange(s string) ([2]int, error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return [2]int{}, fmt.Errorf("port range %q: want two numbers", s)
	}
	var r [2]int
	for i := range f {
		n, err := strconv.Atoi(f[i])
		if err != nil || n <= 0 || n > 65535 {
			return [2]int{}, fmt.Errorf("port range %q: %q is not a port", s, f[i])
		}
		r[i] = n
	}
	if r[0] > r[1] {
		return [2]int{}, fmt.Errorf("port range %q: the first is above the second", s)
	}
	return r, nil
}
