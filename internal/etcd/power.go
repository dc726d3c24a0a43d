package etcd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// A machine's power, when the API is down. Stopping two of three
// control-plane machines loses etcd's quorum, and with it the API that
// the simulated cloud works through, so a stopped machine cannot be
// started the usual way. As an administrator turns to the cloud console,
// `capstan sim node start` then writes a request into the data dir,
// which capstan acts on without the API: the machine's member starts,
// the quorum returns, and the node is started through the API once it
// answers.

// PowerOnDir holds the requests, one empty file per machine.
const PowerOnDir = "power-on"

// RequestPowerOn asks the capstan running on dataDir to start the member
// of the named control-plane machine. It fails for a name that is not a
// member there.
func RequestPowerOn(dataDir, name string) error {
	raw, err := os.ReadFile(filepath.Join(dataDir, "etcd-members.json"))
	if err != nil {
		return fmt.Errorf("the API is unavailable and %s holds no etcd members to start: %w", dataDir, err)
	}
	if !containsName(raw, name) {
		return fmt.Errorf("the API is unavailable and %s is not an etcd member in %s: only a control-plane machine can be started without the API", name, dataDir)
	}
	dir := filepath.Join(dataDir, PowerOnDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name), nil, 0o600)
}

func containsName(registry []byte, name string) bool {
	specs, err := parseRegistry(registry)
	if err != nil {
		return false
	}
	for _, s := range specs {
		if s.Name == name {
			return true
		}
	}
	return false
}

// pendingPowerOn lists the requests not yet carried through.
func (c *Cluster) pendingPowerOn() []string {
	entries, err := os.ReadDir(filepath.Join(c.cfg.DataDir, PowerOnDir))
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

// powerOnPending reports whether name has a request not carried through.
func (c *Cluster) powerOnPending(name string) bool {
	_, err := os.Stat(filepath.Join(c.cfg.DataDir, PowerOnDir, name))
	return err == nil
}

// clearPowerOn marks a request carried through.
func (c *Cluster) clearPowerOn(name string) error {
	err := os.Remove(filepath.Join(c.cfg.DataDir, PowerOnDir, name))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}
