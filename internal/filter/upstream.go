package filter

import (
	"go.opentelemetry.io/otel/trace"

	"github.com/codeinterp/codeinterp/internal/telemetry"

	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// UpstreamConfig says where follow-up inference goes. The URL comes from
// the operator only; nothing in a client request can change it.
type UpstreamConfig struct {
	// URL is the absolute http(s) URL follow-ups are POSTed to, typically
	// Envoy's internal listener without the ext_proc filter.
	URL string
	// ForwardHeaders are client request headers copied onto follow-ups.
	ForwardHeaders []string
	// Headers are static headers set on every follow-up (they win over
	// forwarded ones).
	Headers map[string]string
	// Timeout bounds one follow-up call; zero means no bound beyond the
	// stream's own life.
	Timeout time.Duration
	// Client is the HTTP client; nil means a dedicated client with pooled
	// connections.
	Client *http.Client
}

// DefaultForwardHeaders are copied onto follow-ups unless configured
// otherwise: what OpenAI-compatible servers use for auth and accounting.
func DefaultForwardHeaders() []string {
	return []string{"authorization", "api-key", "openai-organization", "openai-project"}
}

func (c UpstreamConfig) validate() error {
	u, err := url.Parse(c.URL)
	if err != nil {
		return fmt.Errorf("upstream url: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("upstream url %q: must be an absolute http(s) URL", c.URL)
	}
	if c.Timeout < 0 {
		return errors.New("upstream timeout: must not be negative")
	}
	return nil
}

// httpUpstream is the interceptor.Upstream of one exchange: the operator's
// URL plus that client's forwarded headers.
type httpUpstream struct {
	client  *http.Client
	url     string
	header  http.Header
	timeout time.Duration
	maxBody int64
	rounds  int // follow-ups sent, for the log line

	tel    *telemetry.Telemetry
	tracer trace.Tracer
	host   string
}

// errUpstreamTooLarge is returned (as a transport failure) when a follow-up
// answer exceeds the body limit; the interceptor turns it into a 502.
var errUpstreamTooLarge = errors.New("upstream response exceeds the body limit")

func (u *httpUpstream) CreateResponse(ctx context.Context, body []byte) (status int, _ http.Header, data []byte, err error) {
	resp, cancel, span, err := u.send(ctx, body, "application/json")
	defer func() { endChat(span, status, data, err) }()
	if err != nil {
		return 0, nil, nil, err
	}
	defer cancel()
	defer resp.Body.Close()
	data, err = io.ReadAll(io.LimitReader(resp.Body, u.maxBody+1))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("follow-up to %s: reading the answer: %w", u.url, err)
	}
	if int64(len(data)) > u.maxBody {
		return 0, nil, nil, fmt.Errorf("follow-up to %s: %w (%d bytes)", u.url, errUpstreamTooLarge, u.maxBody)
	}
	return resp.StatusCode, resp.Header, data, nil
}

// send posts one follow-up, accepting accept. The timeout, if any, bounds
// the whole exchange: the caller calls cancel once done with the body.
// The round's chat span (nil when tracing is off) is the caller's to end.
func (u *httpUpstream) send(ctx context.Context, body []byte, accept string) (*http.Response, context.CancelFunc, trace.Span, error) {
	u.rounds++
	h := u.header.Clone()
	ctx, span := u.chatSpan(ctx, body, h)
	cancel := context.CancelFunc(func() {})
	if u.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, u.timeout)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.url, bytes.NewReader(body))
	if err != nil {
		cancel()
		return nil, nil, span, fmt.Errorf("follow-up request: %w", err)
	}
	req.Header = h
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", accept)
	resp, err := u.client.Do(req)
	if err != nil {
		cancel()
		return nil, nil, span, fmt.Errorf("follow-up to %s: %w", u.url, err)
	}
	return resp, cancel, span, nil
}

// followUpHeaders picks the configured headers out of the client's request
// headers and adds the static ones.
func followUpHeaders(client http.Header, forward []string, static map[string]string, requestID string) http.Header {
	h := http.Header{}
	for _, name := range forward {
		if vs := client.Values(name); len(vs) > 0 {
			h[http.CanonicalHeaderKey(name)] = append([]string(nil), vs...)
		}
	}
	for k, v := range static {
		h.Set(k, v)
	}
	if requestID != "" {
		h.Set("X-Request-Id", requestID)
	}
	return h
}

// isInternalHeader reports headers clients may not send: they are ours.
func isInternalHeader(key string) bool { return strings.HasPrefix(key, "x-codeinterp-") }

// CreateResponseStream is a follow-up of a live stream: the body asks for
// "stream": true and the answer is returned as it arrives. The timeout, if
// any, bounds the whole answer, so it ends when the body is closed; the
// body yields at most maxBody bytes, then an error.
func (u *httpUpstream) CreateResponseStream(ctx context.Context, body []byte) (int, http.Header, io.ReadCloser, error) {
	resp, cancel, span, err := u.send(ctx, body, "text/event-stream")
	if err != nil {
		endChat(span, 0, nil, err)
		return 0, nil, nil, err
	}
	var rc io.ReadCloser = &limitedBody{r: resp.Body, left: u.maxBody, cancel: cancel, what: u.url}
	if span != nil {
		rc = &tracedBody{ReadCloser: rc, span: span, status: resp.StatusCode}
	}
	return resp.StatusCode, resp.Header, rc, nil
}

// limitedBody bounds a streamed answer and releases its context on Close.
type limitedBody struct {
	r      io.ReadCloser
	left   int64
	cancel context.CancelFunc
	what   string
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// At the limit: an answer that ends here is whole, one more byte is too many.
		var one [1]byte
		if n, err := b.r.Read(one[:]); n == 0 && err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("follow-up to %s: %w", b.what, errUpstreamTooLarge)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error {
	err := b.r.Close()
	b.cancel()
	return err
}
