package limitbuf

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/klauspost/compress/zstd"
)

func TestBuffer(t *testing.T) {
	b := New(10)
	if n, err := b.Write([]byte("0123456")); n != 7 || err != nil {
		t.Fatalf("Write within the bound: %d, %v", n, err)
	}
	if n, err := b.Write([]byte("7890")); n != 0 || !errors.Is(err, ErrFull) {
		t.Fatalf("Write past the bound: %d, %v; want 0, ErrFull", n, err)
	}
	if n, err := b.Write([]byte("789")); n != 3 || err != nil {
		t.Fatalf("Write up to the bound: %d, %v", n, err)
	}
	if got := string(b.Bytes()); got != "0123456789" || cap(b.Bytes()) > 10 {
		t.Fatalf("Bytes %q (capacity %d), want 0123456789 within 10", got, cap(b.Bytes()))
	}
	if _, err := b.Write([]byte("x")); !errors.Is(err, ErrFull) {
		t.Fatalf("Write to a full buffer: %v", err)
	}
	u := New(0)
	big := bytes.Repeat([]byte("a"), 1<<20)
	for range 3 {
		if _, err := u.Write(big); err != nil {
			t.Fatal(err)
		}
	}
	if u.Len() != 3<<20 {
		t.Fatalf("an unbounded buffer holds %d bytes", u.Len())
	}
}

// TestCompressorStops: a compressor writing into a Buffer fails soon
// after the compressed bytes pass the bound, however much more is fed,
// and the buffer's capacity stays within the bound.
func TestCompressorStops(t *testing.T) {
	const limit = 256 << 10
	b := New(limit)
	zw, err := zstd.NewWriter(b, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	// Incompressible input: 64 MiB of it would compress to 64 MiB.
	src := io.LimitReader(rand{}, 64<<20)
	n, err := io.Copy(zw, src)
	if err == nil {
		err = zw.Close()
	}
	if !errors.Is(err, ErrFull) {
		t.Fatalf("compressing %d bytes into a %d-byte buffer: %v, want ErrFull", n, limit, err)
	}
	if n > 16<<20 {
		t.Fatalf("the compressor took %d bytes before failing: it should stop soon after the bound", n)
	}
	if cap(b.Bytes()) > limit {
		t.Fatalf("the buffer grew to %d bytes, above its bound %d", cap(b.Bytes()), limit)
	}
}

// rand is an endless xorshift stream (incompressible enough).
type rand struct{}

var state uint64 = 88172645463325252

func (rand) Read(p []byte) (int, error) {
	for i := range p {
		state ^= state << 13
		state ^= state >> 7
		state ^= state << 17
		p[i] = byte(state)
	}
	return len(p), nil
}
