package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/store"
)

// This file routes requests to the endpoints: ServeMux patterns, and the
// OpenAI-shaped answers for what no pattern serves.

// handler serves one endpoint for the caller owner; the path's ids are
// the request's PathValues.
type handler func(w http.ResponseWriter, r *http.Request, owner string)

// route is one endpoint: a ServeMux pattern with its method, and the
// handler.
type route struct {
	pattern string
	h       handler
}

// routes builds the mux of the endpoints s.cfg enables. Each path has,
// beside its method patterns, a pattern without a method that answers
// the other methods, and "/" answers every other path, so ServeMux's own
// plain-text 404 and 405 never reach a client.
func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	handle(mux, "/", s.invalidURL)
	s.register(mux, nil,
		route{"GET /v1/containers", s.listContainers},
		route{"POST /v1/containers", s.createContainer},
		route{"GET /v1/containers/{id}", s.getContainer},
		route{"DELETE /v1/containers/{id}", s.deleteContainer},
		route{"GET /v1/containers/{id}/files", s.listContainerFiles},
		route{"POST /v1/containers/{id}/files", s.createContainerFile},
		route{"GET /v1/containers/{id}/files/{file_id}", s.getContainerFile},
		route{"DELETE /v1/containers/{id}/files/{file_id}", s.deleteContainerFile},
		route{"GET /v1/containers/{id}/files/{file_id}/content", s.containerFileContent},
	)
	if s.cfg.FilesSource == FilesLocal {
		s.register(mux, nil,
			route{"GET /v1/files", byClient(s.listFiles, s.anthropicListFiles)},
			route{"POST /v1/files", byClient(s.createFile, s.anthropicCreateFile)},
			route{"GET /v1/files/{id}", byClient(s.getFile, s.anthropicGetFile)},
			route{"DELETE /v1/files/{id}", byClient(s.deleteFile, s.anthropicDeleteFile)},
			route{"GET /v1/files/{id}/content", byClient(s.fileContent, s.anthropicFileContent)},
		)
	} else {
		// Whatever the method or credential: the answer says where the
		// Files API is.
		for _, p := range []string{"/v1/files", "/v1/files/{id}", "/v1/files/{id}/content"} {
			handle(mux, p, func(w http.ResponseWriter, _ *http.Request) { s.filesUnavailable(w) })
		}
	}
	if s.cfg.Responses != nil {
		// With a model server, every request below /v1/responses that
		// no endpoint here serves is its, whatever the method.
		var other http.HandlerFunc
		if s.cfg.ResponsesUpstreamURL != "" {
			other = s.passResponses
			handle(mux, "/v1/responses", other)
			handle(mux, "/v1/responses/", other)
		}
		rs := []route{
			{"GET /v1/responses/{id}", s.getResponse},
			{"DELETE /v1/responses/{id}", s.deleteResponse},
			{"GET /v1/responses/{id}/input_items", s.listInputItems},
		}
		if s.cfg.Background != nil {
			rs = append(rs,
				// What the filter turns a background "stream": true request
				// into (its method stays POST): the stream from its start.
				route{"POST /v1/responses/{id}", s.resumeCreated},
				route{"POST /v1/responses/{id}/cancel", s.cancelResponse})
		}
		s.register(mux, other, rs...)
	}
	if s.cfg.Skills != nil {
		s.register(mux, nil,
			route{"GET /v1/skills", s.listSkills},
			route{"POST /v1/skills", s.createSkill},
			route{"GET /v1/skills/{id}", s.getSkill},
			route{"POST /v1/skills/{id}", s.updateSkill},
			route{"DELETE /v1/skills/{id}", s.deleteSkill},
			route{"GET /v1/skills/{id}/content", s.skillContent},
			route{"GET /v1/skills/{id}/versions", s.listSkillVersions},
			route{"POST /v1/skills/{id}/versions", s.createSkillVersion},
			route{"GET /v1/skills/{id}/versions/{version}", s.getSkillVersion},
			route{"DELETE /v1/skills/{id}/versions/{version}", s.deleteSkillVersion},
			route{"GET /v1/skills/{id}/versions/{version}/content", s.skillVersionContent},
		)
	}
	if s.cfg.Usage != nil {
		s.register(mux, nil, route{"GET /v1/organization/usage/code_interpreter_sessions", s.codeInterpreterUsage})
	}
	if s.cfg.Conversations != nil {
		s.register(mux, nil,
			route{"POST /v1/conversations", s.createConversation},
			route{"GET /v1/conversations/{id}", s.getConversation},
			route{"POST /v1/conversations/{id}", s.updateConversation},
			route{"DELETE /v1/conversations/{id}", s.deleteConversation},
			route{"GET /v1/conversations/{id}/items", s.listItems},
			route{"POST /v1/conversations/{id}/items", s.createItems},
			route{"GET /v1/conversations/{id}/items/{item_id}", s.getItem},
			route{"DELETE /v1/conversations/{id}/items/{item_id}", s.deleteItem},
		)
	}
	return mux
}

// register adds routes to mux, and for each of their paths a pattern
// that answers the methods it has no route for: other, or when other is
// nil a 405 that names the methods it has.
func (s *Server) register(mux *http.ServeMux, other http.HandlerFunc, routes ...route) {
	var paths []string
	methods := map[string][]string{} // path → its methods
	for _, rt := range routes {
		method, path, _ := strings.Cut(rt.pattern, " ")
		if methods[path] == nil {
			paths = append(paths, path)
		}
		methods[path] = append(methods[path], method)
	}
	fallback := map[string]http.HandlerFunc{}
	for _, p := range paths {
		fallback[p] = other
		if other == nil {
			fallback[p] = methodNotAllowed(methods[p])
		}
		handle(mux, p, fallback[p])
	}
	for _, rt := range routes {
		method, path, _ := strings.Cut(rt.pattern, " ")
		handle(mux, rt.pattern, s.endpoint(method, rt.h, fallback[path]))
	}
}

// endpoint serves method with h once the caller has a credential (or
// anonymous callers share one owner). A GET pattern matches HEAD too;
// HEAD goes to other, as every method without its route does.
func (s *Server) endpoint(method string, h handler, other http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method {
			other(w, r)
			return
		}
		owner, ok := store.Owner(r.Header, s.cfg.AuthHeaders)
		if !ok && s.cfg.Anonymous != AnonymousShared {
			if anthropic(r) {
				writeAnthropicError(w, &apierror.Error{Status: http.StatusUnauthorized, Message: "x-api-key header is required"})
				return
			}
			writeError(w, apierror.NoCredential())
			return
		}
		h(w, r, owner)
	}
}

// methodNotAllowed answers a method a path has no route for: 405 with
// Allow, the allowed methods in the order GET, POST, DELETE.
func methodNotAllowed(methods []string) http.HandlerFunc {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
		if slices.Contains(methods, m) {
			allow = append(allow, m)
		}
	}
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(w, &apierror.Error{Status: http.StatusMethodNotAllowed, Type: apierror.TypeInvalidRequest, Code: "method_not_allowed",
			Message: fmt.Sprintf("Method %s is not allowed on %s; use %s.", r.Method, r.URL.Path, strings.Join(allow, " or "))})
	}
}

// requestURL is the context key under which ServeHTTP keeps the
// request's own URL while the mux sees the routing one.
type requestURL struct{}

// handle registers h for pattern; h sees the request's own URL again.
func handle(mux *http.ServeMux, pattern string, h http.HandlerFunc) {
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		if u, ok := r.Context().Value(requestURL{}).(*url.URL); ok {
			r.URL = u
		}
		h(w, r)
	})
}

// ServeHTTP routes a request by the segments of its decoded path: an
// encoded slash separates ids as a slash does, and a dot segment is an id
// like any other. ServeMux matches the escaped path instead, keeping %2F
// inside a wildcard, and redirects a path with dot segments to its cleaned
// form; so the mux gets a copy whose escaped path is the decoded segments,
// each escaped with its dots too, and the handlers get the request's own
// URL back (the model server gets the path as the client sent it).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, ok := routingPath(r.URL.Path)
	if !ok {
		s.invalidURL(w, r)
		return
	}
	u := *r.URL
	u.RawPath = raw
	rr := r.WithContext(context.WithValue(r.Context(), requestURL{}, r.URL))
	rr.URL = &u
	s.mux.ServeHTTP(w, rr)
}

// routingPath is the escaped path the mux routes p (a decoded path) by:
// every segment escaped, and "." and ".." as %2E so that they are not
// path steps. ok is false unless p is below /v1/ with no empty segment
// (a trailing slash or a doubled one is no endpoint's).
func routingPath(p string) (string, bool) {
	rest, ok := strings.CutPrefix(p, "/v1/")
	if !ok || rest == "" {
		return "", false
	}
	var b strings.Builder
	b.WriteString("/v1")
	for seg := range strings.SplitSeq(rest, "/") {
		switch seg {
		case "":
			return "", false
		case ".", "..":
			b.WriteString("/" + strings.Repeat("%2E", len(seg)))
		default:
			b.WriteString("/" + url.PathEscape(seg))
		}
	}
	return b.String(), true
}

func (s *Server) invalidURL(w http.ResponseWriter, r *http.Request) {
	writeError(w, &apierror.Error{Status: http.StatusNotFound, Type: apierror.TypeInvalidRequest, Code: "unknown_url",
		Message: fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path)})
}

// filesUnavailable answers /v1/files when this server does not serve it:
// with FilesUpstream Envoy routes it to the upstream, so a request that
// arrives here was misrouted.
func (s *Server) filesUnavailable(w http.ResponseWriter) {
	msg := "The Files API is not supported by this server (files.source: off)."
	if s.cfg.FilesSource == FilesUpstream {
		msg = "The Files API is served by the upstream provider, not by this server (files.source: upstream)."
	}
	writeError(w, &apierror.Error{Status: http.StatusNotFound, Type: apierror.TypeInvalidRequest, Code: "unsupported", Message: msg})
}
