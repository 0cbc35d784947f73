package filter

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/apierror"
)

// liveResponse is an intercepted stream, live: the headers answer goes out
// at once, the upstream's chunks feed the interceptor's live stream as they
// arrive (a pipe read by StreamResponse in a goroutine), and every event it
// writes leaves as a streamed_response chunk. The body ends (end_of_stream,
// or a TrailersResponse when Envoy sent trailers) once both the live stream
// is over and Envoy's own end has arrived: Envoy wants the answer's
// end_of_stream only after it has sent its own.
type liveResponse struct {
	st  *streamState
	out *duplexOut

	pw     *io.PipeWriter
	cancel context.CancelFunc
	done   chan struct{} // closed when the live stream's goroutine ends

	mu          sync.Mutex
	runOver     bool // StreamResponse returned
	envoyOver   bool // Envoy's end of the body arrived
	endTrailers bool // ... as trailers
	ended       bool // the closing chunk (or trailers answer) was sent
}

// errLiveOver is what body writes get after the live stream stopped
// reading: the rest of the upstream's first answer is not needed.
var errLiveOver = errors.New("the live stream is over")

func (l *liveResponse) headers(ctx context.Context, code int, hdr http.Header) error {
	st := l.st
	gz := false
	switch enc := strings.ToLower(strings.TrimSpace(hdr.Get("content-encoding"))); enc {
	case "", "identity":
	case "gzip", "x-gzip":
		gz = true // some servers compress even unasked
	default:
		st.outcome = OutcomeUpstreamError
		st.log.Error("upstream stream unreadable", zap.String("content_encoding", enc))
		rs, _ := st.immediate(&apierror.Error{Status: http.StatusBadGateway, Type: apierror.TypeServer,
			Message: "The upstream response could not be decoded."})
		return l.out.sendAll(rs)
	}
	status, chdr := st.ex.StreamHead(code, hdr)
	mut := &extprocv3.HeaderMutation{
		RemoveHeaders: []string{"content-length", "content-encoding", "etag"},
		SetHeaders:    []*corev3.HeaderValueOption{setHeader("content-type", chdr.Get("Content-Type"))},
	}
	if status != code {
		mut.SetHeaders = append(mut.SetHeaders, setHeader(":status", strconv.Itoa(status)))
	}
	if err := l.out.headers(mut); err != nil {
		return err
	}
	st.upstream = st.newUpstream()
	pr, pw := io.Pipe()
	rctx, cancel := context.WithCancel(ctx)
	l.pw, l.cancel, l.done = pw, cancel, make(chan struct{})
	go l.run(rctx, pr, code, hdr, gz)
	return nil
}

// run is the live stream's goroutine.
func (l *liveResponse) run(ctx context.Context, pr *io.PipeReader, code int, hdr http.Header, gz bool) {
	defer close(l.done)
	st := l.st
	var body io.ReadCloser = pr
	if gz {
		body = &gzipBody{src: pr}
	}
	err := st.ex.StreamResponse(ctx, st.upstream, code, hdr, body, chunkWriter{l.out})
	_ = pr.CloseWithError(errLiveOver)
	switch {
	case err == nil:
		st.outcome = OutcomeCompleted
	case ctx.Err() != nil:
		st.outcome = OutcomeCancelled
		st.log.Info("live stream abandoned: the stream ended during the loop", zap.Error(err), zap.Int("follow_ups_sent", st.upstream.rounds))
	default:
		st.outcome = OutcomeError
		st.log.Error("live stream failed", zap.Error(err))
	}
	l.mu.Lock()
	l.runOver = true
	l.mu.Unlock()
	if err == nil {
		l.end()
	}
}

func (l *liveResponse) body(ctx context.Context, b *extprocv3.HttpBody) error {
	if l.pw == nil {
		return nil // refused at the headers
	}
	if len(b.GetBody()) > 0 {
		// Blocks until the live stream has read it (back pressure on
		// Envoy); after the stream stopped reading, the rest is dropped.
		_, _ = l.pw.Write(b.GetBody())
	}
	if b.GetEndOfStream() {
		return l.envoyEnded(false)
	}
	return nil
}

func (l *liveResponse) trailers(ctx context.Context, t *extprocv3.HttpTrailers) error {
	if l.pw == nil {
		return nil
	}
	return l.envoyEnded(true)
}

func (l *liveResponse) envoyEnded(withTrailers bool) error {
	_ = l.pw.Close() // the live stream reads EOF after what it has
	l.mu.Lock()
	l.envoyOver, l.endTrailers = true, withTrailers
	l.mu.Unlock()
	return l.end()
}

// end sends the closing chunk once both ends are there.
func (l *liveResponse) end() error {
	l.mu.Lock()
	if !l.runOver || !l.envoyOver || l.ended {
		l.mu.Unlock()
		return nil
	}
	l.ended = true
	withTrailers := l.endTrailers
	l.mu.Unlock()
	if withTrailers {
		return l.out.trailers()
	}
	return l.out.chunks(nil, true)
}

func (l *liveResponse) close() {
	if l.done == nil {
		return
	}
	l.cancel()
	_ = l.pw.CloseWithError(context.Canceled)
	<-l.done
}

// gzipBody decodes a compressed upstream stream as it arrives. The gzip
// header is read on the first Read, so a broken one is a read error the
// live stream reports to the client like any stream that breaks off.
type gzipBody struct {
	src io.ReadCloser
	zr  *gzip.Reader
}

func (g *gzipBody) Read(p []byte) (int, error) {
	if g.zr == nil {
		zr, err := gzip.NewReader(g.src)
		if err != nil {
			return 0, fmt.Errorf("gzip: %w", err)
		}
		g.zr = zr
	}
	return g.zr.Read(p)
}

func (g *gzipBody) Close() error { return g.src.Close() }
