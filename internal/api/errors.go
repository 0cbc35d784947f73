package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/store"
)

// writeError answers with e as OpenAI's error JSON.
func writeError(w http.ResponseWriter, e *apierror.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	_, _ = w.Write(append(e.Body(), '\n'))
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
	var e *apierror.Error
	switch {
	case errors.As(err, &e):
		writeError(w, e)
	case errors.As(err, &pc):
		writeError(w, pathConflict(pc))
	case errors.Is(err, store.ErrNotFound):
		writeError(w, apierror.NotFound(param, "", "No %s found with id '%s'.", what, id))
	case errors.Is(err, store.ErrExpired):
		writeError(w, apierror.ContainerExpired("container_id"))
	case errors.As(err, &q):
		writeError(w, quotaError(q))
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client went away; nobody reads the answer.
	default:
		s.log.Error("store", zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.Error(err))
		writeError(w, apierror.Server(http.StatusInternalServerError, "", "The server had an error while processing your request."))
	}
}

// pathConflict says which file of the container is in the way.
func pathConflict(pc *store.PathConflictError) *apierror.Error {
	msg := fmt.Sprintf("A file cannot be stored at '%s': the container has a file '%s' below it, so it is a directory.", pc.Path, pc.Other)
	if !strings.HasPrefix(pc.Other, pc.Path+"/") {
		msg = fmt.Sprintf("A file cannot be stored at '%s': the container's file '%s' is where a directory must be.", pc.Path, pc.Other)
	}
	return apierror.Invalid("file", "path_conflict", "%s", msg)
}

// quotaError names the operator's bound that would be exceeded.
func quotaError(q *store.QuotaError) *apierror.Error {
	switch q.Limit {
	case store.LimitFileBytes, store.LimitContainerBytes, store.LimitOwnerBytes, store.LimitStoreMemory:
		return apierror.TooLarge("", "quota_exceeded", "This would exceed the server's %s limit of %d bytes.", q.Limit, q.Max)
	}
	return apierror.Invalid("", "quota_exceeded", "This would exceed the server's %s limit of %d.", q.Limit, q.Max)
}
