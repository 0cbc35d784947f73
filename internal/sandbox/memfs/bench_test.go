package memfs

import (
	"io"
	"strconv"
	"testing"
)

// BenchmarkSequentialWrite4K appends 4 KiB chunks, starting over at 64 MiB
// so memory stays bounded whatever b.N is.
func BenchmarkSequentialWrite4K(b *testing.B) {
	const chunk, restart = 4 << 10, 64 << 20
	fsys := New(1 << 30)
	f, errno := fsys.OpenFile("f", rdwr|creat, 0o644)
	if errno != 0 {
		b.Fatal(errno)
	}
	defer f.Close()
	buf := make([]byte, chunk)
	b.SetBytes(chunk)
	written := 0
	for b.Loop() {
		if written == restart {
			if errno := f.Truncate(0); errno != 0 {
				b.Fatal(errno)
			}
			if _, errno := f.Seek(0, io.SeekStart); errno != 0 {
				b.Fatal(errno)
			}
			written = 0
		}
		if n, errno := f.Write(buf); n != chunk || errno != 0 {
			b.Fatalf("write = %d, %v", n, errno)
		}
		written += chunk
	}
}

// BenchmarkSequentialRead4K reads a 64 MiB file in 4 KiB chunks, wrapping
// around at the end.
func BenchmarkSequentialRead4K(b *testing.B) {
	const chunk, size = 4 << 10, 64 << 20
	fsys := New(1 << 30)
	f, errno := fsys.OpenFile("f", rdwr|creat, 0o644)
	if errno != 0 {
		b.Fatal(errno)
	}
	defer f.Close()
	buf := make([]byte, chunk)
	for range size / chunk {
		if _, errno := f.Write(buf); errno != 0 {
			b.Fatal(errno)
		}
	}
	b.SetBytes(chunk)
	var off int64
	for b.Loop() {
		if n, errno := f.Pread(buf, off); n != chunk || errno != 0 {
			b.Fatalf("pread = %d, %v", n, errno)
		}
		off = (off + chunk) % size
	}
}

// BenchmarkCreateUnlink measures the metadata path: create, write a line,
// close, unlink.
func BenchmarkCreateUnlink(b *testing.B) {
	fsys := New(1 << 20)
	line := []byte("a short line of text\n")
	i := 0
	for b.Loop() {
		name := "f" + strconv.Itoa(i%64)
		f, errno := fsys.OpenFile(name, wronly|creat|trunc, 0o644)
		if errno != 0 {
			b.Fatal(errno)
		}
		if _, errno := f.Write(line); errno != 0 {
			b.Fatal(errno)
		}
		f.Close()
		if errno := fsys.Unlink(name); errno != 0 {
			b.Fatal(errno)
		}
		i++
	}
}
