// Command capstan is OpenShift's cluster-management control plane in one
// binary; see `capstan --help`.
package main

import (
	"os"
	"runtime/debug"

	"golang.org/x/sys/unix"

	"github.com/capstan-dev/capstan/internal/cli"
)

func main() {
	// capstan's own messages go to a duplicate of the terminal's stderr:
	// `capstan up` points file descriptor 2 at its log file, because
	// embedded upstream libraries write there directly.
	stderr := os.Stderr
	if fd, err := unix.Dup(2); err == nil {
		stderr = os.NewFile(uintptr(fd), "/dev/stderr")
		// A crash still reaches the terminal.
		_ = debug.SetCrashOutput(stderr, debug.CrashOptions{})
	}
	os.Exit(cli.Main(os.Args[1:], os.Stdout, stderr))
}
