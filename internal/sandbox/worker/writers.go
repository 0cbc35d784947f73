package worker

import (
	"bytes"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"io"
	"sync"

	"github.com/codeinterp/codeinterp/internal/sandbox/internal/wire"
)

// readyReader signals the first time the guest asks for input: the
// interpreter has started and is waiting for its first program.
type readyReader struct {
	r     io.Reader
	ready chan struct{}
	once  sync.Once
}

func (r *readyReader) Read(p []byte) (int, error) {
	r.once.Do(func() { close(r.ready) })
	return r.r.Read(p)
}

// boundedWriter keeps at most limit bytes and counts the rest. It never
// fails a write: the guest must not learn where the bound is by errors.
type boundedWriter struct {
	mu      sync.Mutex
	limit   int
	buf     bytes.Buffer
	dropped int64
}

func newBoundedWriter(limit int) *boundedWriter { return &boundedWriter{limit: limit} }

func (b *boundedWriter) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	room := b.limit - b.buf.Len()
	if room >= len(p) {
		b.buf.Write(p)
		return len(p), nil
	}
	if room > 0 {
		b.buf.Write(p[:room])
	}
	b.dropped += int64(len(p) - max(room, 0))
	return len(p), nil
}

func (b *boundedWriter) take() ([]byte, int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := bytes.Clone(b.buf.Bytes())
	d := b.dropped
	b.buf.Reset()
	b.dropped = 0
	return out, d
}

func (b *boundedWriter) bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

func (b *boundedWriter) reset() { b.take() }

// markerWriter is the guest's stderr: bounded output, except the single
// write that ends a run, which it recognises by the run's nonce.
type markerWriter struct {
	out    *boundedWriter
	mu     sync.Mutex
	prefix []byte
	done   chan string
}

func (m *markerWriter) expect(nonce string) <-chan string {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.out.reset()
	m.prefix = []byte("\x00CI:" + nonce + ":")
	m.done = make(chan string, 1)
	return m.done
}

func (m *markerWriter) Write(p []byte) (int, error) {
	m.mu.Lock()
	if m.prefix != nil && len(p) < 64 && bytes.HasPrefix(p, m.prefix) && bytes.HasSuffix(p, []byte("\n")) {
		status := string(p[len(m.prefix) : len(p)-1])
		switch status {
		case wire.StatusOK, wire.StatusError, wire.StatusMemory, statusYielded, statusOpenFiles:
			m.done <- status
			m.prefix = nil
			m.mu.Unlock()
			return len(p), nil
		}
	}
	m.mu.Unlock()
	return m.out.Write(p)
}

// newNonce names one exchange with the kernel (a run, a warm-up cell, a
// yield): its end marker carries it.
func newNonce() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
