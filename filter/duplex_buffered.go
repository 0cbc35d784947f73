package filter

import (
	"context"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// bufferedResponse is an intercepted non-streaming exchange in duplex
// mode: the chunks are collected (the headers answer withheld, §6.3), the
// buffered loop runs over the whole body, and its answer goes out as the
// headers answer plus chunks. No message timer runs meanwhile (§6.1); the
// stream idle timeout does.
type bufferedResponse struct {
	st   *streamState
	out  *duplexOut
	pass *echoResponse // the upstream answered non-2xx: its answer passes
	buf  []byte
	done bool // an answer (or a refusal) was sent
}

func (b *bufferedResponse) headers(ctx context.Context, h *extprocv3.HttpHeaders) error {
	code, hdr := parseResponseHeaders(h)
	if code < 200 || code > 299 {
		b.st.upstreamFailed(code)
		b.pass = &echoResponse{out: b.out}
		return b.pass.headers(ctx, h)
	}
	if h.GetEndOfStream() {
		return b.refuse(b.st.noUpstreamBody())
	}
	b.st.upstreamCode, b.st.upstreamHdr = code, hdr
	return nil
}

func (b *bufferedResponse) body(ctx context.Context, m *extprocv3.HttpBody) error {
	if b.pass != nil {
		return b.pass.body(ctx, m)
	}
	if b.done {
		return nil
	}
	if int64(len(b.buf)+len(m.GetBody())) > b.st.s.cfg.MaxBodyBytes {
		return b.refuse(b.st.upstreamTooLarge())
	}
	b.buf = append(b.buf, m.GetBody()...)
	if m.GetEndOfStream() {
		return b.finish(ctx, false)
	}
	return nil
}

func (b *bufferedResponse) trailers(ctx context.Context, t *extprocv3.HttpTrailers) error {
	if b.pass != nil {
		return b.pass.trailers(ctx, t)
	}
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

func (b *bufferedResponse) refuse(rs []*extprocv3.ProcessingResponse, _ error) error {
	b.done = true
	return b.out.sendAll(rs)
}

func (b *bufferedResponse) close() {}
