package registry

import (
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
)

// Bounds of blob uploads. The library keeps an upload's chunks in memory
// until it is committed, and never forgets an abandoned one, in the
// process that also runs the control plane: a blob may hold
// MaxBlobUpload, and all open uploads together MaxOpenUploads. A request
// that declares more is refused with 413 before its body is read; one
// of unknown length is cut at what is left.
const (
	MaxBlobUpload  = 256 << 20
	MaxOpenUploads = 1 << 30
)

// uploads counts the bytes read of each open upload (by its location,
// the path the chunks go to).
type uploads struct {
	mu    sync.Mutex
	bytes map[string]int64
	total int64
}

// counted counts what is read through it, and keeps whether it hit its
// bound.
type counted struct {
	io.ReadCloser
	n       int64
	tooLong bool
}

func (c *counted) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n += int64(n)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		c.tooLong = true
	}
	return n, err
}

// serve serves an upload request with h, its body bounded and counted
// against its upload and all of them. A commit (PUT) or a cancel
// (DELETE) ends the upload's accounting.
func (u *uploads) serve(w http.ResponseWriter, req *http.Request, h http.Handler) {
	i := strings.LastIndex(req.URL.Path, "/blobs/uploads/")
	if i < 0 || req.Method == http.MethodGet || req.Method == http.MethodHead {
		h.ServeHTTP(w, req)
		return
	}
	id := req.URL.Path[i+len("/blobs/uploads/"):]
	// What the body may hold is reserved before it is read: concurrent
	// requests share what is left, not each the whole of it.
	u.mu.Lock()
	if u.bytes == nil {
		u.bytes = map[string]int64{}
	}
	blobLeft := MaxBlobUpload - u.bytes[id]
	left := max(min(blobLeft, MaxOpenUploads-u.total), 0)
	if req.ContentLength > left {
		u.mu.Unlock()
		msg := "a blob may hold at most 256 MiB"
		if req.ContentLength <= blobLeft {
			msg = "the registry holds 1 GiB of uploads not yet committed or under way: commit them, or restart it, before uploading more"
		}
		writeError(w, http.StatusRequestEntityTooLarge, "SIZE_INVALID", msg)
		return
	}
	reserved := left
	if req.ContentLength >= 0 {
		reserved = req.ContentLength
	}
	u.bytes[id] += reserved
	u.total += reserved
	u.mu.Unlock()
	body := &counted{ReadCloser: http.MaxBytesReader(w, req.Body, reserved)}
	req.Body = body
	// The library answers a body cut short as if it were whole: its
	// answer (a few headers) is held until the body's fate is known.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if body.tooLong {
		writeError(w, http.StatusRequestEntityTooLarge, "SIZE_INVALID", "the upload was cut at 256 MiB for the blob, or 1 GiB for all uploads not yet committed")
	} else {
		maps.Copy(w.Header(), rec.Header())
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if id == "" || req.Method == http.MethodPut || req.Method == http.MethodDelete {
		// Committed, cancelled, or (a start) none to keep.
		u.total -= u.bytes[id]
		delete(u.bytes, id)
		return
	}
	// The reservation becomes what was read.
	u.bytes[id] += body.n - reserved
	u.total += body.n - reserved
}
