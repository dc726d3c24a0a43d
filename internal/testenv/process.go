package testenv

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/capstan-dev/capstan/deploy"
	"github.com/capstan-dev/capstan/internal/cli"
	"github.com/capstan-dev/capstan/internal/etcdretry"
	"github.com/capstan-dev/capstan/internal/ports"
	"github.com/capstan-dev/capstan/internal/simulate"
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
	// Below the ephemeral range: a restarted capstan listens on it again.
	p, err := ports.Free()
	if err != nil {
		t.Fatalf("%v", err)
	}
	return p
}

// UpProcess is a running `capstan up`.
type UpProcess struct {
	// up is set for capstan up, which says when it stopped cleanly.
	up    bool
	cmd   *exec.Cmd
	mu    sync.Mutex
	out   bytes.Buffer
	lines chan string
	done  chan struct{}
}

// DumpEnv names a directory: a failed test's capstan up processes still
// running are stopped with SIGQUIT and their output, goroutine stacks
// included, is written there.
const DumpEnv = "CAPSTAN_TEST_DUMP_DIR"

// tailOnFailure is how much of a failed test's capstan output is logged:
// the end, where the fault is, without burying the test's own message.
const tailOnFailure = 150

func StartUp(t TB, args ...string) *UpProcess {
	t.Helper()
	return StartUpEnv(t, nil, args...)
}

// StartUpEnv is StartUp with env added to the process's environment
// (a variable the test needs, say).
func StartUpEnv(t TB, env []string, args ...string) *UpProcess {
	t.Helper()
	p := startCapstan(t, env, append([]string{"up"}, args...)...)
	p.up = true
	return p
}

// StartCapstan starts any long-running capstan command (capstan console,
// say) as StartUp starts capstan up.
func StartCapstan(t TB, args ...string) *UpProcess {
	t.Helper()
	return startCapstan(t, nil, args...)
}

func startCapstan(t TB, env []string, args ...string) *UpProcess {
	t.Helper()
	cmd := CapstanProcess(args...)
	cmd.Env = append(cmd.Env, env...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	p := &UpProcess{cmd: cmd, lines: make(chan string, 100), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%v", err)
	}
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
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
		f, canFail := t.(interface {
			Failed() bool
			Logf(string, ...any)
		})
		failed := canFail && f.Failed()
		select {
		case <-p.done:
		default:
			if dir := os.Getenv(DumpEnv); dir != "" && failed {
				// The log as it was, then every goroutine's stack (Go
				// prints them on SIGQUIT): where each component was
				// stuck when the test gave up.
				base := filepath.Join(dir, fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "_"), cmd.Process.Pid))
				if i := slices.Index(args, "--data-dir"); i >= 0 && i+1 < len(args) {
					if raw, err := os.ReadFile(filepath.Join(args[i+1], "logs", "capstan.log")); err == nil {
						_ = os.WriteFile(base+".log", raw, 0o644)
					}
				}
				_ = cmd.Process.Signal(syscall.SIGQUIT)
				select {
				case <-p.done:
				case <-time.After(30 * time.Second):
				}
				if err := os.WriteFile(base+".txt", []byte(p.Output()), 0o644); err == nil {
					f.Logf("log and goroutine dump of capstan up in %s.{log,txt}", base)
				}
			}
			cmd.Process.Kill()
			<-p.done
		}
		// Every component of a capstan up acts as its own identity: RBAC
		// refusing one anything is a missing right in its rbac.yaml.
		if i := slices.Index(args, "--data-dir"); p.up && i >= 0 && i+1 < len(args) {
			if forbidden, err := deploy.Refused(filepath.Join(args[i+1], "logs", "audit.log")); err == nil && len(forbidden) > 0 {
				t.Errorf("RBAC refused capstan's components in capstan up %s:\n  %s", args[i+1], strings.Join(forbidden, "\n  "))
			}
		}
		// A failed test shows what capstan was doing: CI keeps nothing
		// else of the process.
		if failed {
			lines := strings.Split(strings.TrimRight(p.Output(), "\n"), "\n")
			if len(lines) > tailOnFailure {
				lines = lines[len(lines)-tailOnFailure:]
			}
			f.Logf("last %d lines of capstan up %s:\n%s", len(lines), strings.Join(args, " "), strings.Join(lines, "\n"))
			logTail(f, args)
		}
	})
	return p
}

// logged are the data dirs whose log a failed test has shown already: the
// processes of one test share one log.
var logged sync.Map

// logTail logs the end of the capstan log of the data dir in args.
func logTail(t interface{ Logf(string, ...any) }, args []string) {
	i := slices.Index(args, "--data-dir")
	if i < 0 || i+1 >= len(args) {
		return
	}
	path := filepath.Join(args[i+1], "logs", "capstan.log")
	if _, done := logged.LoadOrStore(path, true); done {
		return
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	if len(lines) > 4*tailOnFailure {
		lines = lines[len(lines)-4*tailOnFailure:]
	}
	t.Logf("last %d lines of %s:\n%s", len(lines), path, strings.Join(lines, "\n"))
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
			t.Fatalf("capstan up exited before printing %q:\n%s", substr, p.Output())
		case <-deadline:
			t.Fatalf("capstan up did not print %q within %s:\n%s", substr, timeout, p.Output())
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
		t.Fatalf("capstan up did not stop on SIGTERM:\n%s", p.Output())
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("capstan up exited %d after SIGTERM:\n%s", code, p.Output())
	}
	if p.up && !strings.Contains(p.Output(), "capstan stopped") {
		t.Errorf("no clean stop message:\n%s", p.Output())
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

// WaitExit waits for the process to end on its own (a failpoint it was
// armed with, say).
func (p *UpProcess) WaitExit(t TB, timeout time.Duration) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("capstan did not exit within %s:\n%s", timeout, p.Output())
	}
}

// Output is everything the process printed so far.
func (p *UpProcess) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

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

// SimulateRun runs `capstan simulate run -o json` in a process of its own
// (it starts a control plane of its own) and decodes its report.
func SimulateRun(t *testing.T, args ...string) *simulate.Report {
	t.Helper()
	rep, status := SimulateRunStatus(t, args...)
	if status != 0 {
		t.Fatalf("capstan simulate run %s: exit status %d", strings.Join(args, " "), status)
	}
	return rep
}

// SimulateRunStatus is SimulateRun that also takes the report of a run
// that exits with --fail-on's status, and returns the exit status.
func SimulateRunStatus(t *testing.T, args ...string) (*simulate.Report, int) {
	t.Helper()
	cmd := CapstanProcess(append([]string{"simulate", "run", "-o", "json"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	status := 0
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 3 {
			t.Fatalf("capstan simulate run %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		status = ee.ExitCode()
	}
	var rep simulate.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("the report is not JSON: %v\n%s", err, stdout.String())
	}
	t.Logf("capstan simulate run %s:\n%s", strings.Join(args, " "), stderr.String())
	return &rep, status
}
