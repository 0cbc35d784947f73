package gvisor

import (
	"bytes"
	"os"
	"sync"
)

// stream is the host end of the guest's stdout or stderr. One goroutine
// drains the pipe for the sandbox's life, so the guest never blocks on a
// full pipe; while a run is armed it keeps at most limit bytes, counts the
// rest as dropped, and watches for the run's end marker (which may arrive
// split across reads, and after the limit). Bytes outside a run (a thread
// printing between runs, what follows a marker) are discarded.
type stream struct {
	limit int

	mu      sync.Mutex
	marker  []byte // the armed run's end marker; nil when no run is armed
	pending []byte // tail that may be the start of the marker
	buf     []byte
	dropped int64
	done    chan struct{} // closed when the marker is seen

	eof chan struct{} // closed when the pipe has ended
}

func newStream(limit int) *stream {
	return &stream{limit: limit, eof: make(chan struct{})}
}

// endMarker is what the kernel writes, in one write, to fd 1 and fd 2
// after a run has flushed its output.
func endMarker(nonce string) []byte { return []byte("\x00CI-END:" + nonce + "\n") }

// arm starts collecting a run's output; the returned channel is closed
// when its marker is seen.
func (s *stream) arm(marker []byte) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.marker, s.pending, s.buf, s.dropped = marker, nil, nil, 0
	s.done = make(chan struct{})
	return s.done
}

// take ends the run's collection and returns what was kept and how many
// bytes were dropped. A partial marker still pending is output.
func (s *stream) take() ([]byte, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.marker != nil {
		s.commit(s.pending)
	}
	b, d := s.buf, s.dropped
	s.marker, s.pending, s.buf, s.dropped = nil, nil, nil, 0
	return b, d
}

func (s *stream) commit(p []byte) {
	room := s.limit - len(s.buf)
	if room > len(p) {
		room = len(p)
	}
	if room > 0 {
		s.buf = append(s.buf, p[:room]...)
	}
	s.dropped += int64(len(p) - max(room, 0))
}

// feed handles one read from the pipe.
func (s *stream) feed(p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.marker == nil {
		return
	}
	data := p
	if len(s.pending) > 0 {
		data = append(s.pending, p...)
		s.pending = nil
	}
	if i := bytes.Index(data, s.marker); i >= 0 {
		s.commit(data[:i])
		s.marker = nil
		close(s.done)
		return
	}
	// Hold back the longest suffix that is a prefix of the marker.
	keep := 0
	for k := min(len(s.marker)-1, len(data)); k > 0; k-- {
		if bytes.HasPrefix(s.marker, data[len(data)-k:]) {
			keep = k
			break
		}
	}
	s.commit(data[:len(data)-keep])
	s.pending = append([]byte(nil), data[len(data)-keep:]...)
}

// drain reads f until it ends, then closes it.
func (s *stream) drain(f *os.File) {
	defer close(s.eof)
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			s.feed(buf[:n])
		}
		if err != nil {
			return // EOF once every writer (runsc, gofer, sentry) is gone
		}
	}
}
