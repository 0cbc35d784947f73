package egress

import (
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"time"
)

var (
	errByteBudget     = errors.New("egress: the session's byte budget is spent")
	errHeaderTooLarge = errors.New("egress: header block too large")
)

// activity is the last time a byte moved on any connection of one flow
// (the sandbox's connection and the origin's): a tunnel that downloads is
// busy even though its upload side is silent, so idleness is judged on the
// flow, not per direction.
type activity struct{ last atomic.Int64 }

func newActivity() *activity {
	a := &activity{}
	a.touch()
	return a
}
func (a *activity) touch()              { a.last.Store(time.Now().UnixNano()) }
func (a *activity) lastTime() time.Time { return time.Unix(0, a.last.Load()) }

// meteredConn bounds every read and write by the flow's idle timeout, or
// by a fixed deadline while a header block or ClientHello is being read
// (so a client or origin that trickles one byte at a time still ends), and
// on the sandbox's side counts bytes against the session's budget.
type meteredConn struct {
	net.Conn
	s      *Session
	act    *activity
	client bool // the sandbox's side: counted
	// fixedRead, when set, replaces the idle deadline for reads. Only the
	// goroutine that reads the connection touches it.
	fixedRead time.Time
	// exempt: writes are not charged (refusals). Only the handler's
	// goroutine touches it.
	exempt bool
}

// enforce says whether overrunning the byte budget cuts this read or
// write: not while a header block is read (the request is refused with
// 429 instead, before anything leaves) nor for the proxy's own refusals.
func (c *meteredConn) enforce(reading bool) bool {
	return c.client && !c.exempt && !(reading && !c.fixedRead.IsZero())
}

func (c *meteredConn) Read(p []byte) (int, error) {
	idle := c.s.cfg.IdleTimeout
	for {
		d := c.fixedRead
		if d.IsZero() {
			d = c.act.lastTime().Add(idle)
		}
		if err := c.Conn.SetReadDeadline(d); err != nil {
			return 0, err
		}
		n, err := c.Conn.Read(p)
		if n > 0 {
			c.act.touch()
			if c.client {
				if !c.s.spend(n) && c.enforce(true) {
					c.s.cut(c)
					return 0, errByteBudget
				}
				c.s.m.bytesUp.Add(float64(n))
			}
		}
		if n == 0 && c.fixedRead.IsZero() && errors.Is(err, os.ErrDeadlineExceeded) && time.Since(c.act.lastTime()) < idle {
			continue // the other direction moved meanwhile: not idle
		}
		return n, err
	}
}

func (c *meteredConn) Write(p []byte) (int, error) {
	if c.client && !c.s.spend(len(p)) && c.enforce(false) {
		c.s.cut(c)
		return 0, errByteBudget
	}
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.s.cfg.IdleTimeout)); err != nil {
		return 0, err
	}
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.act.touch()
		if c.client {
			c.s.m.bytesDown.Add(float64(n))
		}
	}
	return n, err
}

// headerLimiter sits under a bufio.Reader: while a header block is read it
// allows at most n more bytes, then none; otherwise it is transparent.
type headerLimiter struct {
	r io.Reader
	n int // < 0: no limit
}

func (l *headerLimiter) Read(p []byte) (int, error) {
	if l.n == 0 {
		return 0, errHeaderTooLarge
	}
	if l.n > 0 && len(p) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	if l.n > 0 {
		l.n -= n
	}
	return n, err
}

var zeroTime time.Time

func deadline(d time.Duration) time.Time { return time.Now().Add(d) }
