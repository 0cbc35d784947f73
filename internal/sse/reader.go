package sse

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// Reader reads an upstream's Server-Sent Events one by one, each as soon
// as its terminating blank line has arrived (bufio returns a line as soon as
// it is in the buffer: a live stream is never waited on for more bytes than
// the event needs). It follows the SSE rules the Responses API servers
// rely on: "event:" and "data:" fields (several data lines join with
// "\n"), comments and unknown fields ignored, CR, LF or CRLF line ends, and
// the "data: [DONE]" some servers (vLLM, gateways) send last.
type Reader struct {
	r       *bufio.Reader
	line    []byte // a line longer than the buffer, being assembled
	maxLine int
}

// Event is one event as the upstream sent it.
type Event struct {
	Name string // the event field; "" when absent (the data's type then names it)
	Data []byte
}

// errEventTooLarge ends a stream whose event exceeds the bound: a response
// object is big, but not unboundedly.
var errEventTooLarge = errors.New("upstream event too large")

// maxEventBytes bounds one upstream event (the terminal event carries the
// whole response, so it is the largest).
const maxEventBytes = 64 << 20

// NewReader reads the event stream r; one event is at most maxEventBytes.
func NewReader(r io.Reader) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 64<<10), maxLine: maxEventBytes}
}

// Next returns the next event with data. At the end of the stream it
// returns io.EOF (a partial event without its blank line is dropped, as
// the SSE rules say); "[DONE]" also ends it.
func (s *Reader) Next() (Event, error) {
	var ev Event
	var data []byte
	hasData := false
	for {
		line, err := s.readLine()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return Event{}, io.EOF
			}
			return Event{}, err
		}
		if len(line) == 0 { // dispatch
			if !hasData {
				ev.Name = ""
				continue
			}
			if bytes.Equal(data, []byte("[DONE]")) {
				return Event{}, io.EOF
			}
			ev.Data = data
			return ev, nil
		}
		if line[0] == ':' {
			continue
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(field) {
		case "event":
			ev.Name = string(value)
		case "data":
			if hasData {
				data = append(data, '\n')
			}
			if len(data)+len(value) > s.maxLine {
				return Event{}, errEventTooLarge
			}
			data = append(data, value...)
			hasData = true
		}
	}
}

// readLine returns one line without its end (CR, LF or CRLF). The slice is
// valid until the next call.
func (s *Reader) readLine() ([]byte, error) {
	s.line = s.line[:0]
	for {
		chunk, err := s.r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if len(s.line)+len(chunk) > s.maxLine {
				return nil, errEventTooLarge
			}
			s.line = append(s.line, chunk...)
			continue
		}
		if err != nil {
			if len(chunk) > 0 || len(s.line) > 0 {
				// a last line without its end: the event is incomplete
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		line := chunk
		if len(s.line) > 0 {
			s.line = append(s.line, chunk...)
			line = s.line
		}
		line = line[:len(line)-1]
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		// A lone CR also ends a line; Responses servers send LF, so split
		// the rare CR-only stream here rather than slow down the common one.
		if i := bytes.IndexByte(line, '\r'); i >= 0 {
			return s.splitCR(line, i)
		}
		return line, nil
	}
}

// splitCR handles a line holding bare CRs: it returns the first part and
// pushes the rest back as lines of their own.
func (s *Reader) splitCR(line []byte, i int) ([]byte, error) {
	rest := append([]byte(nil), line[i+1:]...)
	rest = append(rest, '\n')
	first := append([]byte(nil), line[:i]...)
	s.r = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(rest), s.r), 64<<10)
	return first, nil
}
