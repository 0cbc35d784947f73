package wire

import (
	"bufio"
	"bytes"
	"encoding/base64"
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
	// KindNext ends the worker's current session and starts a fresh one
	// from the snapshot in the same process (sandbox.sessions_per_worker);
	// the worker answers KindReady, or KindFatal and exits.
	KindNext = "next" // server → worker

	// File operations on the scratch space, between runs (the guest is
	// idle). Each request carries a FileRequest and is answered by one
	// KindFileResult.
	KindPut        = "put"         // server → worker: write FileRequest.Data to Path, replacing what is in the way
	KindGet        = "get"         // server → worker: read Path, at most Max bytes
	KindList       = "list"        // server → worker: the regular files below Path
	KindRemove     = "remove"      // server → worker: remove what is at each of Paths
	KindFileResult = "file_result" // worker → server
)

// Msg is one frame.
type Msg struct {
	Kind   string  `json:"kind"`
	Init   *Init   `json:"init,omitempty"`
	Run    *Run    `json:"run,omitempty"`
	Ready  *Ready  `json:"ready,omitempty"`
	Result *Result `json:"result,omitempty"`
	Fatal  string  `json:"fatal,omitempty"`
	// RestoreRefused, on the KindFatal answering an Init with Restore,
	// says the state itself was refused (corrupt, cut short, or not of
	// this snapshot): it can never be restored. Any other fatal start-up
	// error (the worker's own failure) says nothing of the state.
	RestoreRefused bool `json:"restore_refused,omitempty"`

	File       *FileRequest `json:"file,omitempty"`
	FileResult *FileResult  `json:"file_result,omitempty"`

	Checkpoint *Checkpoint `json:"checkpoint,omitempty"`
}

// Session checkpoints (wasm): between runs the server asks for the
// session's whole state (KindCheckpoint) and gets it back
// (KindCheckpointResult); a worker started with Init.Restore resumes a
// session from such a state instead of a fresh interpreter.
const (
	KindCheckpoint       = "checkpoint"        // server → worker, between runs
	KindCheckpointResult = "checkpoint_result" // worker → server
)

// Checkpoint is a session's state, or why there is none.
type Checkpoint struct {
	// State is opaque to the server (sandbox/worker's format); it is
	// sealed before it leaves the server's memory.
	State []byte `json:"state,omitempty"`
	// Refused says why the session cannot be checkpointed now (e.g. it
	// holds open files); the session goes on unharmed.
	Refused string `json:"refused,omitempty"`
	// TooLarge marks a refusal of a state above its bound
	// (Init.CheckpointBytes, or MaxCheckpointBytes).
	TooLarge bool `json:"too_large,omitempty"`
}

// MaxCheckpointBytes is the largest Checkpoint.State one frame carries
// (base64 in JSON, 4 bytes for every 3, and the message around it): a
// worker refuses a larger state (TooLarge) rather than fail to send it.
const MaxCheckpointBytes = (MaxFrame - 4<<10) / 4 * 3

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
	// SnapshotDir, when set, is the snapshot (TakeSnapshot's output) that
	// sessions start from instead of python.wasm's cold start.
	SnapshotDir string `json:"snapshot_dir,omitempty"`
	// Interruptible makes the guest's code check, at every call and loop
	// header, whether it is to stop, so that a session can be ended in
	// the process and the next one started (sessions_per_worker > 1). The
	// checks cost about half of the guest's speed, so a worker that serves
	// one session — killed, never interrupted — runs without them.
	Interruptible bool `json:"interruptible,omitempty"`
	// CheckpointBytes bounds the states the worker returns for
	// KindCheckpoint (the server's checkpoints.max_bytes; 0 or more than
	// MaxCheckpointBytes: MaxCheckpointBytes). The worker stops writing
	// one as soon as it passes the bound, and refuses it (TooLarge).
	CheckpointBytes int64 `json:"checkpoint_bytes,omitempty"`
	// Restore, when set, is a Checkpoint.State the session resumes from
	// (its memory, globals and /tmp) instead of a fresh interpreter; the
	// worker refuses one that does not match its snapshot.
	Restore []byte `json:"restore,omitempty"`
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

// FileRequest is one file operation. Path is absolute, clean and under
// /tmp or /mnt/data (the server checked it); symbolic links are never
// followed.
type FileRequest struct {
	ID   uint64 `json:"id"`
	Path string `json:"path"`
	Data []byte `json:"data,omitempty"` // put; base64 in JSON
	// Paths (remove) are what to remove, each like Path and not a root
	// itself; Path is empty then. The server sends at most
	// MaxListPathTotal bytes of them in one request.
	Paths []string `json:"paths,omitempty"`
	// Max bounds the answer: get, the file's bytes; list, the files.
	Max int64 `json:"max,omitempty"`
	// MaxPath (list) is the longest path listed: longer ones, and names
	// that are not UTF-8 (JSON cannot carry them), are left out.
	MaxPath int `json:"max_path,omitempty"`
	// MaxPathTotal (list) bounds the listed paths' bytes together, so the
	// answer stays well inside a frame (JSON escapes a byte in six at
	// worst). A listing that reaches Max files or this bound stops there
	// and is answered with FileResult.Truncated, never an error.
	MaxPathTotal int `json:"max_path_total,omitempty"`
}

// MaxListPathTotal is FileRequest.MaxPathTotal for a listing: 6 × 4 MiB of
// escaped paths plus the other fields of MaxListFiles entries fit in
// MaxFrame.
const MaxListPathTotal = 4 << 20

// FileResult answers a FileRequest. Error is empty on success, else one of
// the FileErr codes, with a short Detail (at most MaxDetail bytes).
type FileResult struct {
	ID     uint64      `json:"id"`
	Error  string      `json:"error,omitempty"`
	Detail string      `json:"detail,omitempty"`
	Size   int64       `json:"size,omitempty"`  // get: the file's size (also with FileErrTooLarge)
	Files  []FileEntry `json:"files,omitempty"` // list
	// Truncated (list) says Files is some of the files only: there were
	// more than Max, or their paths had more than MaxPathTotal bytes.
	Truncated bool `json:"truncated,omitempty"`
	// Data (get) is last so that Write can stream it; base64 in JSON.
	Data []byte `json:"data,omitempty"`
}

// MaxDetail bounds a Result's or a FileResult's Detail: it ends up in error
// messages, and an interpreter the guest controls must not fill them.
const MaxDetail = 256

// FileEntry is one listed regular file.
type FileEntry struct {
	Path         string `json:"path"`
	Size         int64  `json:"size"`
	ModTimeNanos int64  `json:"mtime_ns"`
}

// FileResult.Error codes. They are answers: the interpreter stays usable.
const (
	FileErrNoSpace    = "no_space"    // the scratch space is full; nothing was left behind
	FileErrNotExist   = "not_exist"   // no such file or directory
	FileErrNotRegular = "not_regular" // get: a directory, a symbolic link, a FIFO, …
	FileErrTooLarge   = "too_large"   // get: above Max; any: out of descriptors
	FileErrInvalid    = "invalid"     // a name too long; list: not a directory (a file, a link)
	FileErrIO         = "io"          // any other failure, in Detail
)

// Write sends one frame.
func Write(w io.Writer, m *Msg) error {
	if m.FileResult != nil && len(m.FileResult.Data) > streamData {
		return writeFileData(w, m)
	}
	return WriteFrame(w, m, MaxFrame)
}

// ErrFrameTooLarge is returned for a frame above its bound.
var ErrFrameTooLarge = errors.New("wire: frame too large")

// Read receives one frame. io.EOF means the peer closed cleanly between frames.
func Read(r io.Reader) (*Msg, error) {
	var m Msg
	if err := ReadFrame(r, &m, MaxFrame); err != nil {
		return nil, err
	}
	return &m, nil
}

// WriteFrame sends v, as JSON, in one frame of at most limit bytes: the
// framing of Write for a protocol whose messages are not Msg (the gVisor
// kernel's).
func WriteFrame(w io.Writer, v any, limit int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("wire: encode: %w", err)
	}
	if len(b) > limit {
		return fmt.Errorf("wire: frame of %d bytes exceeds %d", len(b), limit)
	}
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(b)))
	if len(b) <= smallFrame {
		// One write: a run's request and result are a few hundred bytes,
		// and each write is a wake-up of the peer (under gVisor a syscall
		// through the sentry); copying them costs less.
		_, err = w.Write(append(hdr[:], b...))
		return err
	}
	// Two writes rather than a copy: a frame carrying a file is tens of MiB.
	// The caller serialises writers, so nothing interleaves.
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// smallFrame is the largest frame WriteFrame copies to send in one write.
const smallFrame = 64 << 10

// ReadFrame receives one frame of at most limit bytes and decodes its JSON
// into v. A frame above limit is ErrFrameTooLarge, and nothing of it is
// read: the bound is what keeps a peer from making this side allocate
// without limit. io.EOF means the peer closed cleanly between frames.
func ReadFrame(r io.Reader, v any, limit int) error {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if int64(n) > int64(limit) {
		return fmt.Errorf("wire: frame of %d bytes exceeds %d: %w", n, limit, ErrFrameTooLarge)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return fmt.Errorf("wire: short frame: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("wire: decode: %w", err)
	}
	return nil
}

// streamData is the size of FileResult.Data above which Write streams it.
const streamData = 1 << 20

// writeFileData writes m, whose one large field is FileResult.Data, without
// holding that field's JSON in memory: json.Marshal would hold the file
// about four times over (its base64, the growing buffer, the copy it
// returns), and the worker, which sends these, lives in a tight cgroup. The
// frame is m's JSON without Data, with the base64 streamed in before the
// two braces that close it: FileResult is Msg's last field, Data is
// FileResult's, and an id always precedes it, so the bytes are those
// json.Marshal would have made (a get's answer has no Files).
func writeFileData(w io.Writer, m *Msg) error {
	data := m.FileResult.Data
	shallow, fr := *m, *m.FileResult
	fr.Data = nil
	shallow.FileResult = &fr
	head, err := json.Marshal(&shallow)
	if err != nil {
		return fmt.Errorf("wire: encode: %w", err)
	}
	if !bytes.HasSuffix(head, []byte("}}")) {
		return fmt.Errorf("wire: encode: unexpected shape %.40q", head)
	}
	head = append(head[:len(head)-2], `,"data":"`...)
	const tail = `"}}`
	n := len(head) + base64.StdEncoding.EncodedLen(len(data)) + len(tail)
	if n > MaxFrame {
		return fmt.Errorf("wire: frame of %d bytes exceeds %d", n, MaxFrame)
	}
	bw := bufio.NewWriterSize(w, 256<<10)
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(n))
	_, _ = bw.Write(hdr[:])
	_, _ = bw.Write(head)
	enc := base64.NewEncoder(base64.StdEncoding, bw)
	_, _ = enc.Write(data)
	_ = enc.Close()
	_, _ = bw.WriteString(tail)
	return bw.Flush() // bufio keeps the first write error and returns it here
}
