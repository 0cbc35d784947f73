package pool

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sandbox/internal/wire"
)

// The scratch roots: the only places file operations reach.
const (
	scratchData = "/mnt/data"
	scratchTmp  = "/tmp"
)

// fileTimeout bounds one file operation. Moving MaxFileBytes through a pipe
// takes well under a second; an interpreter that has not answered by then
// is stuck (a thread the code left running holds the gVisor kernel's GIL in
// C, say) and is replaced rather than waited on.
const fileTimeout = 30 * time.Second

// cleanPath checks a caller's path and returns it cleaned: absolute, no NUL,
// UTF-8 (the control protocol is JSON), at most MaxPathBytes, and lexically
// inside /mnt/data or /tmp once ".." is resolved. The root itself is allowed
// only when root is true (ListFiles).
func cleanPath(p string, root bool) (string, error) {
	bad := func(why string) error { return fmt.Errorf("%w: %q %s", sandbox.ErrInvalidPath, p, why) }
	switch {
	case p == "":
		return "", bad("is empty")
	case strings.IndexByte(p, 0) >= 0:
		return "", bad("contains a NUL byte")
	case !utf8.ValidString(p):
		return "", bad("is not UTF-8")
	case !strings.HasPrefix(p, "/"):
		return "", bad("is not absolute")
	case len(p) > sandbox.MaxPathBytes:
		return "", bad(fmt.Sprintf("is longer than %d bytes", sandbox.MaxPathBytes))
	}
	c := path.Clean(p)
	for _, r := range []string{scratchData, scratchTmp} {
		if c == r {
			if root {
				return c, nil
			}
			return "", bad("is a directory")
		}
		if strings.HasPrefix(c, r+"/") {
			return c, nil
		}
	}
	return "", bad("is not under " + scratchData + " or " + scratchTmp)
}

func (s *session) WriteFile(ctx context.Context, p string, data []byte) error {
	c, err := cleanPath(p, false)
	if err != nil {
		return err
	}
	// Refused before it is sent: the interpreter would refuse it anyway,
	// after tens of MiB were copied.
	if lim := s.pool.cfg.Limits.ScratchBytes; int64(len(data)) > lim {
		return fmt.Errorf("%w: %s: %d bytes do not fit in the session's %d", sandbox.ErrScratchFull, c, len(data), lim)
	}
	if len(data) > sandbox.MaxFileBytes {
		return fmt.Errorf("%w: %s: %d bytes; a file is at most %d", sandbox.ErrTooLarge, c, len(data), sandbox.MaxFileBytes)
	}
	_, err = s.file(ctx, wire.KindPut, &wire.FileRequest{Path: c, Data: data})
	return err
}

func (s *session) ReadFile(ctx context.Context, p string, limit int64) ([]byte, error) {
	c, err := cleanPath(p, false)
	if err != nil {
		return nil, err
	}
	limit = min(max(limit, 0), sandbox.MaxFileBytes)
	r, err := s.file(ctx, wire.KindGet, &wire.FileRequest{Path: c, Max: limit})
	if err != nil {
		return nil, err
	}
	if r.Data == nil {
		r.Data = []byte{}
	}
	return r.Data, nil
}

func (s *session) ListFiles(ctx context.Context, dir string) (sandbox.Listing, error) {
	c, err := cleanPath(dir, true)
	if err != nil {
		return sandbox.Listing{}, err
	}
	r, err := s.file(ctx, wire.KindList, &wire.FileRequest{
		Path: c, Max: sandbox.MaxListFiles, MaxPath: sandbox.MaxPathBytes, MaxPathTotal: wire.MaxListPathTotal,
	})
	if err != nil {
		return sandbox.Listing{}, err
	}
	out := make([]sandbox.FileInfo, 0, len(r.Files))
	for _, f := range r.Files {
		out = append(out, sandbox.FileInfo{Path: f.Path, Size: f.Size, ModTime: time.Unix(0, f.ModTimeNanos)})
	}
	slices.SortFunc(out, func(a, b sandbox.FileInfo) int { return strings.Compare(a.Path, b.Path) })
	return sandbox.Listing{Files: out, Truncated: r.Truncated}, nil
}

func (s *session) RemoveFiles(ctx context.Context, paths []string) error {
	clean := make([]string, len(paths))
	for i, p := range paths {
		c, err := cleanPath(p, false)
		if err != nil {
			return err
		}
		clean[i] = c
	}
	if len(clean) == 0 {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed {
			return fmt.Errorf("sandbox: remove: %w", sandbox.ErrClosed)
		}
		return nil
	}
	// As many requests as it takes to keep each well inside a frame (a
	// path is at most MaxPathBytes, far below the bound, so each request
	// carries at least one).
	for len(clean) > 0 {
		n, total := 0, 0
		for n < len(clean) && total+len(clean[n]) <= wire.MaxListPathTotal {
			total += len(clean[n])
			n++
		}
		if _, err := s.file(ctx, wire.KindRemove, &wire.FileRequest{Paths: clean[:n:n]}); err != nil {
			return err
		}
		clean = clean[n:]
	}
	return nil
}

// file runs one file operation, serialised with runs. Like Run it replaces
// a lost interpreter first; an operation that gets no valid answer loses
// the interpreter (it is killed: its protocol state is unknown).
func (s *session) file(ctx context.Context, kind string, req *wire.FileRequest) (*wire.FileResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	op, what := opName(kind), target(req)
	if s.closed {
		return nil, fmt.Errorf("sandbox: %s %s: %w", op, what, sandbox.ErrClosed)
	}
	w, err := s.interpreter(ctx)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %s %s: could not start an interpreter: %w", op, what, err)
	}
	s.runID++
	req.ID = s.runID
	opCtx, cancel := context.WithTimeout(ctx, fileTimeout)
	r, err := w.File(opCtx, kind, req)
	cancel()
	if err == nil {
		err = wire.CheckFileResult(kind, req, r)
	}
	if err != nil {
		w.Kill()
		if w.oomKilled() { // read before release removes the cgroup
			err = fmt.Errorf("%w (the interpreter exceeded its memory limit and was killed)", err)
		}
		s.pool.release(w)
		s.it, s.lost = nil, true
		s.pool.log.Info("sandbox interpreter ended during a file operation", zap.String("provider", s.pool.kind.Name()),
			zap.String("session", s.id), zap.String("op", op), zap.Error(err))
		if ctx.Err() != nil {
			return nil, fmt.Errorf("sandbox: %s %s: %w", op, what, ctx.Err())
		}
		return nil, fmt.Errorf("sandbox: %s %s: the interpreter was lost: %w", op, what, err)
	}
	if r.Error != "" {
		return nil, fileError(op, req, r)
	}
	return r, nil
}

// opName names a file operation in errors and logs as the caller called it.
func opName(kind string) string {
	switch kind {
	case wire.KindPut:
		return "write"
	case wire.KindGet:
		return "read"
	case wire.KindRemove:
		return "remove"
	}
	return "list"
}

// target names what a file operation was about in errors: its path, or
// the first of a removal's paths and how many more there were.
func target(req *wire.FileRequest) string {
	switch n := len(req.Paths); {
	case n == 1:
		return req.Paths[0]
	case n > 1:
		return fmt.Sprintf("%s (and %d more)", req.Paths[0], n-1)
	}
	return req.Path
}

// fileError maps an interpreter's refusal to the typed errors callers
// branch on.
func fileError(op string, req *wire.FileRequest, r *wire.FileResult) error {
	var sentinel error
	why := r.Detail
	switch r.Error {
	case wire.FileErrNoSpace:
		sentinel = sandbox.ErrScratchFull
	case wire.FileErrNotExist:
		sentinel = sandbox.ErrNotExist
	case wire.FileErrNotRegular:
		sentinel, why = sandbox.ErrNotExist, "not a regular file: "+why
	case wire.FileErrTooLarge:
		sentinel = sandbox.ErrTooLarge
		if op == "read" {
			why = fmt.Sprintf("the file is %d bytes, more than %d", r.Size, req.Max)
		}
	case wire.FileErrInvalid:
		sentinel = sandbox.ErrInvalidPath
	default: // wire.FileErrIO; wire.CheckFileResult refused any other code
		return fmt.Errorf("sandbox: %s %s: %s", op, target(req), why)
	}
	return fmt.Errorf("sandbox: %s %s: %w: %s", op, target(req), sentinel, why)
}
