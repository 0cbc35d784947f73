package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/store"
)

const (
	typeInvalidRequest = "invalid_request_error"
	typeServer         = "server_error"
)

// Error is an OpenAI-shaped error answer.
type Error struct {
	Status  int
	Type    string
	Message string
	Param   string // "" is sent as null
	Code    string // "" is sent as null
}

func (e *Error) Error() string { return fmt.Sprintf("api: %d %s", e.Status, e.Message) }

func invalid(param, code, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Type: typeInvalidRequest, Param: param, Code: code, Message: fmt.Sprintf(format, args...)}
}

func notFound(param, format string, args ...any) *Error {
	return &Error{Status: http.StatusNotFound, Type: typeInvalidRequest, Param: param, Message: fmt.Sprintf(format, args...)}
}

func tooLarge(param, format string, args ...any) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Type: typeInvalidRequest, Param: param, Code: "file_too_large", Message: fmt.Sprintf(format, args...)}
}

// errNoCredential is OpenAI's answer to a request without an API key
// (api.anonymous: reject), for the Containers and Files APIs and for
// /v1/responses that use a container.
func errNoCredential() *Error {
	return &Error{Status: http.StatusUnauthorized, Type: typeInvalidRequest, Message: store.NoCredentialMessage}
}

// errExpired is what using an expired container answers (observed from
// OpenAI).
func errExpired() *Error {
	return invalid("container_id", "container_expired", "Container is expired.")
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func writeError(w http.ResponseWriter, e *Error) {
	type body struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}
	writeJSON(w, e.Status, struct {
		Error body `json:"error"`
	}{body{e.Message, e.Type, nullable(e.Param), nullable(e.Code)}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		// Our own objects always marshal; this is a bug, said plainly.
		http.Error(w, `{"error":{"message":"internal error encoding the answer","type":"server_error","param":null,"code":null}}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}

// storeError turns a store failure into the answer: not found → 404
// naming param, expired → 400, quota → 413 for bytes and 400 for counts,
// anything else → 500 (logged, never shown).
func (s *Server) storeError(w http.ResponseWriter, r *http.Request, err error, param, what, id string) {
	var q *store.QuotaError
	var pc *store.PathConflictError
	var e *Error
	switch {
	case errors.As(err, &e):
		writeError(w, e)
	case errors.As(err, &pc):
		writeError(w, pathConflict(pc))
	case errors.Is(err, store.ErrNotFound):
		writeError(w, notFound(param, "No %s found with id '%s'.", what, id))
	case errors.Is(err, store.ErrExpired):
		writeError(w, errExpired())
	case errors.As(err, &q):
		writeError(w, quotaError(q))
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client went away; nobody reads the answer.
	default:
		s.log.Error("store", zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.Error(err))
		writeError(w, &Error{Status: http.StatusInternalServerError, Type: typeServer,
			Message: "The server had an error while processing your request."})
	}
}

// pathConflict says which file of the container is in the way.
func pathConflict(pc *store.PathConflictError) *Error {
	msg := fmt.Sprintf("A file cannot be stored at '%s': the container has a file '%s' below it, so it is a directory.", pc.Path, pc.Other)
	if !strings.HasPrefix(pc.Other, pc.Path+"/") {
		msg = fmt.Sprintf("A file cannot be stored at '%s': the container's file '%s' is where a directory must be.", pc.Path, pc.Other)
	}
	return invalid("file", "path_conflict", "%s", msg)
}

// quotaError names the operator's bound that would be exceeded.
func quotaError(q *store.QuotaError) *Error {
	switch q.Limit {
	case store.LimitFileBytes, store.LimitContainerBytes, store.LimitOwnerBytes, store.LimitStoreMemory:
		return &Error{Status: http.StatusRequestEntityTooLarge, Type: typeInvalidRequest, Code: "quota_exceeded",
			Message: fmt.Sprintf("This would exceed the server's %s limit of %d bytes.", q.Limit, q.Max)}
	}
	return &Error{Status: http.StatusBadRequest, Type: typeInvalidRequest, Code: "quota_exceeded",
		Message: fmt.Sprintf("This would exceed the server's %s limit of %d.", q.Limit, q.Max)}
}
