package devproxy

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// This file writes what the client gets: a local reply, or the
// upstream's response buffered or streamed.

// localReply is Envoy's sendLocalReply with a plain-text body.
func (ex *exchange) localReply(st int, body, details string) {
	ex.complete = true
	ex.closeStream()
	ex.reply(st, &headerMap{}, []byte(body), details)
}

func (ex *exchange) reply(st int, h *headerMap, body []byte, details string) {
	details = strings.Join(strings.Fields(details), "_")
	ex.p.log.Info("local reply", zap.Int("status", st), zap.String("details", details),
		zap.String("path", ex.r.URL.Path))
	if ex.p.cfg.OnLocalReply != nil {
		ex.p.cfg.OnLocalReply(st, details)
	}
	if ex.started {
		// The client already has headers; all Envoy can do is reset.
		panic(http.ErrAbortHandler)
	}
	h.del("content-length")
	if len(body) > 0 {
		h.set("content-length", strconv.Itoa(len(body)))
		if _, ok := h.get("content-type"); !ok {
			h.set("content-type", "text/plain")
		}
	} else {
		h.del("content-type")
	}
	h.del(":status")
	h.h = append([]header{{":status", strconv.Itoa(st)}}, h.h...)
	if ex.r.Method == http.MethodHead {
		body = nil
	}
	ex.writeBuffered(h, body, nil)
}

func (ex *exchange) writeHead(h *headerMap, trailer http.Header) {
	st, err := strconv.Atoi(func() string { v, _ := h.get(":status"); return v }())
	if err != nil || st < 100 || st > 999 {
		st = http.StatusBadGateway
	}
	dst := ex.w.Header()
	for k, vs := range h.httpHeader() {
		dst[k] = vs
	}
	for k := range trailer {
		dst.Add("Trailer", k)
	}
	ex.w.WriteHeader(st)
	ex.started = true
}

func (ex *exchange) writeBuffered(h *headerMap, body []byte, trailer http.Header) {
	ex.writeHead(h, trailer)
	if len(body) > 0 {
		_, _ = ex.w.Write(body)
	}
	for k, vs := range trailer {
		ex.w.Header()[k] = vs
	}
}

// writeStreamed passes an unprocessed body through, flushing each chunk so
// server-sent events reach the client as they arrive.
func (ex *exchange) writeStreamed(ctx context.Context, h *headerMap, resp *http.Response) {
	ex.writeHead(h, nil)
	rc := http.NewResponseController(ex.w)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := ex.w.Write(buf[:n]); werr != nil {
				return
			}
			_ = rc.Flush()
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			if contextDone(ctx) {
				return
			}
			panic(http.ErrAbortHandler) // upstream reset mid-body: reset the client too
		}
	}
	for k, vs := range realTrailers(resp.Trailer) {
		ex.w.Header()[http.TrailerPrefix+k] = vs
	}
}

// readLimited reads all of r, reporting over=true as soon as more than
// limit bytes arrive.
func readLimited(r io.Reader, limit int64) (data []byte, over bool, err error) {
	data, err = io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, false, err
	}
	if int64(len(data)) > limit {
		return nil, true, nil
	}
	return data, false, nil
}
