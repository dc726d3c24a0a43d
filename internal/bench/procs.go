package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Process is one process of capstan's at a moment: this one or one it
// started (an etcd member), with its peak and current resident sizes and
// the CPU time it has used.
type Process struct {
	PID  int
	Name string
	// PeakRSS is the process's VmHWM, RSS its VmRSS, in bytes.
	PeakRSS, RSS int64
	// PSS is its proportional set size: its resident pages, each shared
	// one divided among the processes sharing it, so that processes of
	// one binary are not each counted whole for the pages they share.
	PSS int64
	CPU time.Duration
}

// clockTick is the unit of /proc/PID/stat's CPU times (USER_HZ), 100 on
// every Linux this runs on.
const clockTick = 10 * time.Millisecond

// Processes reads this process and those below it from /proc. A child
// that ended meanwhile is left out.
func Processes() ([]Process, error) { return ProcessTree(os.Getpid()) }

// ProcessTree reads the process root and those below it from /proc,
// naming root "capstan". A child that ended meanwhile is left out.
func ProcessTree(root int) ([]Process, error) {
	top, err := readProcess(root)
	if err != nil {
		return nil, err
	}
	top.Name = "capstan"
	out := []Process{top}
	for _, pid := range descendants(root) {
		if p, err := readProcess(pid); err == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

func readProcess(pid int) (Process, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	p := Process{PID: pid}
	var err error
	if p.PeakRSS, err = vmField(filepath.Join(dir, "status"), "VmHWM:"); err != nil {
		return p, err
	}
	if p.RSS, err = vmField(filepath.Join(dir, "status"), "VmRSS:"); err != nil {
		return p, err
	}
	// smaps_rollup may be unreadable (another user's process): PSS is
	// then 0, and RSS still says something.
	p.PSS, _ = vmField(filepath.Join(dir, "smaps_rollup"), "Pss:")
	raw, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return p, err
	}
	// pid (comm) state ppid ... utime stime: fields 14 and 15, counted
	// from after comm, which may hold spaces.
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return p, fmt.Errorf("%s/stat: no command name", dir)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return p, fmt.Errorf("%s/stat: %d fields", dir, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return p, fmt.Errorf("%s/stat: CPU times %q %q", dir, f[11], f[12])
	}
	p.CPU = time.Duration(utime+stime) * clockTick
	p.Name = processName(dir, s[strings.IndexByte(s, '(')+1:i])
	return p, nil
}

// processName names a process by its command line: capstan's own
// subcommands by their words before the first flag and their --name (an
// etcd member: "capstan etcd member master-0"), others by their command.
func processName(dir, comm string) string {
	raw, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	if err != nil || len(raw) == 0 {
		return comm
	}
	args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
	words := []string{filepath.Base(args[0])}
	// capstan starts its etcd members as /proc/self/exe.
	if words[0] == "exe" {
		words[0] = "capstan"
	}
	for _, a := range args[1:] {
		if strings.HasPrefix(a, "-") || len(words) == 4 {
			break
		}
		words = append(words, a)
	}
	// An etcd member is told apart by its name.
	for i, a := range args[:len(args)-1] {
		if a == "--name" {
			words = append(words, args[i+1])
			break
		}
	}
	return strings.Join(words, " ")
}

// totalPSS sums the processes' proportional set sizes.
func totalPSS(ps []Process) int64 {
	var pss int64
	for _, p := range ps {
		pss += p.PSS
	}
	return pss
}

// totals sums the processes' peak and current resident sizes and CPU.
func totals(ps []Process) (peak, rss int64, cpu time.Duration) {
	for _, p := range ps {
		peak += p.PeakRSS
		rss += p.RSS
		cpu += p.CPU
	}
	return peak, rss, cpu
}
