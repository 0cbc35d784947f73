package api

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/store"
)

// This file serves the responses this server made (the interceptor keeps
// them: interceptor.WithResponses): GET /v1/responses/{id},
// GET /v1/responses/{id}/input_items and DELETE /v1/responses/{id}. An id
// the caller has no stored response for is the model server's: the request
// is passed to it (Config.ResponsesUpstreamURL) with the caller's
// credential, so one route serves both.

// includeOutputs is the include value that fills code_interpreter_call
// outputs, as on POST /v1/responses.
const includeOutputs = "code_interpreter_call.outputs"

// maxUpstreamAnswer bounds an answer passed back from the model server.
const maxUpstreamAnswer = 64 << 20

// getResponse is GET /v1/responses/{id}.
func (s *Server) getResponse(w http.ResponseWriter, r *http.Request, owner string) {
	if wantsStream(r) {
		s.streamResponse(w, r, owner)
		return
	}
	id := r.PathValue("id")
	rec, ok := s.storedResponse(w, r, owner, id)
	if !ok {
		return
	}
	s.writeResponseObject(w, r, s.settled(r.Context(), owner, rec).Object)
}

// deleteResponse is DELETE /v1/responses/{id}.
func (s *Server) deleteResponse(w http.ResponseWriter, r *http.Request, owner string) {
	id := r.PathValue("id")
	rec, ok := s.storedResponse(w, r, owner, id)
	if !ok {
		return
	}
	if err := s.cfg.Responses.DeleteResponse(r.Context(), owner, rec.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
		s.log.Error("response store delete failed", zap.Error(err))
		writeError(w, apierror.Server(http.StatusInternalServerError, "", "The response store is unavailable; try again later."))
		return
	}
	writeJSON(w, http.StatusOK, deletedObject{ID: rec.ID, Object: "response", Deleted: true})
}

// listInputItems is GET /v1/responses/{id}/input_items: the request's input
// items as the client sent them, paginated as OpenAI's lists are (newest
// first by default).
func (s *Server) listInputItems(w http.ResponseWriter, r *http.Request, owner string) {
	id := r.PathValue("id")
	o, e := listOptions(r, 20, 100)
	if e != nil {
		writeError(w, e)
		return
	}
	rec, ok := s.storedResponse(w, r, owner, id)
	if !ok {
		return
	}
	items := slices.Clone(rec.Input)
	if o.Order == "desc" {
		slices.Reverse(items)
	}
	start := 0
	if o.After != "" {
		start = len(items) // an unknown id is an empty page, as elsewhere
		for k, it := range items {
			if gjson.GetBytes(it, "id").Str == o.After {
				start = k + 1
				break
			}
		}
	}
	page := items[start:]
	more := len(page) > o.Limit
	if more {
		page = page[:o.Limit]
	}
	writeJSON(w, http.StatusOK, newList(page, func(it json.RawMessage) string { return gjson.GetBytes(it, "id").Str }, more))
}

// storedResponse finds the caller's stored response id. When there is none
// it answers for it — passing the request to the model server, or a 404 —
// and ok is false.
func (s *Server) storedResponse(w http.ResponseWriter, r *http.Request, owner, id string) (rec store.Response, ok bool) {
	if store.ValidID(id) {
		var err error
		rec, err = s.cfg.Responses.GetResponse(r.Context(), owner, id)
		switch {
		case err == nil:
			return rec, true
		case !errors.Is(err, store.ErrNotFound):
			s.log.Error("response store lookup failed", zap.Error(err))
			writeError(w, apierror.Server(http.StatusInternalServerError, "", "The response store is unavailable; try again later."))
			return rec, false
		}
	}
	if s.cfg.ResponsesUpstreamURL != "" && !idgen.Tagged(id, "resp_") {
		// Not one of ours: the model server's.
		s.passResponses(w, r)
		return rec, false
	}
	writeError(w, apierror.NotFound("", "", "Response with id '%s' not found.", id))
	return rec, false
}

// passResponses passes a request for a response this server does not hold
// to the model server: same method, the path below /v1/responses and the
// query, the caller's forwarded headers; the answer comes back as it is.
func (s *Server) passResponses(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.EscapedPath(), "/v1/responses")
	u := strings.TrimSuffix(s.cfg.ResponsesUpstreamURL, "/") + rest
	if r.URL.RawQuery != "" {
		u += "?" + r.URL.RawQuery
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, u, nil)
	if err != nil {
		writeError(w, apierror.Server(http.StatusBadGateway, "", "The model server's URL is invalid."))
		return
	}
	for _, h := range s.cfg.ForwardHeaders {
		for _, v := range r.Header.Values(h) {
			req.Header.Add(h, v)
		}
	}
	for k, v := range s.cfg.UpstreamHeaders {
		req.Header.Set(k, v)
	}
	resp, err := s.httpClient().Do(req)
	if err != nil {
		s.log.Warn("model server unreachable for a stored response", zap.String("url", redactQuery(u)), zap.Error(err))
		writeError(w, apierror.Server(http.StatusBadGateway, "upstream_unavailable", "The upstream model server could not be reached."))
		return
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, io.LimitReader(resp.Body, maxUpstreamAnswer))
}

func (s *Server) httpClient() *http.Client {
	if s.cfg.HTTPClient != nil {
		return s.cfg.HTTPClient
	}
	return http.DefaultClient
}

func redactQuery(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i]
	}
	return u
}

// includes reads include[] (or include) query values.
func includes(q url.Values) []string {
	return append(q["include[]"], q["include"]...)
}

// withoutOutputs sets every code_interpreter_call's outputs to null, as a
// response shows them unless asked to include them.
func withoutOutputs(obj []byte) []byte {
	out := obj
	gjson.GetBytes(obj, "output").ForEach(func(k, it gjson.Result) bool {
		if it.Get("type").Str == "code_interpreter_call" && it.Get("outputs").Type != gjson.Null {
			if b, err := sjson.SetRawBytes(out, "output."+k.String()+".outputs", []byte("null")); err == nil {
				out = b
			}
		}
		return true
	})
	return out
}
