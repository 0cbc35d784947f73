package apierror

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
)

// The error types OpenAI sends.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeServer         = "server_error"
)

// NoCredentialMessage is OpenAI's answer (401, invalid_request_error) to a
// request without an API key.
const NoCredentialMessage = "You didn't provide an API key. " +
	"You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), " +
	"or as the password field (with blank username) if you're accessing the API from your browser and are prompted for a username. " +
	"You can obtain an API key from https://platform.openai.com/account/api-keys."

// Error is a request refused, or a failure reported to the client, in
// OpenAI's error shape.
type Error struct {
	Status  int    // HTTP status, e.g. 400
	Type    string // e.g. "invalid_request_error"
	Message string
	Param   string // the offending field, e.g. "tools[1].container.file_ids"; "" means null
	Code    string // e.g. "unknown_parameter"; "" means null
}

func (e *Error) Error() string {
	if e.Param != "" {
		return fmt.Sprintf("%d %s (%s): %s", e.Status, e.Type, e.Param, e.Message)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Type, e.Message)
}

// Envelope is OpenAI's error body as it travels:
// {"error":{"message":…,"type":…,"param":…,"code":…}}, a null param or
// code as nil.
type Envelope struct {
	Error Detail `json:"error"`
}

// Detail is the envelope's error.
type Detail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// ParseBody reads an error body strictly, as OpenAI's clients decode it:
// exactly the envelope's fields, a message and a type.
func ParseBody(body []byte) (Envelope, error) {
	var env Envelope
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil {
		return env, fmt.Errorf("apierror: %w", err)
	}
	if env.Error.Message == "" || env.Error.Type == "" {
		return env, fmt.Errorf("apierror: no message or type in %s", body)
	}
	return env, nil
}

// Body is the error as the JSON body OpenAI sends (Envelope), an empty
// Param or Code as null.
func (e *Error) Body() []byte {
	in := Detail{Message: e.Message, Type: e.Type}
	if e.Param != "" {
		in.Param = &e.Param
	}
	if e.Code != "" {
		in.Code = &e.Code
	}
	b, err := json.Marshal(Envelope{in})
	if err != nil { // cannot happen: strings only
		return []byte(`{"error":{"message":"internal error","type":"server_error","param":null,"code":null}}`)
	}
	return b
}

// Invalid is a 400 invalid_request_error naming param.
func Invalid(param, code, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Param: param, Code: code, Message: sprintf(format, args...)}
}

// NotFound is a 404 invalid_request_error naming param.
func NotFound(param, code, format string, args ...any) *Error {
	return &Error{Status: http.StatusNotFound, Type: TypeInvalidRequest, Param: param, Code: code, Message: sprintf(format, args...)}
}

// TooLarge is a 413 invalid_request_error naming param.
func TooLarge(param, code, format string, args ...any) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Type: TypeInvalidRequest, Param: param, Code: code, Message: sprintf(format, args...)}
}

// Server is a server_error with status (500, 502): a failure of this
// server or of one it depends on, not of the request.
func Server(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Type: TypeServer, Code: code, Message: sprintf(format, args...)}
}

// NoCredential is OpenAI's answer to a request without an API key, for
// what belongs to a credential (containers, files, conversations,
// responses that use a container).
func NoCredential() *Error {
	return &Error{Status: http.StatusUnauthorized, Type: TypeInvalidRequest, Message: NoCredentialMessage}
}

// ContainerExpired is what using an expired container answers (observed
// from OpenAI); param names the container.
func ContainerExpired(param string) *Error {
	return Invalid(param, "container_expired", "Container is expired.")
}

// sprintf is fmt.Sprintf, except that a message without arguments is
// taken as it is (a '%' in it is text, not a verb).
func sprintf(format string, args ...any) string {
	if len(args) == 0 {
		return format
	}
	return fmt.Sprintf(format, args...)
}

// AnthropicBody is e in Anthropic's error shape,
// {"type":"error","error":{"type":…,"message":…}}: the type follows the
// status as Anthropic's does (OpenAI's param and code have no place in it;
// the message names the field). The Messages API and Anthropic's Files API
// shapes answer with it.
func (e *Error) AnthropicBody() []byte {
	b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": AnthropicType(e.Status), "message": e.Message}})
	return b
}

// AnthropicType is Anthropic's error type for an HTTP status.
func AnthropicType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable, 529:
		return "overloaded_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}
