package etcd

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/capstan-dev/capstan/internal/waitfor"
)

// MemberProcesses finds, from the operating system's process table (never
// from capstan's registry), the member processes serving the cluster of
// dataDir: each one's name and PID. It is how a fault campaign or a test
// picks a member to SIGKILL, as an operator would with ps.
func MemberProcesses(dataDir string) (map[string]int, error) {
	root, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("the process table (/proc) cannot be read here: %w", err)
	}
	out := map[string]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue // it ended meanwhile
		}
		name, dir, ok := memberOf(strings.Split(string(bytes.TrimRight(raw, "\x00")), "\x00"))
		if ok && strings.HasPrefix(dir, root+string(filepath.Separator)) {
			out[name] = pid
		}
	}
	return out, nil
}

// memberOf reads a member's name and data dir from its command line
// (`capstan etcd member --name N --data-dir D ...`).
func memberOf(args []string) (name, dir string, ok bool) {
	if len(args) < 3 || args[1] != "etcd" || args[2] != "member" {
		return "", "", false
	}
	for i := 3; i+1 < len(args); i++ {
		switch args[i] {
		case "--name":
			name = args[i+1]
		case "--data-dir":
			dir = filepath.Clean(args[i+1])
		}
	}
	return name, dir, name != "" && dir != ""
}

// waitForOthersMembers waits until no member process of dataDir runs but
// this process's own. A capstan that was SIGKILLed leaves its members to
// the kernel, which kills them (their parent-death signal) as it tears
// them down: a start in that moment found the old member still holding
// its ports and serving, its new member failing to start, and then no
// member at all. Nothing else runs members of a data dir whose lock this
// process holds, so one still running after timeout is named in the
// error, not killed.
func waitForOthersMembers(ctx context.Context, dataDir string, timeout time.Duration) error {
	left, err := waitForMemberProcesses(ctx, dataDir, timeout, func(pid int) bool { return parentOf(pid) != os.Getpid() })
	if err != nil {
		return fmt.Errorf("etcd member processes of %s that this capstan did not start still run: %s; stop them: %w", dataDir, strings.Join(left, ", "), err)
	}
	return nil
}

// waitForNoMembers waits until no member process of dataDir runs at all,
// as upstream's cluster-restore.sh waits for the etcd containers to stop
// before it moves their data: a member still running would write into
// the data moved aside, or serve the old cluster beside the restored one.
func waitForNoMembers(ctx context.Context, dataDir string, timeout time.Duration) error {
	left, err := waitForMemberProcesses(ctx, dataDir, timeout, func(int) bool { return true })
	if err != nil {
		return fmt.Errorf("etcd member processes of %s still run: %s; stop capstan (or them) first: %w", dataDir, strings.Join(left, ", "), err)
	}
	return nil
}

// waitForMemberProcesses waits until no member process of dataDir that
// counts runs, and returns those that still did ("NAME (PID n)").
func waitForMemberProcesses(ctx context.Context, dataDir string, timeout time.Duration, counts func(pid int) bool) ([]string, error) {
	var left []string
	err := waitfor.Poll(ctx, 50*time.Millisecond, timeout, waitfor.Simple(func(context.Context) (bool, string) {
		procs, err := MemberProcesses(dataDir)
		if err != nil {
			return false, err.Error()
		}
		left = left[:0]
		for name, pid := range procs {
			if counts(pid) {
				left = append(left, fmt.Sprintf("%s (PID %d)", name, pid))
			}
		}
		slices.Sort(left)
		return len(left) == 0, "etcd member processes still run: " + strings.Join(left, ", ")
	}))
	return left, err
}

// parentOf is the PID of a process's parent, 0 when it cannot be read
// (the process ended).
func parentOf(pid int) int {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// pid (comm) state ppid: comm may hold spaces and parentheses.
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}
