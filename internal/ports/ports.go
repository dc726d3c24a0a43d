// Package ports finds free loopback TCP ports.
package ports

import "net"

// Free returns a TCP port on 127.0.0.1 nothing listens on now.
func Free() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
