package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"golang.org/x/sys/unix"
)

// restorer starts sessions from one snapshot. It holds the compiled
// (data-stripped) module and the image file, opened while the worker was
// still privileged; each session maps the image afresh, copy-on-write.
type restorer struct {
	meta     *SnapshotMeta
	compiled wazero.CompiledModule
	image    *os.File
	// pagemap is /proc/self/pagemap, opened while privileged (nil when it
	// cannot be): which pages of a session's memory were written
	// (writtenPages), so a checkpoint compares only those.
	pagemap *os.File
	size    int64
	bin     []byte // the module, mapped (mapModule)
	// imageMap is the image mapped read-only and shared (nil when it
	// cannot be): a checkpoint compares and XORs a session's pages
	// against it in place. Reading each page with pread instead copied
	// twice the written pages (a third of a small checkpoint's CPU).
	imageMap []byte
}

func openRestorer(ctx context.Context, rt wazero.Runtime, dir string, maxPages uint32) (*restorer, error) {
	meta, err := ReadSnapshotMeta(dir)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	if meta.Pages > maxPages {
		return nil, fmt.Errorf("snapshot of %d pages does not fit a %d-page guest", meta.Pages, maxPages)
	}
	img, err := os.Open(filepath.Join(dir, SnapshotImageFile))
	if err != nil {
		return nil, err
	}
	st, err := img.Stat()
	if err != nil || st.Size() != int64(meta.Pages)*wasmPageSize {
		img.Close()
		return nil, fmt.Errorf("snapshot image is not %d pages (%v)", meta.Pages, err)
	}
	bin, err := mapModule(filepath.Join(dir, SnapshotModuleFile))
	if err != nil {
		img.Close()
		return nil, err
	}
	// Keyed by the hash the snapshot step recorded: not hashed again.
	compiled, err := rt.CompileModule(trustCacheWithSum(ctx, meta.Module), bin)
	if err != nil {
		img.Close()
		_ = unix.Munmap(bin)
		return nil, fmt.Errorf("compile the snapshot module: %w", err)
	}
	pm, _ := os.Open("/proc/self/pagemap") // nil: checkpoints compare every page
	im, err := unix.Mmap(int(img.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		im = nil // imagePage reads the file instead
	}
	return &restorer{meta: meta, compiled: compiled, image: img, size: st.Size(), bin: bin, pagemap: pm, imageMap: im}, nil
}

// imagePage returns the snapshot image's wasm page i: from the mapping,
// or read into buf (allocated when nil) without one. It returns the
// buffer to pass again.
func (r *restorer) imagePage(i uint32, buf []byte) (page, next []byte, err error) {
	off := int64(i) * wasmPageSize
	if r.imageMap != nil {
		return r.imageMap[off : off+wasmPageSize], buf, nil
	}
	if buf == nil {
		buf = make([]byte, wasmPageSize)
	}
	if _, err := r.image.ReadAt(buf, off); err != nil {
		return nil, buf, err
	}
	return buf, buf, nil
}

// close releases the image and the module's mapping; the runtime that
// compiled the module must be closed first.
func (r *restorer) close() {
	_ = r.image.Close()
	if r.pagemap != nil {
		_ = r.pagemap.Close()
	}
	_ = unix.Munmap(r.bin)
	if r.imageMap != nil {
		_ = unix.Munmap(r.imageMap)
	}
}

// restore instantiates a fresh instance of the module over a private
// mapping of the image and sets the globals. mc must be built from
// snapshotModuleConfig with the same mounts as the snapshot step.
func (r *restorer) restore(ctx context.Context, rt wazero.Runtime, mc wazero.ModuleConfig, minClock int64) (api.Module, error) {
	// The guest's monotonic clock continues from the snapshot's (or a
	// session checkpoint's, minClock): on the same boot the host clock
	// already does; an image from an earlier boot or another host (whose
	// clock read more) is offset so the clock never runs backwards.
	offset := int64(0)
	if now, from := hostMonotonic(), max(r.meta.MonotonicNanos, minClock); now <= from {
		offset = from - now + 1
	}
	mc = mc.WithStartFunctions().
		WithNanotime(func() int64 { return hostMonotonic() + offset }, 1)
	actx := experimental.WithMemoryAllocator(ctx, &imageAllocator{fd: int(r.image.Fd()), size: r.size})
	mod, err := rt.InstantiateModule(actx, r.compiled, mc)
	if err != nil {
		return nil, fmt.Errorf("instantiate from the snapshot: %w", err)
	}
	fail := func(err error) (api.Module, error) {
		_ = mod.Close(ctx)
		return nil, err
	}
	mem := mod.Memory()
	if cur := mem.Size() / wasmPageSize; cur < r.meta.Pages {
		// Growing only reslices the mapping: the image's bytes appear.
		if _, ok := mem.Grow(r.meta.Pages - cur); !ok {
			return fail(fmt.Errorf("grow memory to the snapshot's %d pages", r.meta.Pages))
		}
	} else if cur > r.meta.Pages {
		return fail(fmt.Errorf("module memory %d pages exceeds the snapshot's %d", cur, r.meta.Pages))
	}
	for name, v := range r.meta.Globals {
		g, ok := mod.ExportedGlobal(name).(api.MutableGlobal)
		if !ok {
			return fail(fmt.Errorf("global %q is not an exported mutable global", name))
		}
		g.Set(v)
	}
	return mod, nil
}

// imageAllocator backs one instance's linear memory with a private
// (copy-on-write) mapping of the snapshot image inside a reservation of
// the maximum size: the image's pages are shared with the page cache
// until the guest writes them, growth only reslices, and wazero uses the
// bytes without zeroing them (experimental.LinearMemory's contract).
type imageAllocator struct {
	fd   int
	size int64
}

func (a *imageAllocator) Allocate(capacity, maximum uint64) experimental.LinearMemory {
	if uint64(a.size) > maximum {
		return nil
	}
	b, err := unix.Mmap(-1, 0, int(maximum), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANON|unix.MAP_NORESERVE)
	if err != nil {
		return nil
	}
	if a.size > 0 {
		if _, err := unix.MmapPtr(a.fd, 0, unsafe.Pointer(&b[0]), uintptr(a.size),
			unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_FIXED); err != nil {
			_ = unix.Munmap(b)
			return nil
		}
	}
	return &mmapMemory{buf: b}
}

var errNoSnapshot = errors.New("no snapshot configured")
