// Package powerfs is a filesystem whose power can be cut, as Jepsen's
// lazyfs is: a loopback of a backing directory that keeps the data
// written to each file in memory, as a machine's page cache and a disk's
// write cache do, until the file is synced (fsync, fdatasync); Cut drops
// what was not synced and unmounts. A program that acknowledged a write
// it never synced loses it at the cut, as it would at a power loss; a
// program that synced keeps it.
//
// Only file data is held back. Metadata changes (creating, renaming,
// removing, truncating, allocating) reach the backing directory at once:
// a power loss keeps them, which a real disk may not (lazyfs can drop
// them too), so the faults this finds are a subset of a real power
// loss's.
//
// Mounting needs /dev/fuse and the right to mount (root: go-fuse then
// mounts without fusermount).
package powerfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// pageSize is the unit data is held back in.
const pageSize = 4096

// FS is a mounted powerfs.
type FS struct {
	backing, mountpoint string
	server              *fuse.Server

	mu    sync.Mutex
	nodes map[*node]bool // the nodes holding unsynced data
	cut   bool
}

// Available says why this machine cannot mount a powerfs (nil: it can):
// it mounts one, on an empty directory, and unmounts it.
func Available() error {
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("no FUSE device: %w", err)
	}
	f.Close()
	if os.Geteuid() != 0 {
		return errors.New("mounting a FUSE filesystem without fusermount needs root")
	}
	backing, err := os.MkdirTemp("", "capstan-powerfs-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(backing)
	mnt, err := os.MkdirTemp("", "capstan-powerfs-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(mnt)
	fs, err := Mount(backing, mnt)
	if err != nil {
		return fmt.Errorf("mounting a FUSE filesystem needs the right to mount (CAP_SYS_ADMIN): %w", err)
	}
	return fs.Unmount()
}

// Mount mounts a powerfs of backing at mountpoint (both directories).
func Mount(backing, mountpoint string) (*FS, error) {
	root, err := fs.NewLoopbackRoot(backing)
	if err != nil {
		return nil, fmt.Errorf("powerfs: the backing dir %s: %w", backing, err)
	}
	f := &FS{backing: backing, mountpoint: mountpoint, nodes: map[*node]bool{}}
	lroot := root.(*fs.LoopbackNode)
	n := &node{LoopbackNode: lroot, fsys: f}
	lroot.RootData.RootNode = n
	opts := &fs.Options{MountOptions: fuse.MountOptions{DirectMount: true, FsName: "powerfs", Name: "powerfs",
		// The kernel must not keep written pages past the cut on its own:
		// every write and every read goes through this process.
		DisableXAttrs: true}}
	server, err := fs.Mount(mountpoint, n, opts)
	if err != nil {
		return nil, fmt.Errorf("powerfs: mounting %s on %s: %w", backing, mountpoint, err)
	}
	f.server = server
	return f, nil
}

// Unsynced is how many bytes written are not synced yet.
func (f *FS) Unsynced() int64 {
	f.mu.Lock()
	nodes := make([]*node, 0, len(f.nodes))
	for n := range f.nodes {
		nodes = append(nodes, n)
	}
	f.mu.Unlock()
	var total int64
	for _, n := range nodes {
		n.mu.Lock()
		total += int64(len(n.pages)) * pageSize
		n.mu.Unlock()
	}
	return total
}

// Cut cuts the power: every write not synced is lost, and the
// filesystem is unmounted (lazily, if a process still holds it: its
// calls fail). The processes using it should be gone first, as a
// machine's processes go with its power.
func (f *FS) Cut() error {
	f.mu.Lock()
	f.cut = true
	nodes := f.nodes
	f.nodes = map[*node]bool{}
	f.mu.Unlock()
	for n := range nodes {
		n.mu.Lock()
		n.pages, n.sized = nil, false
		n.mu.Unlock()
	}
	// The nodes' own descriptors stay open with them: a cut mount serves
	// nothing more, and the next mount has nodes of its own.
	return f.unmount()
}

// Unmount unmounts with nothing lost: the unsynced data is written to the
// backing dir first, as a clean shutdown's sync does.
func (f *FS) Unmount() error {
	f.mu.Lock()
	nodes := f.nodes
	f.mu.Unlock()
	var errs []error
	for n := range nodes {
		if errno := n.sync(); errno != 0 {
			errs = append(errs, fmt.Errorf("syncing %s: %w", n.path(), errno))
		}
	}
	return errors.Join(append(errs, f.unmount())...)
}

func (f *FS) unmount() error {
	if err := f.server.Unmount(); err != nil {
		// Busy: detach it; the calls still in flight fail.
		if derr := syscall.Unmount(f.mountpoint, syscall.MNT_DETACH); derr != nil {
			return fmt.Errorf("powerfs: unmounting %s: %v, then %w", f.mountpoint, err, derr)
		}
	}
	return nil
}

func (f *FS) isCut() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cut
}

func (f *FS) dirty(n *node) {
	f.mu.Lock()
	f.nodes[n] = true
	f.mu.Unlock()
}

func (f *FS) clean(n *node) {
	f.mu.Lock()
	delete(f.nodes, n)
	f.mu.Unlock()
}

// node is a file or directory of the loopback, with its unsynced data.
type node struct {
	*fs.LoopbackNode
	fsys *FS

	mu sync.Mutex
	// pages are the unsynced pages by index; size the file's size as
	// written, when sized (else the backing file's).
	pages map[int64][]byte
	size  int64
	sized bool
	// fd is the node's own descriptor of the backing file (read and
	// write, whatever its handles were opened for), opened at its first
	// write: pages are read and synced through it. It follows the file
	// through renames.
	fd int
}

// ownFd is the node's descriptor of the backing file. n.mu is held.
func (n *node) ownFd() (int, syscall.Errno) {
	if n.fd > 0 {
		return n.fd, 0
	}
	fd, err := syscall.Open(n.path(), syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return 0, fs.ToErrno(err)
	}
	n.fd = fd
	return fd, 0
}

var (
	_ fs.NodeWrapChilder    = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeGetattrer      = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeStatxer        = (*node)(nil)
	_ fs.NodeCopyFileRanger = (*node)(nil)
	_ fs.NodeTmpfiler       = (*node)(nil)
)

// path is the backing file's path.
func (n *node) path() string {
	return n.RootData.Path + "/" + n.Path(n.RootData.RootNode.EmbeddedInode())
}

func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*fs.LoopbackNode), fsys: n.fsys}
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if n.fsys.isCut() {
		return nil, 0, syscall.EIO
	}
	fh, fuseFlags, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return n.wrap(fh), fuseFlags, 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if n.fsys.isCut() {
		return nil, nil, 0, syscall.EIO
	}
	inode, fh, fuseFlags, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	return inode, inode.Operations().(*node).wrap(fh), fuseFlags, 0
}

// Tmpfile (O_TMPFILE) is refused: its file would bypass the held-back
// data. Callers fall back to a named temporary file.
func (n *node) Tmpfile(ctx context.Context, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EOPNOTSUPP
}

// CopyFileRange is refused: it would copy the backing files' data, not
// what was written. The kernel falls back to reads and writes.
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, len uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.ENOSYS
}

func (n *node) wrap(fh fs.FileHandle) *file {
	lf := fh.(*fs.LoopbackFile)
	fd, _ := lf.PassthroughFd()
	return &file{lf: lf, fd: fd, n: n}
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if errno := n.LoopbackNode.Getattr(ctx, unwrap(f), out); errno != 0 {
		return errno
	}
	n.heldSize(&out.Size)
	return 0
}

func (n *node) Statx(ctx context.Context, f fs.FileHandle, flags uint32, mask uint32, out *fuse.StatxOut) syscall.Errno {
	if errno := n.LoopbackNode.Statx(ctx, unwrap(f), flags, mask, out); errno != 0 {
		return errno
	}
	n.heldSize(&out.Size)
	return 0
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if n.fsys.isCut() {
		return syscall.EIO
	}
	if size, ok := in.GetSize(); ok {
		// A truncation reaches the backing file at once; the pages held
		// past it go, and the one it cuts is cut.
		n.mu.Lock()
		for i, p := range n.pages {
			switch start := i * pageSize; {
			case start >= int64(size):
				delete(n.pages, i)
			case start+pageSize > int64(size):
				clear(p[int64(size)-start:])
			}
		}
		if n.sized {
			n.size = int64(size)
		}
		n.mu.Unlock()
	}
	if errno := n.LoopbackNode.Setattr(ctx, unwrap(f), in, out); errno != 0 {
		return errno
	}
	n.heldSize(&out.Size)
	return 0
}

// heldSize sets *size to the file's size as written, when data past the
// backing file's is held.
func (n *node) heldSize(size *uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.sized {
		*size = uint64(n.size)
	}
}

func unwrap(f fs.FileHandle) fs.FileHandle {
	if w, ok := f.(*file); ok {
		return w.lf
	}
	return f
}

// backingSize is the backing file's size.
func backingSize(fd int) (int64, syscall.Errno) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return 0, fs.ToErrno(err)
	}
	return st.Size, 0
}

// page returns page i to write into, read from the backing file if it
// is not held yet. n.mu is held.
func (n *node) page(fd int, i int64) ([]byte, syscall.Errno) {
	if p, ok := n.pages[i]; ok {
		return p, 0
	}
	p := make([]byte, pageSize)
	if _, err := syscall.Pread(fd, p, i*pageSize); err != nil {
		return nil, fs.ToErrno(err)
	}
	if n.sized && i*pageSize+pageSize > n.size {
		// Past the size as written (a truncation held back): zeros.
		clear(p[max(0, n.size-i*pageSize):])
	}
	if n.pages == nil {
		n.pages = map[int64][]byte{}
	}
	n.pages[i] = p
	return p, 0
}

func (n *node) write(data []byte, off int64) (uint32, syscall.Errno) {
	if n.fsys.isCut() {
		return 0, syscall.EIO
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	fd, errno := n.ownFd()
	if errno != 0 {
		return 0, errno
	}
	if !n.sized {
		size, errno := backingSize(fd)
		if errno != 0 {
			return 0, errno
		}
		n.size, n.sized = size, true
	}
	for done := 0; done < len(data); {
		at := off + int64(done)
		i := at / pageSize
		p, errno := n.page(fd, i)
		if errno != 0 {
			return uint32(done), errno
		}
		done += copy(p[at-i*pageSize:], data[done:])
	}
	n.size = max(n.size, off+int64(len(data)))
	n.fsys.dirty(n)
	return uint32(len(data)), 0
}

func (n *node) read(fd int, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if n.fsys.isCut() {
		return nil, syscall.EIO
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.pages) > 0 || n.sized {
		// The node's own descriptor reads whatever the handle was
		// opened for.
		own, errno := n.ownFd()
		if errno != 0 {
			return nil, errno
		}
		fd = own
	}
	size := n.size
	if !n.sized {
		s, errno := backingSize(fd)
		if errno != 0 {
			return nil, errno
		}
		size = s
	}
	if off >= size {
		return fuse.ReadResultData(nil), 0
	}
	buf = buf[:min(int64(len(buf)), size-off)]
	got, err := syscall.Pread(fd, buf, off)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	// What the backing file lacks of the size as written is zeros, until
	// a held page says otherwise.
	clear(buf[max(0, got):])
	for i := off / pageSize; i*pageSize < off+int64(len(buf)); i++ {
		p, ok := n.pages[i]
		if !ok {
			continue
		}
		from := max(off, i*pageSize)
		to := min(off+int64(len(buf)), i*pageSize+pageSize)
		copy(buf[from-off:to-off], p[from-i*pageSize:to-i*pageSize])
	}
	return fuse.ReadResultData(buf), 0
}

// sync writes the held pages to the backing file and syncs it.
func (n *node) sync() syscall.Errno {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.pages) == 0 && !n.sized {
		return 0
	}
	fd, errno := n.ownFd()
	if errno != 0 {
		return errno
	}
	idx := make([]int64, 0, len(n.pages))
	for i := range n.pages {
		idx = append(idx, i)
	}
	sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })
	for _, i := range idx {
		p := n.pages[i][:min(pageSize, max(0, n.size-i*pageSize))]
		if len(p) == 0 {
			continue
		}
		if _, err := syscall.Pwrite(fd, p, i*pageSize); err != nil {
			return fs.ToErrno(err)
		}
	}
	if n.sized {
		if size, errno := backingSize(fd); errno == 0 && size != n.size {
			if err := syscall.Ftruncate(fd, n.size); err != nil {
				return fs.ToErrno(err)
			}
		}
	}
	if err := syscall.Fsync(fd); err != nil {
		return fs.ToErrno(err)
	}
	n.pages, n.sized = nil, false
	n.fsys.clean(n)
	return 0
}

// file is an open file of a node: its reads and writes go through the
// node's held pages.
type file struct {
	lf *fs.LoopbackFile
	fd int
	n  *node
}

var (
	_ fs.FileReader    = (*file)(nil)
	_ fs.FileWriter    = (*file)(nil)
	_ fs.FileFsyncer   = (*file)(nil)
	_ fs.FileFlusher   = (*file)(nil)
	_ fs.FileReleaser  = (*file)(nil)
	_ fs.FileGetattrer = (*file)(nil)
	_ fs.FileSetattrer = (*file)(nil)
	_ fs.FileAllocater = (*file)(nil)
	_ fs.FileLseeker   = (*file)(nil)
	_ fs.FileGetlker   = (*file)(nil)
	_ fs.FileSetlker   = (*file)(nil)
	_ fs.FileSetlkwer  = (*file)(nil)
)

func (f *file) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return f.n.read(f.fd, buf, off)
}

func (f *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	return f.n.write(data, off)
}

// Fsync writes what the node holds and syncs the backing file; a file
// with nothing held is synced too (its metadata).
func (f *file) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if f.n.fsys.isCut() {
		return syscall.EIO
	}
	if errno := f.n.sync(); errno != 0 {
		return errno
	}
	return f.lf.Fsync(ctx, flags)
}

// Flush (a close) keeps the data held: a close is no sync.
func (f *file) Flush(ctx context.Context) syscall.Errno { return 0 }

// Release closes the handle; what the node holds outlives it, as the
// page cache outlives a close.
func (f *file) Release(ctx context.Context) syscall.Errno {
	return f.lf.Release(ctx)
}

func (f *file) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return f.n.Getattr(ctx, f, out)
}

func (f *file) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return f.n.Setattr(ctx, f, in, out)
}

func (f *file) Allocate(ctx context.Context, off uint64, size uint64, mode uint32) syscall.Errno {
	if f.n.fsys.isCut() {
		return syscall.EIO
	}
	if errno := f.lf.Allocate(ctx, off, size, mode); errno != 0 {
		return errno
	}
	f.n.mu.Lock()
	if f.n.sized && mode&1 == 0 { // not FALLOC_FL_KEEP_SIZE
		f.n.size = max(f.n.size, int64(off+size))
	}
	f.n.mu.Unlock()
	return 0
}

func (f *file) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return f.lf.Lseek(ctx, off, whence)
}

func (f *file) Getlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	return f.lf.Getlk(ctx, owner, lk, flags, out)
}

func (f *file) Setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return f.lf.Setlk(ctx, owner, lk, flags)
}

func (f *file) Setlkw(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return f.lf.Setlkw(ctx, owner, lk, flags)
}
