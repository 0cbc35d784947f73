package interceptor

import (
	"strconv"
	"time"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/jsonx"
)

// Background reports whether the client asked for "background": true: the
// exchange is then driven by the filter's background runner, detached from
// the client's connection, and the client gets QueuedResponse at once.
// The upstream body carries no "background" (the model server runs one
// round at a time for us); the response object says "background": true.
func (x *Exchange) Background() bool { return x.req.background }

// ResponseID is the id of ours the response has ("resp_…"), "" when the
// server keeps no responses.
func (x *Exchange) ResponseID() string { return x.respID }

// QueuedResponse is the Response object a background request is answered
// with before its first round: OpenAI's shape with status (queued, or
// in_progress once running, or the status it ended with when it ended
// before any round), no output, and the request's own parameters echoed
// as a finished response echoes them.
func (x *Exchange) QueuedResponse(status string, createdAt time.Time) []byte {
	req := gjson.Parse(x.req.clientBody)
	or := func(key, def string) string {
		if v := req.Get(key); v.Exists() && v.Type != gjson.Null {
			return v.Raw
		}
		return def
	}
	tools := x.req.clientTools
	if tools == "" {
		tools = "[]"
	}
	prev := "null"
	if x.req.clientPrevID != "" {
		prev = x.req.clientPrevID
	}
	edits := []jsonx.Edit{
		jsonx.Set("id", jsonx.Quote(x.respID)),
		jsonx.Set("object", `"response"`),
		jsonx.Set("created_at", strconv.FormatInt(createdAt.Unix(), 10)),
		jsonx.Set("status", jsonx.Quote(status)),
		jsonx.Set("background", "true"),
		jsonx.Set("error", "null"),
		jsonx.Set("incomplete_details", "null"),
		jsonx.Set("instructions", or("instructions", "null")),
		jsonx.Set("max_output_tokens", or("max_output_tokens", "null")),
		jsonx.Set("max_tool_calls", or("max_tool_calls", "null")),
		jsonx.Set("model", or("model", `""`)),
		jsonx.Set("output", "[]"),
		jsonx.Set("parallel_tool_calls", or("parallel_tool_calls", "true")),
		jsonx.Set("previous_response_id", prev),
		jsonx.Set("reasoning", or("reasoning", `{"effort":null,"summary":null}`)),
		jsonx.Set("store", "true"),
		jsonx.Set("temperature", or("temperature", "1")),
		jsonx.Set("text", or("text", `{"format":{"type":"text"}}`)),
		jsonx.Set("tool_choice", or("tool_choice", `"auto"`)),
		jsonx.Set("tools", tools),
		jsonx.Set("top_p", or("top_p", "1")),
		jsonx.Set("truncation", or("truncation", `"disabled"`)),
		jsonx.Set("usage", "null"),
		jsonx.Set("user", or("user", "null")),
		jsonx.Set("metadata", or("metadata", "{}")),
	}
	if c := x.hist.conv; c != "" {
		edits = append(edits, jsonx.Set("conversation", `{"id":`+jsonx.Quote(c)+`}`))
	}
	return jsonx.EditObject("{}", edits...)
}
