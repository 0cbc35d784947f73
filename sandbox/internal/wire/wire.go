// Package wire is the control protocol between the server (sandbox/pool) and
// a worker process (sandbox/worker): length-prefixed JSON frames on a pair of
// pipes that are separate from anything the guest can write to.
package wire

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// MaxFrame bounds one frame so that neither side can be made to allocate
// without limit by the other.
const MaxFrame = 64 << 20

// The file descriptors a worker process is started with (os/exec ExtraFiles
// start at 3).
const (
	FDControlIn  = 3 // server → worker
	FDControlOut = 4 // worker → server
	FDRuntime    = 5 // the runtime directory (python.wasm, lib/), read-only
)

// Kinds of message.
const (
	KindInit   = "init"   // server → worker, once, after the cgroup is verified
	KindRun    = "run"    // server → worker
	KindReady  = "ready"  // worker → server: interpreter started and waiting
	KindResult = "result" // worker → server
	KindFatal  = "fatal"  // worker → server: the worker cannot go on
)

// Msg is one frame.
type Msg struct {
	Kind   string  `json:"kind"`
	Init   *Init   `json:"init,omitempty"`
	Run    *Run    `json:"run,omitempty"`
	Ready  *Ready  `json:"ready,omitempty"`
	Result *Result `json:"result,omitempty"`
	Fatal  string  `json:"fatal,omitempty"`
}

// Init configures a worker.
type Init struct {
	CacheDir         string `json:"cache_dir"`
	GuestMemoryBytes int64  `json:"guest_memory_bytes"`
	StdoutBytes      int    `json:"stdout_bytes"`
	StderrBytes      int    `json:"stderr_bytes"`
	ScratchBytes     int64  `json:"scratch_bytes"`
	// DropTo, when set, is the uid/gid the worker switches to before it
	// instantiates the guest.
	DropTo *Credential `json:"drop_to,omitempty"`
	// ParentPID lets the worker check it was not orphaned before it armed
	// its parent-death signal.
	ParentPID int `json:"parent_pid"`
}

// Credential is a uid/gid pair.
type Credential struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// Run asks for one program.
type Run struct {
	ID   uint64 `json:"id"`
	Code []byte `json:"code"`
	// TimeoutNanos is the run's wall-time limit. The worker enforces it so
	// it can report the output produced so far; the server kills the worker
	// a little later regardless.
	TimeoutNanos int64 `json:"timeout_ns"`
}

// Ready reports a warm interpreter.
type Ready struct {
	StartupNanos int64 `json:"startup_ns"`
}

// Status values of a Result, as the guest bootstrap reports them.
const (
	StatusOK      = "ok"      // ran to the end (or sys.exit(0))
	StatusError   = "error"   // an exception escaped
	StatusMemory  = "memory"  // MemoryError escaped
	StatusExited  = "exited"  // the interpreter ended (os._exit, a trap); the session's state is gone
	StatusTimeout = "timeout" // the run's time limit passed; the worker is ending
)

// Result is one program's outcome.
type Result struct {
	ID              uint64 `json:"id"`
	Status          string `json:"status"`
	Stdout          []byte `json:"stdout"`
	Stderr          []byte `json:"stderr"`
	StdoutDropped   int64  `json:"stdout_dropped"`
	StderrDropped   int64  `json:"stderr_dropped"`
	DurationNanos   int64  `json:"duration_ns"`
	InterpreterGone bool   `json:"interpreter_gone"`
	Detail          string `json:"detail,omitempty"`
	// Images are the figures the run left open, saved and closed after it
	// (gVisor kernel only).
	Images []Image `json:"images,omitempty"`
	// ImagesDropped counts figures not kept because of the count or byte
	// bound.
	ImagesDropped int `json:"images_dropped,omitempty"`
}

// Image is one figure a run produced.
type Image struct {
	MediaType string `json:"media_type"`
	Data      []byte `json:"data"` // base64 in JSON
}

// Write sends one frame.
func Write(w io.Writer, m *Msg) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("wire: encode: %w", err)
	}
	if len(b) > MaxFrame {
		return fmt.Errorf("wire: frame of %d bytes exceeds %d", len(b), MaxFrame)
	}
	buf := make([]byte, 4+len(b))
	binary.BigEndian.PutUint32(buf, uint32(len(b)))
	copy(buf[4:], b)
	_, err = w.Write(buf)
	return err
}

// ErrFrameTooLarge is returned for a frame above MaxFrame.
var ErrFrameTooLarge = errors.New("wire: frame too large")

// Read receives one frame. io.EOF means the peer closed cleanly between frames.
func Read(r io.Reader) (*Msg, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > MaxFrame {
		return nil, ErrFrameTooLarge
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("wire: short frame: %w", err)
	}
	var m Msg
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("wire: decode: %w", err)
	}
	return &m, nil
}
