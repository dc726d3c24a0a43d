// Package datadir is the layout of a capstan cluster's data dir: where
// its etcd members, certificates, kubeconfigs, admission files and logs
// are, the state file that keeps its ports across restarts, and the lock
// that keeps a second capstan off it. It is kept apart from the control
// plane, so that tools reading a data dir (capstan chaos, which records
// the cluster's storage) do not link the API server.
package datadir

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/capstan-dev/capstan/internal/atomicfile"
	"github.com/capstan-dev/capstan/internal/ports"
)

// FormatVersion is the layout version of a data dir. A data dir written
// with another version is refused rather than guessed at.
const FormatVersion = 1

// DataDir is the on-disk home of one cluster: etcd data, PKI, kubeconfigs,
// admission configuration and logs.
type DataDir struct {
	Root string
	// Warnings are what Open found unsafe but let be (a data dir that
	// others may read).
	Warnings []string
	lock     *os.File
}

// state is persisted as capstan.json.
type state struct {
	FormatVersion int `json:"formatVersion"`
	// EtcdClientPort and EtcdPeerPort stay the same across restarts: the peer
	// URL is part of the etcd membership stored in its WAL.
	EtcdClientPort int `json:"etcdClientPort"`
	EtcdPeerPort   int `json:"etcdPeerPort"`
	// WebhookPort is where capstan serves its admission webhooks; kept so
	// that their registration stays valid across restarts.
	WebhookPort int `json:"webhookPort,omitempty"`
}

// Path joins elements onto the data dir root.
func (d *DataDir) Path(elem ...string) string {
	return filepath.Join(append([]string{d.Root}, elem...)...)
}

// Paths of the files capstan keeps in a data dir.
func (d *DataDir) KubeconfigPath() string { return d.Path("kubeconfig") }
func (d *DataDir) PKIDir() string         { return d.Path("pki") }
func (d *DataDir) EtcdDir() string        { return d.Path("etcd") }
func (d *DataDir) AdmissionDir() string   { return d.Path("admission") }
func (d *DataDir) LogDir() string         { return d.Path("logs") }

// AuditLogPath is where the apiserver writes its audit log, one JSON
// event per line, rotated at 100 MB into two backups beside it.
func (d *DataDir) AuditLogPath() string { return d.Path("logs", "audit.log") }

// EffectiveAdmission is the dir, in the admission dir, of the validated
// copies of the admission files in force.
const EffectiveAdmission = "effective"

// EffectiveAdmissionFile is the validated copy of an admission file that
// is in force.
func (d *DataDir) EffectiveAdmissionFile(name string) string {
	return filepath.Join(d.AdmissionDir(), EffectiveAdmission, name)
}
func (d *DataDir) statePath() string { return d.Path("capstan.json") }

// ErrLocked is returned when another capstan holds the data dir.
var ErrLocked = errors.New("data dir is in use by another capstan")

// Open creates (if needed), validates and locks a data dir. The lock is
// held until Close; a second capstan on the same dir is refused.
func Open(root string) (*DataDir, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("data dir %q: %w", root, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("data dir %s is not writable: %w", abs, unwrapPathError(err))
	}
	probe := filepath.Join(abs, ".write-test")
	if err := os.WriteFile(probe, nil, 0o600); err != nil {
		return nil, fmt.Errorf("data dir %s is not writable: %w", abs, unwrapPathError(err))
	}
	os.Remove(probe)

	d := &DataDir{Root: abs}
	// MkdirAll makes it 0700, but a dir that was there keeps its mode.
	if fi, err := os.Stat(abs); err == nil && fi.Mode().Perm()&0o077 != 0 {
		d.Warnings = append(d.Warnings, fmt.Sprintf("data dir %s may be read or entered by other users (mode %04o): it holds the cluster's keys, tokens and etcd's data; chmod 700 %s",
			abs, fi.Mode().Perm(), abs))
	}
	lockPath := d.Path("capstan.lock")
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening lock %s: %w", lockPath, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(lockPath)
		f.Close()
		msg := fmt.Sprintf("%s: %v", abs, ErrLocked)
		if pid := strings.TrimSpace(string(holder)); pid != "" {
			msg += " (pid " + pid + ")"
		}
		return nil, fmt.Errorf("%s", msg)
	}
	// Record the holder for the message above; the flock is what guards.
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	d.lock = f
	if err := d.checkFormat(); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// Close releases the lock.
func (d *DataDir) Close() {
	if d.lock != nil {
		_ = d.lock.Truncate(0)
		_ = syscall.Flock(int(d.lock.Fd()), syscall.LOCK_UN)
		d.lock.Close()
		d.lock = nil
	}
}

// checkFormat refuses data dirs of another format version, and directories
// that hold etcd data capstan did not write.
func (d *DataDir) checkFormat() error {
	st, err := d.readState()
	if errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(d.EtcdDir()); err == nil {
			return fmt.Errorf("data dir %s holds etcd data but no capstan.json: not a capstan data dir, refusing to touch it", d.Root)
		}
		return nil
	}
	if err != nil {
		return err
	}
	if st.FormatVersion != FormatVersion {
		return fmt.Errorf("data dir %s has format version %d, this capstan reads version %d: use a matching capstan or a new --data-dir", d.Root, st.FormatVersion, FormatVersion)
	}
	return nil
}

func (d *DataDir) readState() (*state, error) {
	raw, err := os.ReadFile(d.statePath())
	if err != nil {
		return nil, err
	}
	st := &state{}
	if err := json.Unmarshal(raw, st); err != nil {
		return nil, fmt.Errorf("data dir %s: capstan.json is corrupt: %w", d.Root, err)
	}
	return st, nil
}

// EtcdPorts returns the persisted etcd ports, choosing free ones the first
// time.
func (d *DataDir) EtcdPorts() (client, peer int, err error) {
	st, err := d.readState()
	if errors.Is(err, os.ErrNotExist) {
		st = &state{FormatVersion: FormatVersion}
	} else if err != nil {
		return 0, 0, err
	}
	if st.EtcdClientPort == 0 || !ports.Available(st.EtcdClientPort) {
		if st.EtcdClientPort, err = ports.Free(); err != nil {
			return 0, 0, err
		}
	}
	// A taken peer port moves too: the etcd package points the
	// membership at the new one once the member serves.
	if st.EtcdPeerPort == 0 || !ports.Available(st.EtcdPeerPort) {
		if st.EtcdPeerPort, err = ports.Free(); err != nil {
			return 0, 0, err
		}
	}
	raw, _ := json.MarshalIndent(st, "", "  ")
	if err := atomicfile.Write(d.statePath(), append(raw, '\n'), 0o600); err != nil {
		return 0, 0, err
	}
	return st.EtcdClientPort, st.EtcdPeerPort, nil
}

// WebhookListener listens on the persisted webhook port, or on a new free
// one when it is taken or not chosen yet.
func (d *DataDir) WebhookListener() (net.Listener, error) {
	st, err := d.readState()
	if err != nil {
		return nil, err
	}
	if st.WebhookPort != 0 {
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(st.WebhookPort))); err == nil {
			return l, nil
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	st.WebhookPort = l.Addr().(*net.TCPAddr).Port
	raw, _ := json.MarshalIndent(st, "", "  ")
	if err := atomicfile.Write(d.statePath(), append(raw, '\n'), 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
