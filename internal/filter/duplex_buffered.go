package filter

import (
	"context"
	"net/http"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// bufferedResponse is an intercepted non-streaming exchange in duplex
// mode: the chunks are collected (the headers answer withheld, which
// Envoy allows until the whole body is in), the buffered loop runs over
// the whole body, and its answer goes out as the headers answer plus
// chunks. No message timer runs meanwhile (none does in this mode); the
// stream idle timeout does.
type bufferedResponse struct {
	st   *streamState
	out  *duplexOut
	buf  []byte
	done bool // an answer (or a refusal) was sent
}

func (b *bufferedResponse) headers(_ context.Context, code int, hdr http.Header) error {
	b.st.upstreamCode, b.st.upstreamHdr = code, hdr
	return nil
}

func (b *bufferedResponse) body(ctx context.Context, m *extprocv3.HttpBody) error {
	if b.done {
		return nil
	}
	if int64(len(b.buf)+len(m.GetBody())) > b.st.s.cfg.MaxBodyBytes {
		b.done = true
		rs, _ := b.st.upstreamTooLarge()
		return b.out.sendAll(rs)
	}
	b.buf = append(b.buf, m.GetBody()...)
	if m.GetEndOfStream() {
		return b.finish(ctx, false)
	}
	return nil
}

func (b *bufferedResponse) trailers(ctx context.Context, _ *extprocv3.HttpTrailers) error {
	if b.done {
		return nil
	}
	return b.finish(ctx, true)
}

func (b *bufferedResponse) finish(ctx context.Context, withTrailers bool) error {
	b.done = true
	res, refusal, err := b.st.completeBuffered(ctx, b.buf, nil)
	b.buf = nil
	if err != nil {
		return err
	}
	if refusal != nil {
		return b.out.sendAll(refusal)
	}
	if err := b.out.headers(b.st.resultHeaders(res)); err != nil {
		return err
	}
	if err := b.out.chunks(res.Body, !withTrailers); err != nil {
		return err
	}
	if withTrailers {
		return b.out.trailers()
	}
	return nil
}

func (b *bufferedResponse) close() {}
