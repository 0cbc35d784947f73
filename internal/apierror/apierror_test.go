package apierror_test

import (
	"net/http"
	"testing"

	"github.com/codeinterp/codeinterp/internal/apierror"
)

// TestBody: OpenAI's shape, key for key and in its order, an empty param
// or code as null.
func TestBody(t *testing.T) {
	for _, tc := range []struct {
		e    *apierror.Error
		want string
	}{
		{apierror.Invalid("tools[0].container", "invalid_value", "Invalid value for '%s': %d.", "x", 3),
			`{"error":{"message":"Invalid value for 'x': 3.","type":"invalid_request_error","param":"tools[0].container","code":"invalid_value"}}`},
		{apierror.Server(http.StatusBadGateway, "", "%d%% <down> & %q", 100, "out"),
			`{"error":{"message":"100% \u003cdown\u003e \u0026 \"out\"","type":"server_error","param":null,"code":null}}`},
		{apierror.NoCredential(),
			`{"error":{"message":` + jsonQuote(apierror.NoCredentialMessage) + `,"type":"invalid_request_error","param":null,"code":null}}`},
	} {
		if got := string(tc.e.Body()); got != tc.want {
			t.Errorf("Body:\n got %s\nwant %s", got, tc.want)
		}
	}
}

func TestConstructors(t *testing.T) {
	for _, tc := range []struct {
		e             *apierror.Error
		status        int
		typ, param    string
		code, message string
	}{
		{apierror.Invalid("p", "c", "m"), http.StatusBadRequest, apierror.TypeInvalidRequest, "p", "c", "m"},
		{apierror.NotFound("p", "", "No file found with id '%s'.", "f"), http.StatusNotFound, apierror.TypeInvalidRequest, "p", "", "No file found with id 'f'."},
		{apierror.TooLarge("file", "file_too_large", "m"), http.StatusRequestEntityTooLarge, apierror.TypeInvalidRequest, "file", "file_too_large", "m"},
		{apierror.Server(http.StatusInternalServerError, "", "m"), http.StatusInternalServerError, apierror.TypeServer, "", "", "m"},
		{apierror.NoCredential(), http.StatusUnauthorized, apierror.TypeInvalidRequest, "", "", apierror.NoCredentialMessage},
		{apierror.ContainerExpired("container_id"), http.StatusBadRequest, apierror.TypeInvalidRequest, "container_id", "container_expired", "Container is expired."},
	} {
		e := tc.e
		if e.Status != tc.status || e.Type != tc.typ || e.Param != tc.param || e.Code != tc.code || e.Message != tc.message {
			t.Errorf("got %+v, want %d %s param %q code %q message %q", e, tc.status, tc.typ, tc.param, tc.code, tc.message)
		}
	}
}

func jsonQuote(s string) string { return `"` + s + `"` } // the message has nothing to escape
