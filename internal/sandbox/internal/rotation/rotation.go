// Package rotation counts the sessions started from one snapshot and says
// when a new one is due. The wasm kind (snapshots of an initialised
// CPython-WASI interpreter) and the gvisor kind (checkpoints of a sandbox
// with the data-science stack imported) share it: sessions restored from
// one image share what was fixed when it was taken (the str hash seed), so
// each kind takes a new image every so many sessions.
package rotation

import "sync"

// Counter counts sessions of the current image. The zero value never asks
// for a rotation.
type Counter struct {
	every int

	mu     sync.Mutex
	count  int  // sessions since the current image was taken
	taking bool // a rotation is under way
}

// New returns a counter that asks for a new image after every sessions;
// every ≤ 0 never asks (an image per server start only).
func New(every int) *Counter { return &Counter{every: every} }

// Session counts one session. It returns true for the one session that
// reaches the count while no rotation is under way: that caller takes the
// new image (in the background; sessions keep the current one meanwhile)
// and then calls Done.
func (c *Counter) Session() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.count++
	if c.every > 0 && c.count >= c.every && !c.taking {
		c.taking = true
		return true
	}
	return false
}

// Done ends the rotation Session asked for. ok says a new image is now
// current, which starts the count again; after a failure the next session
// asks again.
func (c *Counter) Done(ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.taking = false
	if ok {
		c.count = 0
	}
}

// Reset starts the count again: a new image became current by other means
// (the first one, at start).
func (c *Counter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.count = 0
}
