package devproxy

import (
	"context"
	"errors"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.uber.org/zap"
)

// This file applies the ext_proc server's answers to the request or
// response being proxied: header and body mutations, and an immediate
// response.

// headersOutcome is what a headers response asks for beyond mutations.
type headersOutcome struct {
	replaced bool   // CONTINUE_AND_REPLACE supplied the body
	body     []byte // that body
	stopBody bool   // CONTINUE_AND_REPLACE: no more body messages this direction
}

func (ex *exchange) applyHeadersResponse(h *headerMap, cr *extprocv3.CommonResponse, clDrop bool) (headersOutcome, bool) {
	var out headersOutcome
	if cr == nil {
		return out, true
	}
	car := cr.GetStatus() == extprocv3.CommonResponse_CONTINUE_AND_REPLACE
	res, err := applyMutation(h, cr.GetHeaderMutation(), ex.p.cfg.DisallowIsError, clDrop, car)
	ex.p.rejected.Add(int64(res.rejected))
	if err != nil {
		ex.mutationFailed(err)
		return out, false
	}
	ex.clearRouteCache(h, cr)
	if !car {
		return out, true // a body_mutation outside CONTINUE_AND_REPLACE is ignored here
	}
	out.stopBody = true
	if bm := cr.GetBodyMutation(); bm != nil {
		switch m := bm.GetMutation().(type) {
		case *extprocv3.BodyMutation_Body:
			out.replaced, out.body = true, m.Body
		case *extprocv3.BodyMutation_ClearBody:
			out.replaced = m.ClearBody
		case *extprocv3.BodyMutation_StreamedResponse:
			// Valid only in FULL_DUPLEX_STREAMED; spurious here.
			_, ok := ex.failure(context.Background(), ex.p.cfg.StatusOnError, "spurious_message")
			return headersOutcome{}, ok
		}
		if out.replaced {
			h.del("content-length") // CONTINUE_AND_REPLACE: Envoy removes it and frames the new body itself
		}
	}
	return out, true
}

// applyBodyResponse applies a BUFFERED body response: header_mutation only
// while the headers are held, then the body mutation; a held
// content-length must equal the new body's length (clear_body counts as
// 0), or it is a fail-closed error.
func (ex *exchange) applyBodyResponse(h *headerMap, body []byte, cr *extprocv3.CommonResponse, held, clDrop bool) ([]byte, bool) {
	if cr == nil {
		return body, true
	}
	if held {
		res, err := applyMutation(h, cr.GetHeaderMutation(), ex.p.cfg.DisallowIsError, clDrop, false)
		ex.p.rejected.Add(int64(res.rejected))
		if err != nil {
			ex.mutationFailed(err)
			return nil, false
		}
		ex.clearRouteCache(h, cr)
	}
	bm := cr.GetBodyMutation()
	if bm == nil {
		return body, true
	}
	switch m := bm.GetMutation().(type) {
	case *extprocv3.BodyMutation_Body:
		body = m.Body
	case *extprocv3.BodyMutation_ClearBody:
		if !m.ClearBody {
			return body, true
		}
		body = nil
	case *extprocv3.BodyMutation_StreamedResponse:
		// Valid only in FULL_DUPLEX_STREAMED; spurious here.
		_, ok := ex.failure(context.Background(), ex.p.cfg.StatusOnError, "spurious_message")
		return body, ok
	default:
		return body, true
	}
	if cl, ok := h.get("content-length"); ok {
		n, err := strconv.ParseInt(strings.TrimSpace(cl), 10, 64)
		if err != nil || n != int64(len(body)) {
			ex.complete = true
			ex.closeStream()
			ex.localReply(ex.p.cfg.StatusOnError, "", "mismatch_between_content_length_and_the_length_of_the_mutated_body")
			return nil, false
		}
	}
	return body, true
}

func (ex *exchange) mutationFailed(err error) {
	details := "header_mutation_set_headers_failed"
	var me *mutationError
	if errors.As(err, &me) {
		details = me.details
	}
	ex.p.log.Info("header mutation failed", zap.Error(err))
	ex.complete = true
	ex.closeStream()
	ex.localReply(ex.p.cfg.StatusOnError, "", details)
}

// immediate sends an ImmediateResponse to the client: a status below 200
// becomes 200, its headers obey the filter's mutation_rules, a non-empty
// body gets content-length and a default text/plain content-type.
func (ex *exchange) immediate(ir *extprocv3.ImmediateResponse) {
	ex.complete = true
	ex.closeStream()
	st := int(ir.GetStatus().GetCode())
	if st < 200 {
		st = 200
	}
	h := &headerMap{}
	if mut := ir.GetHeaders(); mut != nil {
		// Disallowed edits are dropped; an invalid one stops the rest,
		// but the reply still goes out.
		for _, o := range mut.GetSetHeaders() {
			res, err := applyMutation(h, &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{o}}, false, false, false)
			ex.p.rejected.Add(int64(res.rejected))
			if err != nil {
				break
			}
		}
	}
	ex.reply(st, h, ir.GetBody(), ir.GetDetails())
}

// clearRouteCache picks the route anew from the (mutated) :path when a
// response that carries a header_mutation asks for it, as Envoy does for
// a downstream filter with the default route_cache_action: the request
// then goes to that route's cluster. The ext_proc filter, already
// running, goes on processing the stream (its per-route configuration was
// read when the stream began).
func (ex *exchange) clearRouteCache(h *headerMap, cr *extprocv3.CommonResponse) {
	if !cr.GetClearRouteCache() || cr.GetHeaderMutation() == nil {
		return
	}
	p, _ := h.get(":path")
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	ex.cluster = ex.p.route(p).Cluster
}
