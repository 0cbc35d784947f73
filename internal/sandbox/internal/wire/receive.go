package wire

import "io"

// Receiver reads a peer's frames in the background, so that a caller can
// wait for the next one together with the peer's exit, a deadline or a
// cancellation.
type Receiver[T any] struct {
	c   chan *T
	err error // set before c is closed
}

// Receive starts reading frames of at most limit bytes from r, each decoded
// into a new T, keeping up to buffer of them read ahead of the caller. It
// reads until a read fails (the peer closed its end, broke the framing or
// r was closed); then C is closed and Err says why.
func Receive[T any](r io.Reader, limit, buffer int) *Receiver[T] {
	rc := &Receiver[T]{c: make(chan *T, buffer)}
	go func() {
		defer close(rc.c)
		for {
			v := new(T)
			if err := ReadFrame(r, v, limit); err != nil {
				rc.err = err
				return
			}
			rc.c <- v
		}
	}()
	return rc
}

// C delivers the frames in order; it is closed once reading has stopped.
func (rc *Receiver[T]) C() <-chan *T { return rc.c }

// Err is why reading stopped (io.EOF: the peer closed its end between
// frames). It is valid once C is closed.
func (rc *Receiver[T]) Err() error { return rc.err }
