package failpoint

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
)

// Failpoints and faults kill and fail a production binary: only a
// process that a campaign started honours Env, FileEnv and FaultEnv, and
// it tells by a key the campaign hands it, never by its environment
// alone. The campaign makes a random key per process, passes its digest
// in KeyEnv and the key itself on file descriptor 3, a pipe that only
// the campaign could have given the process at its start (HandKey). A
// capstan whose environment names failpoints or faults but which was
// not handed the key, as one a deployment's environment configures,
// ignores them and says so.

// KeyEnv holds the digest of the key a campaign handed the process.
const KeyEnv = "CAPSTAN_CHAOS_KEY"

// keyFD is the file descriptor the key comes on: the first of
// exec.Cmd's ExtraFiles.
const keyFD = 3

// honoured is whether this process was handed the key its KeyEnv names.
var honoured = handed()

func handed() bool {
	want := os.Getenv(KeyEnv)
	if want == "" {
		return false
	}
	// Non-blocking: with no key handed, fd 3 may be anything, or nothing.
	if err := syscall.SetNonblock(keyFD, true); err != nil {
		return false
	}
	buf := make([]byte, 128)
	n, err := syscall.Read(keyFD, buf)
	if err != nil || n <= 0 {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(keyDigest(buf[:n])), []byte(want)) == 1
}

func keyDigest(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:])
}

// Honoured says whether this process honours failpoints and faults.
func Honoured() bool { return honoured }

// envOf is the value of an environment variable this package reads, when
// the process honours it; a variable it ignores is said once.
func envOf(name string) string {
	v := os.Getenv(name)
	if v != "" && !honoured {
		fmt.Fprintf(os.Stderr, "capstan: warning: %s is ignored: only a process `capstan chaos` starts honours failpoints and faults\n", name)
		return ""
	}
	return v
}

// HandKey has cmd, not started yet, honour failpoints and faults: a new
// key on its file descriptor 3 (its first ExtraFiles, before any it
// has) and the key's digest in its environment. done closes the
// parent's end once cmd has started.
func HandKey(cmd *exec.Cmd) (done func(), err error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	key = []byte(hex.EncodeToString(key))
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	// 64 bytes fit in any pipe's buffer: the write does not wait for
	// the reader.
	if _, err := w.Write(key); err != nil {
		r.Close()
		w.Close()
		return nil, err
	}
	w.Close()
	cmd.ExtraFiles = append([]*os.File{r}, cmd.ExtraFiles...)
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(without(cmd.Env, KeyEnv), KeyEnv+"="+keyDigest(key))
	return func() { r.Close() }, nil
}

// ChaosEnv are the environment variables that arm failpoints and faults
// or hand their key.
var ChaosEnv = []string{Env, FileEnv, FaultEnv, KeyEnv}

// Without is env without the variables of ChaosEnv: for a process that
// is not the campaign's to kill (an etcd member of capstan up).
func Without(env []string) []string { return without(env, ChaosEnv...) }

func without(env []string, names ...string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(e string) bool {
		name, _, _ := strings.Cut(e, "=")
		return slices.Contains(names, name)
	})
}
