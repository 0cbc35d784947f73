package worker

import (
	"fmt"
	"os"

	"github.com/tetratelabs/wazero/experimental"
	"golang.org/x/sys/unix"
)

// mmapAllocator reserves the guest's maximum memory once, untouched
// (MAP_NORESERVE), so growing the wasm memory only reslices: no copy of the
// old memory, no garbage on the Go heap, and the pages return to the OS when
// the memory is freed. wazero's default copies on every growth, which made a
// 256 MiB guest peak above 1 GiB of RSS (design/python-wasi/NOTES.md).
type mmapAllocator struct{}

func (mmapAllocator) Allocate(capacity, maximum uint64) experimental.LinearMemory {
	b, err := unix.Mmap(-1, 0, int(maximum), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANON|unix.MAP_NORESERVE)
	if err != nil {
		return nil
	}
	return &mmapMemory{buf: b}
}

type mmapMemory struct{ buf []byte }

func (m *mmapMemory) Reallocate(size uint64) []byte {
	if size > uint64(len(m.buf)) {
		return nil
	}
	return m.buf[:size]
}

func (m *mmapMemory) Free() {
	if m.buf != nil {
		_ = unix.Munmap(m.buf)
		m.buf = nil
	}
}

// mapModule maps a wasm binary read-only instead of reading it onto the
// heap: compiled under a trusted cache, the module's function bodies are
// slices of it, so it must stay mapped while the module is in use (for a
// worker, its whole life); unmap it with unix.Munmap after closing the
// runtime. The file's pages are the page cache's, shared by every worker.
func mapModule(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() == 0 {
		return nil, fmt.Errorf("%s is empty", path)
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", path, err)
	}
	return b, nil
}
