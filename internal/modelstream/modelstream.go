package modelstream

import (
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/codeinterp/codeinterp/internal/sse"
)

// Events are the events of final, each a whole "event: …\ndata: …\n\n".
func Events(final []byte) []string {
	var out []string
	for _, ev := range strings.SplitAfter(string(sse.EventStream(final, true)), "\n\n") {
		if ev != "" {
			out = append(out, ev)
		}
	}
	return out
}

// Type is an event's type, from its "event:" line.
func Type(ev string) string {
	typ, _, _ := strings.Cut(strings.TrimPrefix(ev, "event: "), "\n")
	return typ
}

// Write answers r with final as an event stream, gap before each event.
// before, when set, runs before the kth event is written (after the gap)
// and may hold it; it returns false to stop there. sent, when set, is told
// each event's type and when its write began. Write returns when the
// stream is over or the client left.
func Write(w http.ResponseWriter, r *http.Request, final []byte, gap time.Duration, before func(k int, typ string) bool, sent func(typ string, at time.Time)) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	for k, ev := range Events(final) {
		if gap > 0 {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(gap):
			}
		}
		typ := Type(ev)
		if before != nil && !before(k, typ) {
			return
		}
		at := time.Now() // before the write: the client may read it before Flush returns
		if _, err := io.WriteString(w, ev); err != nil {
			return
		}
		_ = rc.Flush()
		if sent != nil {
			sent(typ, at)
		}
	}
}
