package worker

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestWrittenPages: of a private mapping of an image, the pages read are
// not "written", the ones written are; fresh anonymous memory likewise.
// A checkpoint that skipped a written page would restore stale memory.
func TestWrittenPages(t *testing.T) {
	img := filepath.Join(t.TempDir(), "image")
	if err := os.WriteFile(img, make([]byte, 3*wasmPageSize), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, 3*wasmPageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	pm, err := os.Open("/proc/self/pagemap")
	if err != nil {
		t.Fatalf("/proc/self/pagemap: %v (checkpoints would compare every page)", err)
	}
	defer pm.Close()
	var sum byte
	for _, b := range mem {
		sum += b // every page read: present, still the file's
	}
	mem[wasmPageSize+4096+7] = 1 // one OS page of wasm page 1 written
	written, known := writtenPages(pm, mem, 3)
	if !known || len(written) != 3 || written[0] != 0 || written[1] != 1<<1 || written[2] != 0 {
		t.Fatalf("image mapping: written %v known %v (sum %d), want [0 2 0] (page 1's second OS page)", written, known, sum)
	}
	anon, err := unix.Mmap(-1, 0, 2*wasmPageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(anon)
	anon[wasmPageSize] = 1
	anon[2*wasmPageSize-1] = 1
	if written, known := writtenPages(pm, anon, 2); !known || len(written) != 2 || written[0] != 0 || written[1] != 1|1<<15 {
		t.Fatalf("anonymous memory: written %v known %v, want [0 0x8001] (page 1's first and last OS pages)", written, known)
	}
}
