// Package cli holds capstan's cobra commands. cmd/capstan is a thin main
// around Main so that tests can run the very same commands.
package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/capstan-dev/capstan/internal/memlimit"
)

// Run is the capstan program: it runs Main with the process's arguments
// and streams. capstan's own messages go to a duplicate of the terminal's
// stderr, because `capstan up` points file descriptor 2 at its log file
// (embedded upstream libraries write there directly).
func Run() int {
	// The collector's target and soft limit, from the machine's memory
	// (an etcd member is started with its own in its environment).
	memlimit.Apply(memlimit.Server)
	stderr := os.Stderr
	if fd, err := unix.Dup(2); err == nil {
		stderr = os.NewFile(uintptr(fd), "/dev/stderr")
		// A crash still reaches the terminal.
		_ = debug.SetCrashOutput(stderr, debug.CrashOptions{})
	}
	return Main(os.Args[1:], os.Stdout, stderr)
}

// Main runs capstan with args (without the program name) and returns the
// process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	root := NewRootCommand(stdout, stderr)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		fmt.Fprintf(stderr, "capstan: error: %s\n", oneLine(err))
		return 1
	}
	return 0
}

// exitError carries an exit code out of a command that already printed.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

// oneLine folds a (possibly joined) error into one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
}

// NewRootCommand builds the capstan command tree.
func NewRootCommand(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "capstan",
		Short: "OpenShift's cluster-management control plane in one binary",
		Long: `capstan runs a real Kubernetes control plane (etcd, kube-apiserver and
kube-controller-manager, embedded) with simulated machines and nodes, and the
cluster-management controllers of OpenShift on top of it.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%s: %w (see '%s --help')", c.CommandPath(), err, c.CommandPath())
	})
	root.AddCommand(newUpCommand(), newKubectlCommand(), newSimCommand(), newBenchCommand(), newSchedulerCommand(), newExplainCommand(), newAdmCommand(), newAdmissionCommand(), newMachineAPICommand(), newHooksCommand(), newAutoscalerCommand(), newUpdateServiceCommand(), newChaosCommand(), newEtcdCommand(), newConsoleCommand(), newCVOCommand(), newMCOCommand(), newEtcdOperatorCommand(), newSimulateCommand())
	return root
}

// defaultDataDir is where commands look for a cluster when not told.
func defaultDataDir() string {
	if d := os.Getenv("CAPSTAN_DATA_DIR"); d != "" {
		return d
	}
	return ".capstan"
}
