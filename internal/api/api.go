package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/memlimit"
	"github.com/codeinterp/codeinterp/internal/netpolicy"
	"github.com/codeinterp/codeinterp/internal/store"
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
	// Network is what a container's network_policy may ask of this server
	// (the sandbox provider and the egress proxy's bound); its zero value
	// refuses every policy but {"type": "disabled"}, saying why.
	Network netpolicy.Gate
	// Secrets holds the domain secrets of containers made with them, in
	// the server's memory only (containers.Manager); nil: a policy with
	// domain_secrets is refused.
	Secrets SecretKeeper
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
	// Background, with Responses, serves background responses: their
	// resumable streams (GET /v1/responses/{id}?stream=true) and
	// POST /v1/responses/{id}/cancel. CancelLocal, when set, stops a run
	// this replica drives at once (others stop at their next poll).
	Background  store.Background
	CancelLocal func(owner, id string)
	// MaxResumedStreams and MaxResumedStreamsPerOwner bound the resumed
	// streams this replica serves at once, in all and per credential
	// (each waits on the store): past them a 429. Defaults:
	// store.BackgroundReaders and DefaultResumedStreamsPerOwner.
	MaxResumedStreams, MaxResumedStreamsPerOwner int
	ForwardHeaders                               []string
	UpstreamHeaders                              map[string]string // added after the forwarded ones, as on follow-ups
	HTTPClient                                   *http.Client
	// Conversations, when set, serves OpenAI's Conversations API
	// (/v1/conversations…).
	Conversations store.Conversations
	// Skills, when set, serves OpenAI's Skills API (/v1/skills…) and lets
	// POST /v1/containers mount skills (skills).
	Skills store.Skills
	// Usage, when set, serves the caller's own usage:
	// GET /v1/organization/usage/code_interpreter_sessions.
	Usage store.Usage
}

// SecretKeeper holds containers' domain secrets for their life, outside
// the store (containers.Manager implements it).
type SecretKeeper interface {
	KeepSecrets(owner, containerID string, secrets []egress.Secret)
	// Deleted is told of a container its owner deleted (from the store,
	// already): its interpreter — on whichever replica holds it — its
	// secrets and its checkpoint go at once.
	Deleted(ctx context.Context, owner, containerID string)
}

// Server is the HTTP handler of the Containers and Files APIs.
type Server struct {
	cfg     Config
	st      store.Store
	log     *zap.Logger
	fetcher FileFetcher    // nil when file ids are not available (FilesOff)
	mux     *http.ServeMux // the endpoints cfg enables (routes.go)
	streams streamSlots    // the resumed streams being served
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
	if cfg.MaxResumedStreams <= 0 {
		cfg.MaxResumedStreams = store.BackgroundReaders
	}
	if cfg.MaxResumedStreamsPerOwner <= 0 {
		cfg.MaxResumedStreamsPerOwner = DefaultResumedStreamsPerOwner
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
	s := &Server{cfg: cfg, st: st, log: log, fetcher: f, streams: streamSlots{perOwner: map[string]int{}}}
	s.mux = s.routes()
	return s, nil
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

func (s *Server) now() time.Time { return s.cfg.Now() }
