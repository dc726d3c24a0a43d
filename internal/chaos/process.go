package chaos

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/capstan-dev/capstan/internal/failpoint"
)

// upLine is what `capstan up` prints once it serves.
const upLine = "capstan is up"

// process is one process of a run: a `capstan up`, or the process a
// scenario kills instead (Target).
type process struct {
	cmd *exec.Cmd
	// name names it in what the campaign says ("capstan up"); upLine is
	// what it prints once it is up.
	name, upLine string
	// log, when set, gets every line it prints.
	log io.Writer

	mu sync.Mutex
	// tail is the end of what it printed.
	tail []string
	// point is the failpoint it killed itself at.
	point string
	// up is closed when it printed upLine; marker when it printed that it
	// reached its failpoint.
	up, marker chan struct{}
	// hits counts the hits of armed points that did not kill it.
	hits     map[string]int
	upOnce   sync.Once
	markOnce sync.Once
	// done is closed once it exited; state is then its exit.
	done  chan struct{}
	state *exec.ExitError
	err   error
}

const tailLines = 40

// startProcess starts `capstan up args` with its failpoints armed by the
// file armFile (failpoint.FileEnv) and nothing else (an armed point in
// the campaign's own environment is not inherited), and the lasting
// faults and planted bugs given.
func startProcess(command func(args ...string) *exec.Cmd, args []string, armFile string, env ...string) (*process, error) {
	return startCommand(command, append([]string{"up"}, args...), upLine, armFile, env...)
}

// startCommand starts `capstan args` as startProcess does: it is up once
// it prints upLine.
func startCommand(command func(args ...string) *exec.Cmd, args []string, upLine, armFile string, env ...string) (*process, error) {
	return startLogged(command, args, upLine, armFile, nil, env...)
}

// startLogged starts `capstan args` as startCommand does, copying what it
// prints to log (nil: nowhere).
func startLogged(command func(args ...string) *exec.Cmd, args []string, upLine, armFile string, log io.Writer, env ...string) (*process, error) {
	cmd := command(args...)
	cmd.Env = append(cmd.Environ(), failpoint.Env+"=", failpoint.FileEnv+"="+armFile)
	cmd.Env = append(cmd.Env, env...)
	handed, err := failpoint.HandKey(cmd)
	if err != nil {
		return nil, err
	}
	defer handed()
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	p := &process{cmd: cmd, name: "capstan " + args[0], upLine: upLine, log: log, up: make(chan struct{}), marker: make(chan struct{}), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", p.name, err)
	}
	// done closes once the process exited and everything it printed was
	// read: its marker, if it printed one, is seen by then.
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if p.log != nil {
				fmt.Fprintln(p.log, line)
			}
			p.mu.Lock()
			p.tail = append(p.tail, line)
			if len(p.tail) > tailLines {
				p.tail = p.tail[len(p.tail)-tailLines:]
			}
			p.mu.Unlock()
			switch {
			case strings.Contains(line, p.upLine):
				p.upOnce.Do(func() { close(p.up) })
			case strings.HasPrefix(line, failpoint.HitMarker):
				p.mu.Lock()
				if p.hits == nil {
					p.hits = map[string]int{}
				}
				p.hits[failpoint.HitPoint(line)]++
				p.mu.Unlock()
			case strings.HasPrefix(line, failpoint.Marker):
				p.mu.Lock()
				p.point = failpoint.ReachedPoint(line)
				p.mu.Unlock()
				p.markOnce.Do(func() { close(p.marker) })
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		err := cmd.Wait()
		pw.Close()
		<-scanned
		p.mu.Lock()
		if !errors.As(err, &p.state) {
			p.err = err
		}
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// Tail is the end of the process's output.
func (p *process) Tail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}

// waitUp waits until the process says it is up; it fails if the process
// exits first or takes longer than timeout.
func (p *process) waitUp(timeout time.Duration) error {
	select {
	case <-p.up:
		return nil
	case <-p.done:
		return fmt.Errorf("%s exited (%s) before saying it was up:\n%s", p.name, p.exit(), p.Tail())
	case <-time.After(timeout):
		return fmt.Errorf("%s did not say it was up within %s:\n%s", p.name, timeout, p.Tail())
	}
}

// reachedFailpoint reports whether the process killed itself at its
// failpoint.
func (p *process) reachedFailpoint() bool {
	select {
	case <-p.marker:
		return true
	default:
		return false
	}
}

// reachedPoint is the failpoint the process killed itself at ("" none).
func (p *process) reachedPoint() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.point
}

// exited reports whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exit describes how the process ended.
func (p *process) exit() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.err != nil:
		return p.err.Error()
	case p.state == nil:
		return "exit status 0"
	default:
		return p.state.Error()
	}
}

// killedBySIGKILL reports whether the process ended by SIGKILL.
func (p *process) killedBySIGKILL() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == nil {
		return false
	}
	ws, ok := p.state.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// kill sends SIGKILL, as a crash would, and waits for the process to go.
func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// stop asks the process to stop (SIGTERM) and waits up to timeout; a
// process that does not stop in time is killed, and stop says so.
func (p *process) stop(timeout time.Duration) error {
	if p.exited() {
		return fmt.Errorf("%s had exited (%s)", p.name, p.exit())
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if p.state != nil {
			return fmt.Errorf("%s stopped with %s:\n%s", p.name, p.exit(), p.Tail())
		}
		return nil
	case <-time.After(timeout):
		p.kill()
		return fmt.Errorf("%s did not stop within %s of SIGTERM:\n%s", p.name, timeout, p.Tail())
	}
}

// pointHits are the hits of armed points the process made without being
// killed, by point.
func (p *process) pointHits() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.hits))
	for k, v := range p.hits {
		out[k] = v
	}
	return out
}
