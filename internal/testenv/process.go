package testenv

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/capstan-dev/capstan/internal/cli"
	"github.com/capstan-dev/capstan/internal/etcdretry"
)

// CLIEnv set to "1" makes a test binary act as the capstan binary (its
// TestMain runs the CLI), so tests can run `capstan up` in a child
// process without building anything else.
const CLIEnv = "CAPSTAN_E2E_RUN_CLI"

// CapstanProcess runs this test binary as the capstan binary.
func CapstanProcess(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), CLIEnv+"=1")
	return cmd
}

// RunCapstan runs a short-lived capstan command and returns its exit code
// and combined output.
func RunCapstan(t TB, args ...string) (int, string) {
	t.Helper()
	cmd := CapstanProcess(args...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), buf.String()
	}
	if err != nil {
		t.Fatalf("running capstan %v: %v", args, err)
	}
	return 0, buf.String()
}

func FreePort(t TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("%v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// UpProcess is a running `capstan up`.
type UpProcess struct {
	cmd    *exec.Cmd
	output *bytes.Buffer
	lines  chan string
	done   chan struct{}
}

func StartUp(t TB, args ...string) *UpProcess {
	t.Helper()
	cmd := CapstanProcess(append([]string{"up"}, args...)...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	p := &UpProcess{cmd: cmd, output: &bytes.Buffer{}, lines: make(chan string, 100), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%v", err)
	}
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			p.output.WriteString(sc.Text() + "\n")
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
	}()
	go func() {
		cmd.Wait()
		pw.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *UpProcess) WaitLine(t TB, substr string, timeout time.Duration) string {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l := <-p.lines:
			if strings.Contains(l, substr) {
				return l
			}
		case <-p.done:
			t.Fatalf("capstan up exited before printing %q:\n%s", substr, p.output)
		case <-deadline:
			t.Fatalf("capstan up did not print %q within %s:\n%s", substr, timeout, p.output)
		}
	}
}

func (p *UpProcess) Stop(t TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("%v", err)
	}
	select {
	case <-p.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("capstan up did not stop on SIGTERM:\n%s", p.output)
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("capstan up exited %d after SIGTERM:\n%s", code, p.output)
	}
	if !strings.Contains(p.output.String(), "capstan stopped") {
		t.Errorf("no clean stop message:\n%s", p.output)
	}
}

// Kill sends SIGKILL, as a crash would, and waits for the process to go.
func (p *UpProcess) Kill(t TB) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatalf("killing capstan up: %v", err)
	}
	<-p.done
}

// Output is everything the process printed so far.
func (p *UpProcess) Output() string { return p.output.String() }

// CLI runs a capstan command in this process and returns its output
// (stdout then stderr).
func CLI(args ...string) (string, error) {
	var out, errOut bytes.Buffer
	root := cli.NewRootCommand(&out, &errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String() + errOut.String(), err
}

// CLIOK is CLI that fails the test on error.
func CLIOK(t TB, args ...string) string {
	t.Helper()
	out, err := CLI(args...)
	if err != nil {
		t.Fatalf("capstan %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// Kubeconfig returns the client configuration of a kubeconfig file (a
// `capstan up` child's), riding out etcd's leader elections as capstan's
// own clients do.
func Kubeconfig(t TB, path string) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("kubeconfig %s: %v", path, err)
	}
	return etcdretry.Wrap(cfg)
}
