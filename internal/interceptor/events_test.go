package interceptor

import (
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"
)

// The checks of a client's event stream that the interceptor's tests share
// (internal/sse's tests have their own copies for the streams it writes).

func keys(v gjson.Result) []string {
	var ks []string
	v.ForEach(func(k, _ gjson.Result) bool {
		ks = append(ks, k.Str)
		return true
	})
	sort.Strings(ks)
	return ks
}

// finalResponse is the response object of a stream's terminal event.
func finalResponse(t *testing.T, evs []sseEvent) string {
	t.Helper()
	last := evs[len(evs)-1]
	if !strings.HasPrefix(last.Name, "response.") || !last.Data.Get("response").IsObject() {
		t.Fatalf("stream ends with %s, not a terminal response event", last.Name)
	}
	return last.Data.Get("response").Raw
}

// checkStreamInvariants checks what every stream we produce must satisfy:
// contiguous sequence numbers from 0, and item ids that match the items at
// their output_index in the final response.
func checkStreamInvariants(t *testing.T, evs []sseEvent) {
	t.Helper()
	final := gjson.Parse(finalResponse(t, evs))
	items := final.Get("output").Array()
	for i, e := range evs {
		if got := e.Data.Get("sequence_number"); got.Type != gjson.Number || got.Int() != int64(i) {
			t.Fatalf("event %d (%s): sequence_number %s", i, e.Name, got.Raw)
		}
		oi := e.Data.Get("output_index")
		if !oi.Exists() {
			continue
		}
		if oi.Int() < 0 || int(oi.Int()) >= len(items) {
			t.Fatalf("event %d (%s): output_index %d outside output (%d items)", i, e.Name, oi.Int(), len(items))
		}
		want := items[oi.Int()].Get("id").Str
		if id := e.Data.Get("item_id"); id.Exists() && id.Str != want {
			t.Fatalf("event %d (%s): item_id %q, output[%d] has id %q", i, e.Name, id.Str, oi.Int(), want)
		}
		if it := e.Data.Get("item"); it.Exists() && it.Get("id").Str != want {
			t.Fatalf("event %d (%s): item id %q, output[%d] has id %q", i, e.Name, it.Get("id").Str, oi.Int(), want)
		}
	}
}

// decodeStream reads a stream with openai-go's own SSE decoder and event
// union, as a client would.
func decodeStream(t *testing.T, body []byte) []responses.ResponseStreamEventUnion {
	t.Helper()
	res := &http.Response{Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: io.NopCloser(strings.NewReader(string(body)))}
	stream := ssestream.NewStream[responses.ResponseStreamEventUnion](ssestream.NewDecoder(res), nil)
	var out []responses.ResponseStreamEventUnion
	for stream.Next() {
		out = append(out, stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("openai-go stream decoder: %v", err)
	}
	return out
}
