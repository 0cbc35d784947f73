package messages

import (
	"net/http"

	"github.com/codeinterp/codeinterp/internal/apierror"
)

// NoCredentialMessage is Anthropic's answer (401, authentication_error) to
// a request without an API key.
const NoCredentialMessage = "x-api-key header is required"

// errorType is Anthropic's error type for an HTTP status.
func errorType(status int) string { return apierror.AnthropicType(status) }

// ErrorBody is e in Anthropic's error shape (apierror.Error.AnthropicBody):
// the filter renders its own refusals of a /v1/messages request with it.
func ErrorBody(e *apierror.Error) []byte { return e.AnthropicBody() }

func errorJSON(status int, message string) []byte {
	return (&apierror.Error{Status: status, Message: message}).AnthropicBody()
}

// invalid is a 400 invalid_request_error.
func invalid(message string) *apierror.Error {
	return &apierror.Error{Status: http.StatusBadRequest, Type: errorType(http.StatusBadRequest), Message: message}
}
