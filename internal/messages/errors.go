package messages

import (
	"encoding/json"
	"net/http"

	"github.com/codeinterp/codeinterp/internal/apierror"
)

// NoCredentialMessage is Anthropic's answer (401, authentication_error) to
// a request without an API key.
const NoCredentialMessage = "x-api-key header is required"

// errorType is Anthropic's error type for an HTTP status.
func errorType(status int) string {
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

// ErrorBody is e in Anthropic's error shape,
// {"type":"error","error":{"type":…,"message":…}}: the type follows the
// status as Anthropic's does (OpenAI's param and code have no place in it;
// the message names the field). The filter renders its own refusals of a
// /v1/messages request with it.
func ErrorBody(e *apierror.Error) []byte {
	return errorJSON(e.Status, e.Message)
}

func errorJSON(status int, message string) []byte {
	b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": errorType(status), "message": message}})
	return b
}

// invalid is a 400 invalid_request_error.
func invalid(message string) *apierror.Error {
	return &apierror.Error{Status: http.StatusBadRequest, Type: errorType(http.StatusBadRequest), Message: message}
}
