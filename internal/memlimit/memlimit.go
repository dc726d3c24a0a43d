// Package memlimit sizes the Go runtime's garbage collector of capstan's
// processes from the memory of the machine they run on.
//
// The embedded control plane allocates heavily. Collecting less often
// (a higher GOGC) buys CPU for memory, as operators of kube-apiserver
// often do; a soft limit (GOMEMLIMIT) keeps that from growing the heap
// without bound. A fixed soft limit is wrong in both directions: on a
// large machine a simulation of thousands of nodes spends its CPU
// collecting against a limit far below what the machine has (a live heap
// of 3.3 GB against 4 GiB had the collector take 42 % of the CPU), and
// on a small one the limit is more than there is. So the limit is a share
// of the machine's memory, or of the cgroup's limit where one is set:
// half for the process that runs the control plane, and a sixteenth for
// each etcd member it starts (up to three, and a process or two of
// capstan's own beside them), which leaves a quarter of the machine to
// everything else.
//
// GOGC and GOMEMLIMIT set in the environment win over both.
package memlimit

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// Role is what a process of capstan's does, which sets its share.
type Role int

const (
	// Server runs the control plane and capstan's controllers.
	Server Role = iota
	// EtcdMember runs one etcd member.
	EtcdMember
)

// GCPercent is the collector's target for every role: the heap may grow
// to four times what is live before a collection, within the limit.
const GCPercent = 300

// Settings are what a process runs with, and where each came from.
type Settings struct {
	// GOGC is the collector's target percentage; GOMEMLIMIT the soft
	// limit in bytes (math.MaxInt64: none).
	GOGC       int
	GOMEMLIMIT int64
	// MachineMemory is the memory the limit was sized from: the
	// machine's, or its cgroup's limit when lower; 0 when unknown.
	MachineMemory int64
	// GOGCFromEnv and LimitFromEnv say the environment set them.
	GOGCFromEnv, LimitFromEnv bool
}

func (s Settings) String() string {
	return fmt.Sprintf("GOGC=%d GOMEMLIMIT=%s", s.GOGC, Bytes(s.GOMEMLIMIT))
}

// Bytes formats a size as GOMEMLIMIT takes it, in MiB.
func Bytes(b int64) string {
	return fmt.Sprintf("%dMiB", b>>20)
}

// Limit is the soft limit of a process of role on a machine of memory
// bytes.
func Limit(role Role, memory int64) int64 {
	if role == EtcdMember {
		return memory / 16
	}
	return memory / 2
}

// Apply sets the collector of this process for role, unless the
// environment already set it, and returns what it runs with. Where the
// machine's memory cannot be read, the limit is left as the environment
// or the runtime has it.
func Apply(role Role) Settings {
	s := Settings{GOGC: GCPercent}
	if v := os.Getenv("GOGC"); v != "" {
		s.GOGCFromEnv = true
		s.GOGC = debug.SetGCPercent(-1)
		debug.SetGCPercent(s.GOGC)
	} else {
		debug.SetGCPercent(GCPercent)
	}
	mem, err := MachineMemory()
	if err == nil {
		s.MachineMemory = mem
	}
	if os.Getenv("GOMEMLIMIT") != "" || err != nil {
		s.LimitFromEnv = os.Getenv("GOMEMLIMIT") != ""
		s.GOMEMLIMIT = debug.SetMemoryLimit(-1)
		return s
	}
	s.GOMEMLIMIT = Limit(role, mem)
	debug.SetMemoryLimit(s.GOMEMLIMIT)
	return s
}

// Current is what this process runs with now.
func Current() Settings {
	gogc := debug.SetGCPercent(-1)
	debug.SetGCPercent(gogc)
	s := Settings{GOGC: gogc, GOMEMLIMIT: debug.SetMemoryLimit(-1),
		GOGCFromEnv: os.Getenv("GOGC") != "", LimitFromEnv: os.Getenv("GOMEMLIMIT") != ""}
	s.MachineMemory, _ = MachineMemory()
	return s
}

// Env is the environment a child process of role is started with, so
// that it is sized from the same machine: GOGC and GOMEMLIMIT, unless
// the environment of this process sets them (the child inherits those).
func Env(role Role) []string {
	var out []string
	if os.Getenv("GOGC") == "" {
		out = append(out, "GOGC="+strconv.Itoa(GCPercent))
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		if mem, err := MachineMemory(); err == nil {
			out = append(out, "GOMEMLIMIT="+Bytes(Limit(role, mem)))
		}
	}
	return out
}

// MachineMemory is the memory this process may use: the machine's
// (MemTotal), or the limit of its cgroup where that is lower.
func MachineMemory() (int64, error) {
	raw, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	total, err := memTotal(raw)
	if err != nil {
		return 0, err
	}
	if limit, ok := cgroupLimit(); ok && limit < total {
		return limit, nil
	}
	return total, nil
}

// memTotal reads MemTotal from /proc/meminfo's text, in bytes.
func memTotal(meminfo []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(meminfo))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			f := strings.Fields(v)
			if len(f) == 2 && f[1] == "kB" {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil && kb > 0 {
					return kb << 10, nil
				}
			}
			return 0, fmt.Errorf("/proc/meminfo: MemTotal is %q, not a size in kB", strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("/proc/meminfo has no MemTotal")
}

// cgroupLimit is the memory limit of this process's cgroup (v2's
// memory.max, or v1's memory.limit_in_bytes), if one is set.
func cgroupLimit() (int64, bool) {
	for _, path := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		if limit, ok := parseCgroupLimit(path); ok {
			return limit, true
		}
	}
	return 0, false
}

func parseCgroupLimit(path string) (int64, bool) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	v := strings.TrimSpace(string(raw))
	if v == "max" {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	// cgroup v1 says "no limit" with a number near 2^63.
	if err != nil || n <= 0 || n >= 1<<62 {
		return 0, false
	}
	return n, true
}
