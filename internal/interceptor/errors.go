package interceptor

import (
	"net/http"
	"strconv"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/sse"
)

// This file turns an upstream problem into the client's error: the
// failure that ends a loop, and the answer a buffered or streaming client
// gets for it.

// failure is an upstream problem that ends the loop with an error for the
// client (not a Go error of CompleteResponse or StreamResponse): a live
// stream's error event, a buffered response's error answer — the model
// server's own when body is set (a follow-up answered with an error).
type failure struct {
	code, msg, param string
	status           int
	header           http.Header
	body             []byte
}

func (f *failure) Error() string { return f.code + ": " + f.msg }

// unreachable is the failure of a follow-up that got no answer.
func unreachable(round int) *failure {
	return &failure{status: http.StatusBadGateway, code: "upstream_unavailable",
		msg: "The upstream model server could not be reached for follow-up round " + strconv.Itoa(round) + "."}
}

// errorAnswer is the failure of a follow-up answered with an error.
func errorAnswer(status int, header http.Header, body []byte) *failure {
	code, msg, param := upstreamErrorFields(status, body)
	return &failure{status: status, header: header, body: body, code: code, msg: msg, param: param}
}

// fail answers the client with an error of our own.
func (l *loop) fail(status int, code, msg string) *Result {
	e := apierror.Server(status, code, "%s", msg)
	if l.x.req.clientStream {
		return &Result{Status: http.StatusOK, ContentType: ContentTypeSSE, Body: sse.ErrorEvent(code, msg, ""),
			Rounds: l.followUps, ToolCalls: l.toolCalls}
	}
	return &Result{Status: status, ContentType: ContentTypeJSON, Body: e.Body(), Rounds: l.followUps, ToolCalls: l.toolCalls}
}

// upstreamError hands a follow-up's error answer to the client.
func (l *loop) upstreamError(status int, header http.Header, body []byte) *Result {
	if !l.x.req.clientStream {
		return &Result{Status: status, ContentType: header.Get("Content-Type"), Body: body, Rounds: l.followUps, ToolCalls: l.toolCalls}
	}
	code, msg, param := upstreamErrorFields(status, body)
	return &Result{Status: http.StatusOK, ContentType: ContentTypeSSE, Body: sse.ErrorEvent(code, msg, param),
		Rounds: l.followUps, ToolCalls: l.toolCalls}
}

// upstreamErrorFields reads an upstream's error answer as the fields of
// OpenAI's error event.
func upstreamErrorFields(status int, body []byte) (code, msg, param string) {
	e := gjson.GetBytes(body, "error")
	msg = e.Get("message").Str
	if msg == "" {
		msg = "The upstream model server answered the follow-up request with HTTP " + strconv.Itoa(status) + "."
	}
	code = e.Get("code").Str
	if code == "" {
		code = e.Get("type").Str
	}
	return code, msg, e.Get("param").Str
}
