package ports

import (
	"net"
	"strconv"
	"testing"
)

func TestFreeIsBelowTheEphemeralRangeAndFree(t *testing.T) {
	lo, _ := ephemeralRange()
	for range 20 {
		p, err := Free()
		if err != nil {
			t.Fatal(err)
		}
		if lo > lowest && (p < lowest || p >= lo) {
			t.Fatalf("port %d outside [%d, %d): the kernel may hand it out", p, lowest, lo)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d is not free: %v", p, err)
		}
		l.Close()
	}
}

func TestParseRange(t *testing.T) {
	if r, err := parseRange("32768\t60999\n"); err != nil || r != [2]int{32768, 60999} {
		t.Fatalf("parseRange = %v, %v", r, err)
	}
	for _, bad := range []string{"", "1", "a b", "0 100", "100 70000", "200 100"} {
		if _, err := parseRange(bad); err == nil {
			t.Errorf("parseRange(%q) accepted", bad)
		}
	}
}

func TestFreeExceptNeverReturnsATakenPort(t *testing.T) {
	lo, _ := ephemeralRange()
	// Every port of the low range but one is taken: that one comes back.
	if lo <= lowest {
		t.Skip("no room below the ephemeral range here")
	}
	taken := map[int]bool{}
	var want int
	for p := lowest; p < lo; p++ {
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
			l.Close()
			if want == 0 {
				want = p
				continue
			}
		}
		taken[p] = true
	}
	for range 50 {
		p, err := FreeExcept(taken)
		if err != nil {
			t.Fatal(err)
		}
		if taken[p] {
			t.Fatalf("FreeExcept returned the taken port %d", p)
		}
	}
}
