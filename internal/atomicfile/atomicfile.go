// Package atomicfile writes files whole or not at all, durably: what a
// crash or a power loss leaves is either the old file or the new one,
// never a half-written or empty one.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Write writes data to path with mode perm: through a temporary file in
// the same directory, synced, renamed over path, and the directory
// synced so that the rename survives a power loss. The directory is
// made (0700) when missing.
func Write(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	name := tmp.Name()
	err = func() error {
		if _, err := tmp.Write(data); err != nil {
			return err
		}
		if err := tmp.Chmod(perm); err != nil {
			return err
		}
		return tmp.Sync()
	}()
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(name, path)
	}
	if err != nil {
		os.Remove(name)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return SyncDir(dir)
}

// SyncDir syncs a directory, making the entries created, renamed or
// removed in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	return nil
}

// WriteDir makes the directory path whole or not at all, durably: fill
// writes it into a temporary directory beside path, every file and
// directory in it is synced, and it is renamed into place and its parent
// synced. What a crash or a power loss leaves is no directory (fill runs
// again) or a whole one, never one with empty files.
func WriteDir(path string, fill func(dir string) error) error {
	parent := filepath.Dir(path)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	err = fill(tmp)
	if err == nil {
		err = filepath.WalkDir(tmp, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			err = f.Sync()
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			return err
		})
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return SyncDir(parent)
}
