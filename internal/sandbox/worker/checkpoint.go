package worker

import (
	"bytes"
	"crypto/subtle"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"time"
	"unsafe"

	"github.com/klauspost/compress/zstd"
	"github.com/tetratelabs/wazero/api"

	"github.com/codeinterp/codeinterp/internal/sandbox/internal/limitbuf"
	"github.com/codeinterp/codeinterp/internal/sandbox/internal/wire"
)

// Session checkpoints (issue 28). Between runs the kernel loop returns to
// the host (bootstrap.py, "yield"), so no call is active and the linear
// memory and globals are the whole of the interpreter's state, as when the
// snapshot was taken. A checkpoint is then the pages that differ from the
// snapshot's image, the exported mutable globals, and the files under
// /tmp; /mnt/data is the store's and is put back by the server. A
// restored session is the snapshot's instance with those pages, globals
// and files written back, entering the kernel loop again (resumeEntry)
// without post_restore.py: the session keeps its own seeds and state.
//
// The state is opaque to the server and sealed by it (package checkpoint)
// before it leaves memory; the worker still checks everything it decodes,
// and refuses a state made from another snapshot.

// The kernel's answers to a yield (bootstrap.py).
const (
	statusYielded   = "yielded"
	statusOpenFiles = "openfiles"
)

// resumeEntry enters the kernel loop of a restored session's state, or
// again after a checkpoint: no warm-up, no reseeding.
const resumeEntry = "_codeinterp_loop(False)\n"

// stateFormat versions the encoding below; the worker's fingerprint
// (the checkpoints' origin) includes it, so a server of another format
// keeps a state it cannot read (checkpoint.ErrForeign) rather than
// dropping it. Format 2 carried whole 64 KiB pages; this one only their
// 4 KiB parts that differ (Masks).
const stateFormat = 3

// maxStateBytes bounds a decoded state (the whole linear memory, 4 GiB,
// plus /tmp's bound): zstd is told so, so a small blob cannot expand
// without limit.
const maxStateBytes = 4<<30 + 1<<30

// osPage is the part of a wasm page a state carries or leaves out: the
// OS's page, the unit /proc/self/pagemap reports writes in.
const (
	osPage      = 4096
	partsInPage = wasmPageSize / osPage
)

// sessionState is a checkpoint's header. The encoding is zstd of: the
// header's JSON length (uint32, big endian), the JSON, then for each page
// listed in Pages, in order, the 4 KiB parts its mask in Masks lists
// (bit j: bytes j*4096 to (j+1)*4096 of the page), each XORed with the
// snapshot's (or zero past the snapshot's memory).
//
// Why parts: a cell as small as print(25) writes ~80 wasm pages (5 MB:
// the allocator's and the interpreter's counters, spread out) but only
// ~150 OS pages of them differ afterwards; sending whole pages made zstd
// pass 4 MB of zeros, more than half of a checkpoint's CPU
// (docs/benchmark-notes.md, issue 41).
type sessionState struct {
	Format int `json:"format"`
	// Snapshot names the snapshot the pages are a delta against (its
	// module's hash and creation time): restored only over the same one.
	Snapshot       string            `json:"snapshot"`
	MemoryPages    uint32            `json:"memory_pages"`
	Globals        map[string]uint64 `json:"globals"`
	MonotonicNanos int64             `json:"monotonic_ns"`
	Pages          []uint32          `json:"pages"` // indexes of the pages that differ
	Masks          []uint16          `json:"masks"` // the parts of each that differ (never 0)
	Dirs           []stateFile       `json:"dirs"`  // under /tmp, parents first
	Files          []stateFile       `json:"files"` // under /tmp

	// pages is the decoder positioned at the pages (decodeState), read
	// by apply straight into the new instance's memory.
	pages *zstd.Decoder
}

type stateFile struct {
	Path string      `json:"path"` // relative to /tmp
	Mode fs.FileMode `json:"mode"`
	Data []byte      `json:"data,omitempty"`
}

func snapshotID(m *SnapshotMeta) string {
	return m.Module + "@" + m.Created.UTC().Format(time.RFC3339Nano)
}

// checkpoint takes the current session's state between runs.
func (w *worker) checkpoint() *wire.Checkpoint {
	if w.snap == nil || w.mod == nil {
		return &wire.Checkpoint{Refused: "the worker starts interpreters cold (sandbox.snapshot: false): nothing to restore over"}
	}
	w.yielding.Store(true)
	defer w.yielding.Store(false)
	status, err := w.yieldGuest()
	if err != nil {
		return &wire.Checkpoint{Refused: err.Error()}
	}
	if status == statusOpenFiles {
		return &wire.Checkpoint{Refused: "the session holds open files (a restored session could not have them)"}
	}
	select {
	case <-w.yielded:
	case err := <-w.exited:
		w.exited <- err // the run path reports the end
		return &wire.Checkpoint{Refused: "the interpreter ended"}
	}
	limit := w.init.CheckpointBytes
	if limit <= 0 || limit > wire.MaxCheckpointBytes {
		limit = wire.MaxCheckpointBytes
	}
	st, err := w.capture(limit)
	w.resume <- struct{}{}
	if errors.Is(err, limitbuf.ErrFull) {
		return &wire.Checkpoint{TooLarge: true,
			Refused: fmt.Sprintf("the session's state passed %d bytes while it was written (checkpoints.max_bytes, or what one message carries)", limit)}
	}
	if err != nil {
		return &wire.Checkpoint{Refused: err.Error()}
	}
	return &wire.Checkpoint{State: st}
}

// checkpointGarbage is about how many bytes of the Go heap a checkpoint
// left as garbage beyond the encoder's fixed buffers: the state and its
// copy in the answer, and the pagemap entries (8 bytes per OS page of the
// linear memory).
func (w *worker) checkpointGarbage(cp *wire.Checkpoint) int {
	n := 2 * len(cp.State)
	if w.mod != nil {
		n += int(w.mod.Memory().Size()/osPage) * 8
	}
	return n
}

// yieldGuest asks the kernel loop to return to the host and waits for
// its answer.
func (w *worker) yieldGuest() (string, error) {
	nonce := newNonce()
	done := w.stderr.expect(nonce)
	go func() { _, _ = w.stdinW.Write([]byte(nonce + " 0 yield\n")) }()
	timer := time.NewTimer(warmUpTimeout)
	defer timer.Stop()
	select {
	case status := <-done:
		if status != statusYielded && status != statusOpenFiles {
			return "", fmt.Errorf("the kernel answered a checkpoint with %q", status)
		}
		return status, nil
	case err := <-w.exited:
		w.exited <- err
		return "", errors.New("the interpreter ended")
	case <-timer.C:
		return "", errors.New("the kernel did not answer a checkpoint")
	}
}

// capture encodes the quiescent session, in at most limit bytes: it
// stops with limitbuf.ErrFull as soon as the state passes them.
func (w *worker) capture(limit int64) ([]byte, error) {
	mem := w.mod.Memory()
	st := &sessionState{
		Format: stateFormat, Snapshot: snapshotID(w.snap.meta),
		MemoryPages: mem.Size() / wasmPageSize, Globals: map[string]uint64{},
		MonotonicNanos: hostMonotonic(),
	}
	for name := range w.snap.meta.Globals {
		g := w.mod.ExportedGlobal(name)
		if g == nil {
			return nil, fmt.Errorf("global %q is not exported", name)
		}
		st.Globals[name] = g.Get()
	}
	cur, ok := mem.Read(0, mem.Size())
	if !ok {
		return nil, errors.New("read linear memory")
	}
	// First pass: which parts of which pages differ. The parts go
	// straight from the memory into the compressor below: a copy of tens
	// of MB would be allocated in the cgroup the guest's memory already
	// fills. The snapshot's pages are read from its mapping (no copy).
	zero := make([]byte, wasmPageSize)
	basePages := uint32(w.snap.size / wasmPageSize)
	written, known := writtenPages(w.snap.pagemap, cur, st.MemoryPages)
	var buf []byte
	for i := range st.MemoryPages {
		mask := uint16(1<<partsInPage - 1)
		if known {
			if mask = written[i]; mask == 0 {
				continue // still the image's page (or never touched): equal
			}
		}
		page := cur[int64(i)*wasmPageSize : int64(i+1)*wasmPageSize]
		ref := zero
		if i < basePages {
			var err error
			if ref, buf, err = w.snap.imagePage(i, buf); err != nil {
				return nil, fmt.Errorf("read the snapshot image: %w", err)
			}
		}
		var differ uint16
		for j := range partsInPage {
			if mask&(1<<j) != 0 && !bytes.Equal(page[j*osPage:(j+1)*osPage], ref[j*osPage:(j+1)*osPage]) {
				differ |= 1 << j
			}
		}
		if differ != 0 {
			st.Pages = append(st.Pages, i)
			st.Masks = append(st.Masks, differ)
		}
	}
	err := fs.WalkDir(w.scratch.tmp.IOFS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			st.Dirs = append(st.Dirs, stateFile{Path: p, Mode: info.Mode().Perm()})
		case info.Mode().IsRegular():
			data, err := fs.ReadFile(w.scratch.tmp.IOFS(), p)
			if err != nil {
				return err
			}
			st.Files = append(st.Files, stateFile{Path: p, Mode: info.Mode().Perm(), Data: data})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read /tmp: %w", err)
	}
	header, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	out := limitbuf.New(limit)
	// A 256 KiB window, not 1 MiB: the encoder's history is fresh memory
	// each checkpoint (a worker takes few), and faulting in and copying
	// 1 MiB of it was half of a small state's compression; a large state
	// came out 5 % larger (BenchmarkSessionCheckpoint: 2.63 → 2.76 MiB).
	zw, err := zstd.NewWriter(out, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(256<<10), zstd.WithLowerEncoderMem(true))
	if err != nil {
		return nil, err
	}
	if err := binary.Write(zw, binary.BigEndian, uint32(len(header))); err != nil {
		return nil, err
	}
	if _, err := zw.Write(header); err != nil {
		return nil, err
	}
	// Each part goes as its XOR with the snapshot's (zero beyond it): a
	// part where the code changed a few counters is mostly zeros, which
	// zstd stores in a few bytes.
	delta := make([]byte, osPage)
	for k, i := range st.Pages {
		page := cur[int64(i)*wasmPageSize : int64(i+1)*wasmPageSize]
		ref := zero
		if i < basePages {
			if ref, buf, err = w.snap.imagePage(i, buf); err != nil {
				return nil, fmt.Errorf("read the snapshot image: %w", err)
			}
		}
		for j := range partsInPage {
			if st.Masks[k]&(1<<j) == 0 {
				continue
			}
			subtle.XORBytes(delta, page[j*osPage:(j+1)*osPage], ref[j*osPage:(j+1)*osPage])
			if _, err := zw.Write(delta); err != nil {
				return nil, err
			}
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// writtenPages reports, for each wasm page of mem, which of its OS pages
// the process wrote since they were mapped (bit j: the j-th 4 KiB):
// /proc/self/pagemap shows such a page present and anonymous (the private
// copy of an image page, or fresh memory), or swapped. A page not written
// is the snapshot's (or zero past it) and need not be compared. known is
// false when pagemap cannot be read; then every page is compared.
func writtenPages(pagemap *os.File, mem []byte, pages uint32) (written []uint16, known bool) {
	if pagemap == nil || len(mem) == 0 {
		return nil, false
	}
	if os.Getpagesize() != osPage {
		return nil, false
	}
	entries := make([]byte, int(pages)*partsInPage*8)
	addr := uintptr(unsafe.Pointer(&mem[0]))
	if addr%osPage != 0 {
		return nil, false
	}
	if _, err := pagemap.ReadAt(entries, int64(addr/osPage)*8); err != nil {
		return nil, false
	}
	const (
		present = 1 << 63
		swapped = 1 << 62
		file    = 1 << 61 // file page or shared anonymous
	)
	written = make([]uint16, pages)
	for i := range written {
		for j := range partsInPage {
			e := binary.LittleEndian.Uint64(entries[(i*partsInPage+j)*8:])
			if e&swapped != 0 || e&present != 0 && e&file == 0 {
				written[i] |= 1 << j
			}
		}
	}
	return written, true
}

// stateRefusal marks a restore's failure as the state's own (corrupt,
// cut short, not of this snapshot): the server reports it as a definite
// refusal (wire.Msg.RestoreRefused), and the state may be dropped. Every
// other failure of a restore (memory, this worker's snapshot) is not one.
type stateRefusal struct{ err error }

func (r *stateRefusal) Error() string { return r.err.Error() }
func (r *stateRefusal) Unwrap() error { return r.err }

func refused(err error) error { return &stateRefusal{err: err} }

// decodeState decodes and checks a state against the snapshot this worker
// restores from. Any error is the state's (the caller marks it refused).
func decodeState(b []byte, meta *SnapshotMeta) (*sessionState, error) {
	zr, header, err := openState(b)
	if err != nil {
		return nil, err
	}
	st := &sessionState{}
	defer func() {
		if st.pages == nil {
			zr.Close()
		}
	}()
	if err := json.Unmarshal(header, st); err != nil {
		return nil, fmt.Errorf("state header: %w", err)
	}
	switch {
	case st.Format != stateFormat:
		return nil, fmt.Errorf("state format %d, this worker reads %d", st.Format, stateFormat)
	case len(st.Masks) != len(st.Pages):
		return nil, fmt.Errorf("state with %d pages and %d masks", len(st.Pages), len(st.Masks))
	case st.Snapshot != snapshotID(meta):
		return nil, fmt.Errorf("the state was taken over snapshot %s, this worker restores %s", st.Snapshot, snapshotID(meta))
	case st.MemoryPages < meta.Pages || st.MemoryPages > 65536:
		return nil, fmt.Errorf("state of %d memory pages (the snapshot has %d)", st.MemoryPages, meta.Pages)
	case len(st.Globals) != len(meta.Globals):
		return nil, fmt.Errorf("state with %d globals, the snapshot %d", len(st.Globals), len(meta.Globals))
	}
	for name := range st.Globals {
		if _, ok := meta.Globals[name]; !ok {
			return nil, fmt.Errorf("state sets global %q, which the snapshot does not have", name)
		}
	}
	last := int64(-1)
	for k, p := range st.Pages {
		if int64(p) <= last || p >= st.MemoryPages || st.Masks[k] == 0 {
			return nil, errors.New("state pages out of order, outside its memory or empty")
		}
		last = int64(p)
	}
	for _, f := range append(append([]stateFile(nil), st.Dirs...), st.Files...) {
		if !fs.ValidPath(f.Path) || f.Path == "." || path.Clean(f.Path) != f.Path {
			return nil, fmt.Errorf("state file path %q", f.Path)
		}
	}
	st.pages = zr
	return st, nil
}

// openState starts decoding a state: the decompressor, positioned after
// the header, and the header's JSON.
func openState(b []byte) (*zstd.Decoder, []byte, error) {
	zr, err := zstd.NewReader(bytes.NewReader(b), zstd.WithDecoderMaxMemory(maxStateBytes), zstd.WithDecoderConcurrency(1))
	if err != nil {
		return nil, nil, err
	}
	var n uint32
	if err := binary.Read(zr, binary.BigEndian, &n); err != nil {
		zr.Close()
		return nil, nil, fmt.Errorf("state header: %w", err)
	}
	if n > 64<<20 {
		zr.Close()
		return nil, nil, fmt.Errorf("state header of %d bytes", n)
	}
	header := make([]byte, n)
	if _, err := io.ReadFull(zr, header); err != nil {
		zr.Close()
		return nil, nil, fmt.Errorf("state header: %w", err)
	}
	return zr, header, nil
}

// apply writes the state into a freshly restored instance and its
// scratch space. An error of the state's own content (its pages cut
// short, changed, or outside its memory) is marked refused; one of this
// session's room for it (memory to grow into under the session's limit,
// /tmp's bound) or of the snapshot's module is not: it may restore in a
// session with other limits, or another worker.
func (st *sessionState) apply(mod api.Module, sc *scratch) error {
	mem := mod.Memory()
	if cur := mem.Size() / wasmPageSize; cur < st.MemoryPages {
		if _, ok := mem.Grow(st.MemoryPages - cur); !ok {
			return fmt.Errorf("grow memory to %d pages", st.MemoryPages)
		}
	} else if cur > st.MemoryPages {
		return refused(fmt.Errorf("memory of %d pages exceeds the state's %d", cur, st.MemoryPages))
	}
	defer st.pages.Close()
	delta := make([]byte, osPage)
	for k, p := range st.Pages {
		view, ok := mem.Read(p*wasmPageSize, wasmPageSize)
		if !ok {
			return refused(fmt.Errorf("page %d outside memory", p))
		}
		// The fresh instance holds the snapshot's page (zero beyond
		// it): each part's XOR with it gives the session's part back.
		for j := range partsInPage {
			if st.Masks[k]&(1<<j) == 0 {
				continue
			}
			if _, err := io.ReadFull(st.pages, delta); err != nil {
				return refused(fmt.Errorf("state pages: %w", err))
			}
			part := view[j*osPage : (j+1)*osPage]
			subtle.XORBytes(part, part, delta)
		}
	}
	// The end of the frame is where zstd checks its checksum: a state
	// cut short or changed fails here, and the instance is thrown away.
	if n, err := st.pages.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		return refused(fmt.Errorf("state pages: %d bytes after them (%v)", n, err))
	}
	for name, v := range st.Globals {
		g, ok := mod.ExportedGlobal(name).(api.MutableGlobal)
		if !ok {
			return fmt.Errorf("global %q is not an exported mutable global", name)
		}
		g.Set(v)
	}
	for _, d := range st.Dirs {
		if err := sc.tmp.MkdirAll(d.Path, d.Mode|0o700); err != nil {
			return fmt.Errorf("/tmp/%s: %w", d.Path, err)
		}
	}
	for _, f := range st.Files {
		if err := sc.tmp.WriteFile(f.Path, f.Data, f.Mode); err != nil {
			return fmt.Errorf("/tmp/%s: %w", f.Path, err)
		}
	}
	return nil
}

// SnapshotID names the snapshot in dir as a session state names its base
// (StateSnapshot): states restore only over the same one.
func SnapshotID(meta *SnapshotMeta) string { return snapshotID(meta) }

// StateSnapshot returns the snapshot a session state was taken over, from
// its header alone; the server uses it to start the state's worker on
// that snapshot. The worker checks the whole state again.
func StateSnapshot(state []byte) (string, error) {
	zr, header, err := openState(state)
	if err != nil {
		return "", err
	}
	zr.Close()
	var st struct {
		Format   int    `json:"format"`
		Snapshot string `json:"snapshot"`
	}
	if err := json.Unmarshal(header, &st); err != nil || st.Format != stateFormat || st.Snapshot == "" {
		return "", fmt.Errorf("state header: format %d, snapshot %q (%v)", st.Format, st.Snapshot, err)
	}
	return st.Snapshot, nil
}
