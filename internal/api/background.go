package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/tidwall/gjson"
	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/codeinterp/codeinterp/internal/store"
)

// This file serves background responses (Config.Background): a stream
// resumed from any event (GET /v1/responses/{id}?stream=true
// &starting_after=N, and the POST the filter turns a background
// "stream": true request into), POST /v1/responses/{id}/cancel, and the
// status of a run whose server died (a record left queued or in_progress
// whose run no longer renews is shown, and kept, failed).

// keepAliveEvery is how long a resumed stream may be silent before a
// comment line keeps proxies from timing it out; it is also how long one
// store read waits (store.BackgroundWait bounds it further).
const keepAliveEvery = store.BackgroundWait

// DefaultResumedStreamsPerOwner is Config.MaxResumedStreamsPerOwner's
// default.
const DefaultResumedStreamsPerOwner = 16

// streamSlots counts the resumed streams being served, in all and per
// owner.
type streamSlots struct {
	mu       sync.Mutex
	total    int
	perOwner map[string]int
}

// takeStream admits one more resumed stream of owner: nil and the release,
// or the 429 to answer.
func (s *Server) takeStream(owner string) (release func(), refused *apierror.Error) {
	sl := &s.streams
	sl.mu.Lock()
	defer sl.mu.Unlock()
	switch {
	case sl.perOwner[owner] >= s.cfg.MaxResumedStreamsPerOwner:
		return nil, tooManyStreams(fmt.Sprintf("at most %d per API key", s.cfg.MaxResumedStreamsPerOwner))
	case sl.total >= s.cfg.MaxResumedStreams:
		return nil, tooManyStreams("this server is serving as many as it can")
	}
	sl.total++
	sl.perOwner[owner]++
	var once sync.Once
	return func() {
		once.Do(func() {
			sl.mu.Lock()
			defer sl.mu.Unlock()
			sl.total--
			if sl.perOwner[owner]--; sl.perOwner[owner] <= 0 {
				delete(sl.perOwner, owner)
			}
		})
	}, nil
}

func tooManyStreams(why string) *apierror.Error {
	return &apierror.Error{Status: http.StatusTooManyRequests, Type: "rate_limit_exceeded", Code: "rate_limit_exceeded",
		Message: "Too many resumed streams open: " + why + ". Close one, or retry later."}
}

// cancelWait bounds how long a cancel waits for the run to store its end.
const cancelWait = 5 * time.Second

// settled is rec with a dead run's record marked failed (and kept so).
func (s *Server) settled(ctx context.Context, owner string, rec store.Response) store.Response {
	if s.cfg.Background == nil || !store.Unfinished(rec.Object) || gjson.GetBytes(rec.Object, "background").Type != gjson.True {
		return rec
	}
	running, err := s.cfg.Background.Running(ctx, owner, rec.ID)
	if err != nil || running {
		return rec
	}
	// The run's end is stored before it ends; a run that is not running
	// and left no end was on a server that died.
	if again, err := s.cfg.Responses.GetResponse(ctx, owner, rec.ID); err == nil && !store.Unfinished(again.Object) {
		return again
	}
	// Failed, unless its runner (or a cancel) settled its end first.
	if won, err := s.cfg.Background.Settle(ctx, owner, rec.ID, "failed"); err == nil && won != "failed" {
		return s.settledAs(ctx, owner, rec, won)
	}
	rec.Object = jsonx.EditObject(string(rec.Object), jsonx.Set("status", `"failed"`), jsonx.Set("error",
		`{"code":"server_error","message":"The server running this response stopped before it finished; create it again."}`))
	if err := s.cfg.Responses.PutResponse(ctx, rec); err != nil {
		s.log.Warn("a dead background response not marked failed in the store", zap.String("response_id", rec.ID), zap.Error(err))
	}
	return rec
}

// wantsStream reports a GET /v1/responses/{id} that asks for the stream:
// "stream=true" in the query (OpenAI's documented parameter, as the Python
// and Node SDKs send it) or "stream": true in a JSON body (as openai-go's
// GetStreaming sends it).
func wantsStream(r *http.Request) bool {
	if r.URL.Query().Get("stream") == "true" {
		return true
	}
	if r.Body == nil || r.Body == http.NoBody {
		return false
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, 4<<10))
	return err == nil && gjson.GetBytes(b, "stream").Type == gjson.True
}

// resumeCreated is the stream of a background "stream": true request,
// from its first event (the filter rewrote the request to this path).
func (s *Server) resumeCreated(w http.ResponseWriter, r *http.Request, owner string) {
	if r.URL.Query().Get("stream") != "true" {
		writeError(w, apierror.Invalid("", "", "Invalid URL (POST /v1/responses/%s): use POST /v1/responses/%s/cancel to cancel a response.", r.PathValue("id"), r.PathValue("id")))
		return
	}
	s.streamResponse(w, r, owner)
}

// streamResponse is GET /v1/responses/{id}?stream=true: the events of a
// background response created with "stream": true after starting_after
// (all of them without it), then the live ones until it ends.
func (s *Server) streamResponse(w http.ResponseWriter, r *http.Request, owner string) {
	id := r.PathValue("id")
	ctx := r.Context()
	after := int64(-1)
	if v := r.URL.Query().Get("starting_after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < -1 {
			writeError(w, apierror.Invalid("starting_after", "invalid_value", "Invalid 'starting_after': expected a sequence number (an integer of at least 0), got '%s'.", v))
			return
		}
		after = n
	}
	if _, ok := s.storedResponse(w, r, owner, id); !ok {
		return
	}
	if s.cfg.Background == nil {
		writeError(w, notStreamable(id))
		return
	}
	release, refused := s.takeStream(owner)
	if refused != nil {
		writeError(w, refused)
		return
	}
	defer release()
	events, done, err := s.cfg.Background.Events(ctx, owner, id, after, 0)
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeError(w, notStreamable(id))
		return
	case errors.Is(err, store.ErrEventsTrimmed):
		writeError(w, eventsTrimmed(id, r.URL.Query().Get("starting_after") != ""))
		return
	case err != nil:
		s.storeFailed(w, err)
		return
	}
	if len(events) == 0 && after < 0 {
		// A streamed response's log opens with two events at its start.
		writeError(w, notStreamable(id))
		return
	}
	if len(events) == 0 && after >= 0 {
		// Nothing after N: is there an event N at all?
		if prev, _, err := s.cfg.Background.Events(ctx, owner, id, after-1, 0); err == nil && len(prev) == 0 {
			writeError(w, apierror.Invalid("starting_after", "invalid_value", "Invalid 'starting_after': %d is beyond the last event of response '%s'.", after, id))
			return
		}
	}
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	flush()
	for {
		for _, e := range events {
			typ := gjson.GetBytes(e.Data, "type").Str
			if _, err := w.Write(append(append([]byte("event: "+typ+"\ndata: "), e.Data...), '\n', '\n')); err != nil {
				return
			}
			after = e.Seq
		}
		if done {
			flush()
			return
		}
		if len(events) == 0 {
			_, _ = w.Write([]byte(": keep-alive\n\n"))
		}
		flush()
		events, done, err = s.cfg.Background.Events(ctx, owner, id, after, keepAliveEvery)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("resumed stream ended by the store", zap.String("response_id", id), zap.Error(err))
			}
			return
		}
	}
}

// eventsTrimmed is the answer to a resumption whose events the store's
// bound on kept events forgot (store.ErrEventsTrimmed).
func eventsTrimmed(id string, startingAfter bool) *apierror.Error {
	param := "stream"
	if startingAfter {
		param = "starting_after"
	}
	return &apierror.Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: param, Code: "events_expired",
		Message: fmt.Sprintf("The events of response '%s' are no longer kept (this server keeps a bounded amount of background events, and forgets those of the responses that ended longest ago first): its stream cannot be resumed. GET /v1/responses/%s returns how it ended.", id, id)}
}

func notStreamable(id string) *apierror.Error {
	return apierror.Invalid("stream", "invalid_value", "Response '%s' cannot be streamed: only a response created with 'background': true and 'stream': true can, while its events are kept.", id)
}

// cancelResponse is POST /v1/responses/{id}/cancel: a background response
// still going is stopped and answered with status "cancelled" (the output
// so far); one that ended is answered as it is, so cancelling twice is
// harmless.
func (s *Server) cancelResponse(w http.ResponseWriter, r *http.Request, owner string) {
	id := r.PathValue("id")
	ctx := r.Context()
	rec, ok := s.storedResponse(w, r, owner, id)
	if !ok {
		return
	}
	if gjson.GetBytes(rec.Object, "background").Type != gjson.True {
		writeError(w, apierror.Invalid("", "invalid_request", "Only a response created with 'background': true can be cancelled; response '%s' was not.", id))
		return
	}
	rec = s.settled(ctx, owner, rec)
	if store.Unfinished(rec.Object) {
		if err := s.cfg.Background.Cancel(ctx, owner, id); err != nil && !errors.Is(err, store.ErrNotFound) {
			s.storeFailed(w, err)
			return
		}
		if s.cfg.CancelLocal != nil {
			s.cfg.CancelLocal(owner, id)
		}
		rec = s.awaitEnd(ctx, owner, rec)
		if store.Unfinished(rec.Object) {
			// Still stopping: cancelled, unless its end was settled
			// first (its runner stores the winner).
			won, err := s.cfg.Background.Settle(ctx, owner, id, "cancelled")
			if err != nil {
				won = "cancelled"
			}
			rec = s.settledAs(ctx, owner, rec, won)
		}
	}
	s.writeResponseObject(w, r, rec.Object)
}

// settledAs is rec as its run's settled end status says: the stored
// record once its runner stored it, else rec with that status.
func (s *Server) settledAs(ctx context.Context, owner string, rec store.Response, status string) store.Response {
	if again, err := s.cfg.Responses.GetResponse(ctx, owner, rec.ID); err == nil && gjson.GetBytes(again.Object, "status").Str == status {
		return again
	}
	rec.Object = jsonx.EditObject(string(rec.Object), jsonx.Set("status", jsonx.Quote(status)))
	return rec
}

// awaitEnd polls rec until its run stored an end, for at most cancelWait.
func (s *Server) awaitEnd(ctx context.Context, owner string, rec store.Response) store.Response {
	deadline := time.Now().Add(cancelWait)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		again, err := s.cfg.Responses.GetResponse(ctx, owner, rec.ID)
		if err == nil {
			rec = again
			if !store.Unfinished(rec.Object) {
				return rec
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	return s.settled(ctx, owner, rec)
}

// writeResponseObject writes a stored response object, its calls'
// outputs removed unless the request includes them.
func (s *Server) writeResponseObject(w http.ResponseWriter, r *http.Request, obj []byte) {
	if !slices.Contains(includes(r.URL.Query()), includeOutputs) {
		obj = withoutOutputs(obj)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(obj)
}

// storeFailed answers a store failure.
func (s *Server) storeFailed(w http.ResponseWriter, err error) {
	s.log.Error("background store failed", zap.Error(err))
	writeError(w, apierror.Server(http.StatusInternalServerError, "", "The response store is unavailable; try again later."))
}
