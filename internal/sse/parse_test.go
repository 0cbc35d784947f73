package sse

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// sseEvent is one parsed server-sent event.
type sseEvent struct {
	Name string
	Data gjson.Result
}

// parseSSE splits an event stream into events and checks the framing OpenAI
// uses: "event:" and "data:" lines, a blank line after each event, data JSON
// whose type equals the event name.
func parseSSE(t testing.TB, stream string) []sseEvent {
	t.Helper()
	var out []sseEvent
	blocks := strings.Split(stream, "\n\n")
	if blocks[len(blocks)-1] != "" {
		t.Fatalf("stream does not end with a blank line: %q", tail(stream))
	}
	for _, b := range blocks[:len(blocks)-1] {
		lines := strings.Split(b, "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "event: ") || !strings.HasPrefix(lines[1], "data: ") {
			t.Fatalf("malformed event block %q", b)
		}
		name := strings.TrimPrefix(lines[0], "event: ")
		data := strings.TrimPrefix(lines[1], "data: ")
		if !gjson.Valid(data) {
			t.Fatalf("event %s: data is not JSON: %s", name, data)
		}
		d := gjson.Parse(data)
		if d.Get("type").Str != name {
			t.Fatalf("event %s: data type is %q", name, d.Get("type").Str)
		}
		out = append(out, sseEvent{Name: name, Data: d})
	}
	return out
}

func tail(s string) string {
	if len(s) > 80 {
		return s[len(s)-80:]
	}
	return s
}
