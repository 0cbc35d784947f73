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
