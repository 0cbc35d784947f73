package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/apierror"
	"github.com/codeinterp/codeinterp/memlimit"
	"github.com/codeinterp/codeinterp/store"
)

// The files sources (Config.FilesSource).
const (
	FilesLocal    = "local"
	FilesUpstream = "upstream"
	FilesOff      = "off"
)

// The anonymous policies (Config.Anonymous): what a request without a
// credential gets.
const (
	// AnonymousReject answers it 401, as OpenAI does (the default).
	AnonymousReject = "reject"
	// AnonymousShared lets every such request share one owner: whatever
	// one of them makes, all of them can read and delete. For a
	// single-user laptop only.
	AnonymousShared = "shared"
)

// The defaults of Config's zero fields.
const (
	DefaultExpiryMinutes  = 20 // OpenAI's
	DefaultMaxUploadBytes = 64 << 20
)

// Config configures the API server.
type Config struct {
	// AuthHeaders name the request headers whose values identify the
	// caller (store.Owner). Default: store.DefaultAuthHeaders.
	AuthHeaders []string
	// DefaultExpiryMinutes is a new container's expires_after.minutes when
	// the request gives none (OpenAI's 20).
	DefaultExpiryMinutes int
	// MaxExpiryMinutes is the largest expires_after.minutes accepted.
	// Default: DefaultExpiryMinutes.
	MaxExpiryMinutes int
	// MaxMemoryLimit (bytes) is the largest memory_limit a client may ask
	// for ("1g" = 1GiB). Default 1GiB.
	MaxMemoryLimit int64
	// MaxUploadBytes bounds one uploaded file; larger uploads get a 413.
	// Default 64MiB.
	MaxUploadBytes int64
	// Create, when set, stores a container POST /v1/containers makes
	// instead of the store's PutContainer: the containers manager's
	// Create, which makes room at the owner_containers quota by recycling
	// the caller's least recently used idle auto container, as a response
	// would.
	Create func(ctx context.Context, c store.Container) error
	// Anonymous is AnonymousReject (default) or AnonymousShared.
	Anonymous string
	// FilesSource is FilesLocal (default), FilesUpstream or FilesOff.
	FilesSource string
	// FilesUpstreamURL is the upstream's API base URL (e.g.
	// https://api.openai.com/v1) for FilesUpstream; Fetcher, when set,
	// replaces the HTTP fetcher built from it.
	FilesUpstreamURL string
	Fetcher          FileFetcher
	// FileLifetime is how long a Files API file lives after its upload
	// (its expires_at); 0 means the store's rules only (no expires_at).
	FileLifetime time.Duration
	// Now is the clock (tests inject one). Default time.Now.
	Now func() time.Time

	// Responses, when set, serves the responses the interceptor stored:
	// GET and DELETE /v1/responses/{id}, GET …/input_items. An id the
	// caller has none for goes to ResponsesUpstreamURL (the model server's
	// Responses endpoint, e.g. http://127.0.0.1:10001/v1/responses) with
	// the ForwardHeaders of the caller's request, through HTTPClient
	// (default http.DefaultClient); without that URL it is a 404.
	Responses            store.Responses
	ResponsesUpstreamURL string
	ForwardHeaders       []string
	UpstreamHeaders      map[string]string // added after the forwarded ones, as on follow-ups
	HTTPClient           *http.Client
	// Conversations, when set, serves OpenAI's Conversations API
	// (/v1/conversations…).
	Conversations store.Conversations
}

// Server is the HTTP handler of the Containers and Files APIs.
type Server struct {
	cfg     Config
	st      store.Store
	log     *zap.Logger
	fetcher FileFetcher // nil when file ids are not available (FilesOff)
}

// Bounds of requests that are not uploads.
const (
	maxJSONBytes = 1 << 20
	// multipartSlack covers the part headers and small fields around an
	// upload's file part.
	multipartSlack = 64 << 10
	// maxFieldBytes bounds one non-file multipart field (file_id, purpose).
	maxFieldBytes = 4 << 10
	maxFileIDs    = 50 // OpenAI's bound for file_ids
)

// New checks cfg, fills its defaults and returns the server.
func New(cfg Config, st store.Store, log *zap.Logger) (*Server, error) {
	if st == nil {
		return nil, errors.New("api: a store is required")
	}
	if log == nil {
		log = zap.NewNop()
	}
	if len(cfg.AuthHeaders) == 0 {
		cfg.AuthHeaders = store.DefaultAuthHeaders()
	}
	if cfg.DefaultExpiryMinutes == 0 {
		cfg.DefaultExpiryMinutes = DefaultExpiryMinutes
	}
	if cfg.MaxExpiryMinutes == 0 {
		cfg.MaxExpiryMinutes = cfg.DefaultExpiryMinutes
	}
	if cfg.MaxMemoryLimit == 0 {
		cfg.MaxMemoryLimit = memlimit.DefaultBytes
	}
	if cfg.MaxUploadBytes == 0 {
		cfg.MaxUploadBytes = DefaultMaxUploadBytes
	}
	if cfg.FilesSource == "" {
		cfg.FilesSource = FilesLocal
	}
	if cfg.Anonymous == "" {
		cfg.Anonymous = AnonymousReject
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	switch {
	case cfg.Anonymous != AnonymousReject && cfg.Anonymous != AnonymousShared:
		return nil, fmt.Errorf("api: Anonymous %q is not one of reject, shared", cfg.Anonymous)
	case cfg.DefaultExpiryMinutes < 1 || cfg.MaxExpiryMinutes < cfg.DefaultExpiryMinutes:
		return nil, fmt.Errorf("api: expiry: want 1 <= DefaultExpiryMinutes (%d) <= MaxExpiryMinutes (%d)", cfg.DefaultExpiryMinutes, cfg.MaxExpiryMinutes)
	case cfg.MaxMemoryLimit < 0 || cfg.MaxUploadBytes < 0 || cfg.FileLifetime < 0:
		return nil, errors.New("api: MaxMemoryLimit, MaxUploadBytes and FileLifetime must not be negative")
	}
	f, err := newFetcher(cfg, st)
	if err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, st: st, log: log, fetcher: f}, nil
}

// NewFetcher returns the file fetcher for cfg's files source — the store
// (local), the upstream's Files API (upstream), or nil (off) — so that the
// containers of /v1/responses resolve file_ids exactly as the API does.
func NewFetcher(cfg Config, st store.Store) (FileFetcher, error) {
	if cfg.FilesSource == "" {
		cfg.FilesSource = FilesLocal
	}
	if len(cfg.AuthHeaders) == 0 {
		cfg.AuthHeaders = store.DefaultAuthHeaders()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return newFetcher(cfg, st)
}

// newFetcher is NewFetcher for a cfg with defaults applied.
func newFetcher(cfg Config, st store.Store) (FileFetcher, error) {
	switch cfg.FilesSource {
	case FilesLocal:
		if cfg.Fetcher != nil {
			return cfg.Fetcher, nil
		}
		return StoreFetcher{Store: st, AuthHeaders: cfg.AuthHeaders, Now: cfg.Now}, nil
	case FilesUpstream:
		if cfg.Fetcher != nil {
			return cfg.Fetcher, nil
		}
		return NewHTTPFetcher(cfg.FilesUpstreamURL, cfg.AuthHeaders, cfg.MaxUploadBytes, nil)
	case FilesOff:
		return nil, nil
	}
	return nil, fmt.Errorf("api: FilesSource %q is not one of local, upstream, off", cfg.FilesSource)
}

// Fetcher returns the file fetcher the server uses for file ids (nil with
// FilesOff), so the interceptor can resolve file_ids the same way.
func (s *Server) Fetcher() FileFetcher { return s.fetcher }

// route is one endpoint: the path's shape and the handlers by method.
type handler func(w http.ResponseWriter, r *http.Request, owner string, ids []string)

// ServeHTTP routes a request. The path segments after /v1/ select the
// endpoint; ids are the variable segments in order.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	seg, ok := splitPath(r.URL.Path)
	if !ok {
		s.invalidURL(w, r)
		return
	}
	var methods map[string]handler
	var ids []string
	switch {
	case len(seg) == 1 && seg[0] == "containers":
		methods = map[string]handler{http.MethodGet: s.listContainers, http.MethodPost: s.createContainer}
	case len(seg) == 2 && seg[0] == "containers":
		methods = map[string]handler{http.MethodGet: s.getContainer, http.MethodDelete: s.deleteContainer}
	case len(seg) == 3 && seg[0] == "containers" && seg[2] == "files":
		methods = map[string]handler{http.MethodGet: s.listContainerFiles, http.MethodPost: s.createContainerFile}
	case len(seg) == 4 && seg[0] == "containers" && seg[2] == "files":
		methods = map[string]handler{http.MethodGet: s.getContainerFile, http.MethodDelete: s.deleteContainerFile}
	case len(seg) == 5 && seg[0] == "containers" && seg[2] == "files" && seg[4] == "content":
		methods = map[string]handler{http.MethodGet: s.containerFileContent}
	case seg[0] == "responses" && s.cfg.Responses != nil && len(seg) == 2:
		methods = map[string]handler{http.MethodGet: s.getResponse, http.MethodDelete: s.deleteResponse}
	case seg[0] == "responses" && s.cfg.Responses != nil && len(seg) == 3 && seg[2] == "input_items":
		methods = map[string]handler{http.MethodGet: s.listInputItems}
	case seg[0] == "conversations" && s.cfg.Conversations != nil && len(seg) == 1:
		methods = map[string]handler{http.MethodPost: s.createConversation}
	case seg[0] == "conversations" && s.cfg.Conversations != nil && len(seg) == 2:
		methods = map[string]handler{http.MethodGet: s.getConversation, http.MethodPost: s.updateConversation, http.MethodDelete: s.deleteConversation}
	case seg[0] == "conversations" && s.cfg.Conversations != nil && len(seg) == 3 && seg[2] == "items":
		methods = map[string]handler{http.MethodGet: s.listItems, http.MethodPost: s.createItems}
	case seg[0] == "conversations" && s.cfg.Conversations != nil && len(seg) == 4 && seg[2] == "items":
		methods = map[string]handler{http.MethodGet: s.getItem, http.MethodDelete: s.deleteItem}
	case seg[0] == "responses" && s.cfg.Responses != nil && s.cfg.ResponsesUpstreamURL != "":
		// Any other path below /v1/responses is the model server's.
		s.passResponses(w, r)
		return
	case seg[0] == "files" && len(seg) <= 3 && (len(seg) < 3 || seg[2] == "content"):
		if s.cfg.FilesSource != FilesLocal {
			s.filesUnavailable(w)
			return
		}
		switch len(seg) {
		case 1:
			methods = map[string]handler{http.MethodGet: s.listFiles, http.MethodPost: s.createFile}
		case 2:
			methods = map[string]handler{http.MethodGet: s.getFile, http.MethodDelete: s.deleteFile}
		case 3:
			methods = map[string]handler{http.MethodGet: s.fileContent}
		}
	default:
		s.invalidURL(w, r)
		return
	}
	if len(seg) >= 2 {
		ids = append(ids, seg[1])
	}
	if len(seg) >= 4 && (seg[0] == "containers" || seg[0] == "conversations") {
		ids = append(ids, seg[3])
	}
	h, ok := methods[r.Method]
	if !ok && seg[0] == "responses" && s.cfg.ResponsesUpstreamURL != "" {
		s.passResponses(w, r)
		return
	}
	if !ok {
		allow := make([]string, 0, len(methods))
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
			if methods[m] != nil {
				allow = append(allow, m)
			}
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(w, &apierror.Error{Status: http.StatusMethodNotAllowed, Type: apierror.TypeInvalidRequest, Code: "method_not_allowed",
			Message: fmt.Sprintf("Method %s is not allowed on %s; use %s.", r.Method, r.URL.Path, strings.Join(allow, " or "))})
		return
	}
	owner, ok := store.Owner(r.Header, s.cfg.AuthHeaders)
	if !ok && s.cfg.Anonymous != AnonymousShared {
		writeError(w, apierror.NoCredential())
		return
	}
	h(w, r, owner, ids)
}

// splitPath returns the segments after /v1/, none empty.
func splitPath(p string) ([]string, bool) {
	rest, ok := strings.CutPrefix(p, "/v1/")
	if !ok || rest == "" {
		return nil, false
	}
	seg := strings.Split(rest, "/")
	for _, s := range seg {
		if s == "" {
			return nil, false
		}
	}
	return seg, true
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

func (s *Server) now() time.Time { return s.cfg.Now() }
