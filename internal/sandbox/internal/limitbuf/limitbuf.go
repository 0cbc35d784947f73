// Package limitbuf is a byte buffer with a hard bound: a checkpoint is
// written into one as it is made (compressed), and making it stops as
// soon as it passes the bound, so that a state far above the bound never
// sits whole in the server's (or worker's) memory first.
package limitbuf

import (
	"errors"
	"fmt"
)

// ErrFull is matched by the error of a Write that would take a Buffer
// past its bound.
var ErrFull = errors.New("limitbuf: bound reached")

// Buffer collects writes up to Max bytes. Its capacity never grows past
// Max either: it holds at most Max bytes, plus while it grows the smaller
// array it copies from.
type Buffer struct {
	max int64 // <= 0: no bound
	b   []byte
}

// New returns a Buffer bounded by max bytes; max <= 0 means no bound.
func New(max int64) *Buffer { return &Buffer{max: max} }

// Write appends p, or fails with ErrFull and appends nothing when p would
// take the buffer past its bound.
func (b *Buffer) Write(p []byte) (int, error) {
	need := int64(len(b.b)) + int64(len(p))
	if b.max > 0 && need > b.max {
		return 0, fmt.Errorf("%w: %d bytes would pass %d", ErrFull, need, b.max)
	}
	if need > int64(cap(b.b)) {
		c := max(2*int64(cap(b.b)), need, 64<<10)
		if b.max > 0 {
			c = min(c, b.max)
		}
		nb := make([]byte, len(b.b), c)
		copy(nb, b.b)
		b.b = nb
	}
	b.b = append(b.b, p...)
	return len(p), nil
}

// WriteString is Write of a string.
func (b *Buffer) WriteString(s string) (int, error) { return b.Write([]byte(s)) }

// Bytes returns what was written (the buffer's own array).
func (b *Buffer) Bytes() []byte { return b.b }

// Len is the number of bytes written.
func (b *Buffer) Len() int { return len(b.b) }

// Max is the bound (<= 0: none).
func (b *Buffer) Max() int64 { return b.max }
