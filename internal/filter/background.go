package filter

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/processor"
)

// startBackground hands a "background": true exchange to the runner,
// which makes the first inference itself (through this stream's follow-up
// upstream, with the caller's forwarded headers), so that nothing of it
// depends on this stream. The client is answered at once:
//
//   - without "stream": an immediate_response with the queued Response;
//   - with "stream": the request becomes a resumption of the response's
//     event stream — :path /v1/responses/{id}?stream=true, no body — and
//     clear_route_cache makes Envoy route it anew, to the Responses API
//     (any replica serves it from the shared event log). Its answer is let
//     go (or echoed in duplex): the API streams the events as they come.
func (st *streamState) startBackground(ctx context.Context, caller processor.Caller, ex processor.Backgrounded, rsv processor.Reservation) ([]*extprocv3.ProcessingResponse, error) {
	if st.s.cfg.Background == nil || rsv == nil {
		ex.Close()
		st.outcome = OutcomeRejected
		return st.immediate(apierror.Invalid("background", "unsupported_parameter", "Background mode is not available on this server."))
	}
	stream := ex.ClientStream()
	id := ex.ResponseID()
	queued, err := st.s.cfg.Background.Start(ctx, caller, ex, st.newUpstream(), rsv)
	if err != nil {
		return st.refuse(err)
	}
	st.outcome = OutcomeBackground
	st.log.Info("background response started", zap.String("response_id", id), zap.Bool("stream", stream))
	if !stream {
		st.phase = phaseClosed
		return one(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
			ImmediateResponse: &extprocv3.ImmediateResponse{
				Status: &typev3.HttpStatus{Code: typev3.StatusCode_OK},
				Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
					setHeader("content-type", "application/json"),
				}},
				Body:    queued,
				Details: "codeinterp_background",
			},
		}})
	}
	path := "/v1/responses/" + url.PathEscape(id) + "?stream=true"
	resp := &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
		HeaderMutation: &extprocv3.HeaderMutation{
			SetHeaders: []*corev3.HeaderValueOption{
				setHeader(":path", path),
				setHeader("content-length", strconv.Itoa(0)),
			},
			RemoveHeaders: []string{"content-type"},
		},
		BodyMutation:    &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_ClearBody{ClearBody: true}},
		ClearRouteCache: true,
	}}
	st.phase = phaseResponseHeaders // let go (or echoed in duplex)
	if st.duplex {
		st.handler = st.newResponseHandler(nil)
	}
	return one(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: resp}})
}

// refuse answers a request refused before it went upstream — by the
// processor (its exchange) or the background runner — with its OpenAI
// error, or a 500 for an error that is not one.
func (st *streamState) refuse(err error) ([]*extprocv3.ProcessingResponse, error) {
	var apiErr *apierror.Error
	if !errors.As(err, &apiErr) {
		st.log.Error("request failed before going upstream", zap.Error(err))
		apiErr = apierror.Server(http.StatusInternalServerError, "", "The request could not be processed.")
	}
	st.outcome = OutcomeRejected
	if apiErr.Status >= 500 {
		st.outcome = OutcomeError
	}
	st.log.Info("request refused", zap.Int("status", apiErr.Status), zap.String("param", apiErr.Param), zap.String("message", apiErr.Message))
	return st.immediate(apiErr)
}
