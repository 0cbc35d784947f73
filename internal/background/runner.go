package background

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/tidwall/gjson"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/codeinterp/codeinterp/internal/processor"
	"github.com/codeinterp/codeinterp/internal/store"
)

// Config configures a Runner.
type Config struct {
	// Store keeps the runs' bounds, liveness, cancel requests and events;
	// Responses their records. Both required.
	Store     store.Background
	Responses store.Responses
	// PerOwner and Total bound the background responses running at once,
	// per credential and on the whole server (0: no bound).
	PerOwner, Total int
	// TTL is how long a run counts as alive without renewal (renewed every
	// TTL/3). Default 10s.
	TTL time.Duration
	// Keep is how long a streamed response's events stay resumable after
	// it ended. Default 24h.
	Keep time.Duration
	// Lifetime bounds one run, as a client could bound its request.
	// Default 1h.
	Lifetime time.Duration
	// Poll is how often a run looks for a cancel request made on another
	// replica. Default 100ms.
	Poll time.Duration
	// Now is the clock (tests); nil is time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.TTL <= 0 {
		c.TTL = 10 * time.Second
	}
	if c.Keep <= 0 {
		c.Keep = 24 * time.Hour
	}
	if c.Lifetime <= 0 {
		c.Lifetime = time.Hour
	}
	if c.Poll <= 0 {
		c.Poll = 100 * time.Millisecond
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Why a run's context ended, when not by its own end.
var (
	errCancelled = errors.New("background: cancelled")
	errShutdown  = errors.New("the server stopped before the response finished; create it again")
	errLapsed    = errors.New("the server running the response lost track of it; create it again")
	errLifetime  = errors.New("the response ran longer than this server allows a background response")
)

// Runner drives background responses (processor.BackgroundRunner). Safe
// for concurrent use.
type Runner struct {
	cfg  Config
	log  *zap.Logger
	base context.Context
	stop context.CancelCauseFunc

	mu     sync.Mutex
	runs   map[runKey]*run
	closed bool
	wg     sync.WaitGroup
}

var _ processor.BackgroundRunner = (*Runner)(nil)

type runKey struct{ owner, id string }

// run is one background response being driven.
type run struct {
	runKey
	ex      processor.Backgrounded
	up      processor.Upstreams
	stream  bool
	created time.Time
	cancel  context.CancelCauseFunc

	mu       sync.Mutex
	seq      int64  // the next event's sequence_number
	snapshot []byte // the latest Response object seen
	logFull  bool   // the event log refused an event: later ones are not kept
}

// New returns a Runner; Close stops it.
func New(cfg Config, log *zap.Logger) (*Runner, error) {
	if cfg.Store == nil || cfg.Responses == nil {
		return nil, errors.New("background: Store and Responses are required")
	}
	base, stop := context.WithCancelCause(context.Background())
	return &Runner{cfg: cfg.withDefaults(), log: log, base: base, stop: stop, runs: map[runKey]*run{}}, nil
}

// reservation is a slot held under a placeholder id ("rsv_…") while the
// request's exchange is made; it lapses by itself if never released.
type reservation struct {
	r     *Runner
	owner string
	id    string
	once  sync.Once
}

func (v *reservation) Release() {
	v.once.Do(func() { _ = v.r.cfg.Store.End(context.Background(), v.owner, v.id) })
}

// reserveTTL bounds how long a reservation holds its slot unreleased (a
// request that is being read; NewExchange opens its container).
const reserveTTL = 2 * time.Minute

// Reserve implements processor.BackgroundRunner.
func (r *Runner) Reserve(owner string) (processor.Reservation, error) {
	if err := r.open(); err != nil {
		return nil, err
	}
	v := &reservation{r: r, owner: owner, id: "rsv_" + idgen.New("")}
	// Kept briefly after its end: a placeholder has no events.
	if err := r.cfg.Store.Begin(context.Background(), owner, v.id, r.cfg.PerOwner, r.cfg.Total, reserveTTL, time.Second); err != nil {
		return nil, r.refusal(err)
	}
	return v, nil
}

// open is nil while the runner takes runs, the client's 503 once it is
// closing.
func (r *Runner) open() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return apierror.Server(http.StatusServiceUnavailable, "", "The server is shutting down; send the request again.")
	}
	return nil
}

// refusal is the client's answer to a Begin that failed.
func (r *Runner) refusal(err error) error {
	var q *store.QuotaError
	if errors.As(err, &q) {
		return &apierror.Error{Status: http.StatusTooManyRequests, Type: "rate_limit_exceeded", Code: "rate_limit_exceeded",
			Message: fmt.Sprintf("Too many background responses in progress: at most %d (%s). Wait for one to finish, or cancel one.", q.Max, q.Limit)}
	}
	return err
}

// Start implements processor.BackgroundRunner. The run takes its own slot
// before the reservation's is released, so the bounds hold throughout.
func (r *Runner) Start(reqCtx context.Context, caller processor.Caller, ex processor.Backgrounded, up processor.Upstreams, rsv processor.Reservation) (queued []byte, err error) {
	ctx := context.Background()
	k := runKey{caller.Owner, ex.ResponseID()}
	defer rsv.Release()
	defer func() {
		if err != nil {
			ex.Close()
		}
	}()
	if k.id == "" {
		return nil, apierror.Invalid("background", "unsupported_parameter", "Background mode needs this server's response store, which is not configured.")
	}
	if err := r.open(); err != nil {
		return nil, err
	}
	// The reservation's slot counts: admit one more than the bounds, for
	// the moment both are held.
	if err := r.cfg.Store.Begin(ctx, k.owner, k.id, plusOne(r.cfg.PerOwner), plusOne(r.cfg.Total), r.cfg.TTL, r.cfg.Keep); err != nil {
		return nil, r.refusal(err)
	}
	ru := &run{runKey: k, ex: ex, up: up, stream: ex.ClientStream(), created: r.cfg.Now()}
	queued = ex.QueuedResponse("queued", ru.created)
	ru.snapshot = queued
	if err := r.put(ctx, ru, queued); err != nil {
		_ = r.cfg.Store.End(ctx, k.owner, k.id)
		return nil, err
	}
	if ru.stream {
		// OpenAI's background stream opens with the queued object.
		r.event(ctx, ru, "response.created", queued)
		r.event(ctx, ru, "response.queued", queued)
	}
	runCtx, cancel := context.WithCancelCause(trace.ContextWithSpanContext(r.base, trace.SpanContextFromContext(reqCtx)))
	runCtx, stopTimer := context.WithTimeoutCause(runCtx, r.cfg.Lifetime, errLifetime)
	ru.cancel = func(cause error) { cancel(cause); stopTimer() }
	r.mu.Lock()
	r.runs[k] = ru
	r.wg.Add(1)
	r.mu.Unlock()
	go r.drive(runCtx, ru)
	return queued, nil
}

// plusOne is bound n with the reservation's own slot; 0 (none) stays 0.
func plusOne(n int) int {
	if n == 0 {
		return 0
	}
	return n + 1
}

// put stores the run's record with obj as its object.
func (r *Runner) put(ctx context.Context, ru *run, obj []byte) error {
	return r.cfg.Responses.PutResponse(ctx, store.Response{ID: ru.id, Owner: ru.owner, CreatedAt: ru.created, Object: obj})
}

// event appends one event of the run's stream, numbered next.
func (r *Runner) event(ctx context.Context, ru *run, typ string, response []byte) {
	data := jsonx.EditObject("{}", jsonx.Set("type", jsonx.Quote(typ)), jsonx.Set("sequence_number", "0"), jsonx.Set("response", string(response)))
	r.append(ctx, ru, data)
}

// append numbers data (an event's JSON) and keeps it.
func (r *Runner) append(ctx context.Context, ru *run, data []byte) {
	ru.mu.Lock()
	defer ru.mu.Unlock()
	if resp := gjson.GetBytes(data, "response"); resp.IsObject() {
		ru.snapshot = []byte(resp.Raw)
	}
	if ru.logFull {
		return
	}
	data = jsonx.EditObject(string(data), jsonx.Set("sequence_number", fmt.Sprint(ru.seq)))
	if err := r.cfg.Store.AppendEvent(ctx, ru.owner, ru.id, ru.seq, data); err != nil {
		ru.logFull = true
		r.log.Warn("background response's events no longer kept: its stream cannot be resumed past here",
			zap.String("response_id", ru.id), zap.Int64("sequence_number", ru.seq), zap.Error(err))
		return
	}
	ru.seq++
}

// Cancel stops the run of owner's id if it runs on this replica (another
// replica's stops at its next poll of the store's cancel request).
func (r *Runner) Cancel(owner, id string) {
	r.mu.Lock()
	ru := r.runs[runKey{owner, id}]
	r.mu.Unlock()
	if ru != nil {
		ru.cancel(errCancelled)
	}
}

// drive runs the loop to its end and stores how it ended.
func (r *Runner) drive(ctx context.Context, ru *run) {
	defer r.wg.Done()
	done := make(chan struct{})
	go r.watch(ctx, ru, done)
	inProgress := ru.ex.QueuedResponse("in_progress", ru.created)
	ru.mu.Lock()
	ru.snapshot = inProgress
	ru.mu.Unlock()
	if err := r.put(ctx, ru, inProgress); err != nil {
		r.log.Warn("background response not marked in_progress", zap.String("response_id", ru.id), zap.Error(err))
	}
	err := r.loop(ctx, ru)
	close(done)
	ru.ex.Close()
	// What follows must happen whatever ended ctx.
	fin := context.WithoutCancel(ctx)
	r.end(fin, ru, err, context.Cause(ctx))
	if err := r.cfg.Store.End(fin, ru.owner, ru.id); err != nil {
		r.log.Warn("background run not ended in the store (it lapses)", zap.String("response_id", ru.id), zap.Error(err))
	}
	r.mu.Lock()
	delete(r.runs, ru.runKey)
	r.mu.Unlock()
	ru.cancel(nil)
}

// loop makes the first inference and hands it to the exchange, which runs
// the calls and the follow-ups.
func (r *Runner) loop(ctx context.Context, ru *run) error {
	if ru.stream {
		ru.ex.StreamLive()
		status, header, body, err := ru.up.CreateResponseStream(ctx, ru.ex.UpstreamBody())
		if err != nil {
			return fmt.Errorf("the model server could not be reached: %w", err)
		}
		defer body.Close()
		if status < 200 || status > 299 {
			b, _ := io.ReadAll(io.LimitReader(body, 64<<10))
			return upstreamError(status, b)
		}
		sink := &eventSink{r: r, ru: ru, ctx: ctx}
		err = ru.ex.StreamResponse(ctx, ru.up, status, header, body, sink)
		sink.flush()
		return err
	}
	status, header, body, err := ru.up.CreateResponse(ctx, ru.ex.UpstreamBody())
	if err != nil {
		return fmt.Errorf("the model server could not be reached: %w", err)
	}
	if status < 200 || status > 299 {
		return upstreamError(status, body)
	}
	res, err := ru.ex.CompleteResponse(ctx, ru.up, status, header, body)
	if err != nil {
		return err
	}
	if res.Status < 200 || res.Status > 299 {
		return upstreamError(res.Status, res.Body)
	}
	ru.mu.Lock()
	ru.snapshot = res.Body
	ru.mu.Unlock()
	return nil
}

// upstreamError is a failed answer's message.
func upstreamError(status int, body []byte) error {
	if m := gjson.GetBytes(body, "error.message"); m.Str != "" {
		return fmt.Errorf("the model server answered %d: %s", status, m.Str)
	}
	return fmt.Errorf("the model server answered %d", status)
}

// watch renews the run's liveness and looks for a cancel request until
// done.
func (r *Runner) watch(ctx context.Context, ru *run, done <-chan struct{}) {
	poll := time.NewTicker(r.cfg.Poll)
	defer poll.Stop()
	renewEvery := r.cfg.TTL / 3
	next := time.Now().Add(renewEvery)
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-poll.C:
		}
		if c, err := r.cfg.Store.Cancelled(ctx, ru.owner, ru.id); err == nil && c {
			ru.cancel(errCancelled)
			return
		}
		if time.Now().Before(next) {
			continue
		}
		next = time.Now().Add(renewEvery)
		ok, err := r.cfg.Store.Renew(ctx, ru.owner, ru.id, r.cfg.TTL)
		switch {
		case err != nil:
			r.log.Warn("background run not renewed", zap.String("response_id", ru.id), zap.Error(err))
		case !ok:
			ru.cancel(errLapsed)
			return
		}
	}
}

// end settles how the run ended and stores it. What happened first wins
// (store.Background.Settle): a loop that finished — its response stored —
// completed even when a cancel landed as it did; a cancel (or another
// replica's verdict) that won before is what the record says.
func (r *Runner) end(ctx context.Context, ru *run, loopErr, cause error) {
	status, why := "", loopErr // "": as the loop left it (completed, incomplete)
	if rec, err := r.cfg.Responses.GetResponse(ctx, ru.owner, ru.id); err == nil && !store.Unfinished(rec.Object) {
		// The interceptor stored the response's end before anything
		// stopped the loop.
		loopErr, why = nil, nil
	}
	switch {
	case loopErr == nil:
	case errors.Is(cause, errCancelled):
		status, why = "cancelled", nil
	case cause != nil:
		status, why = "failed", cause
	default:
		status = "failed"
	}
	want := status
	if want == "" {
		want = r.endStatus(ctx, ru)
	}
	won, err := r.cfg.Store.Settle(ctx, ru.owner, ru.id, want)
	if err != nil {
		r.log.Warn("background run's end not settled in the store", zap.String("response_id", ru.id), zap.Error(err))
		won = want
	}
	switch {
	case won != want:
		// A cancel or another replica settled it first.
		r.log.Info("background response's end settled before its runner's", zap.String("response_id", ru.id),
			zap.String("status", won), zap.String("runner", want))
		var why error
		if won == "failed" {
			why = errLapsed
		}
		r.finish(ctx, ru, won, why)
	case status == "":
		r.settle(ctx, ru)
	default:
		r.finish(ctx, ru, status, why)
	}
}

// endStatus is the status the run's own end left: its stored record's, or
// its latest object's.
func (r *Runner) endStatus(ctx context.Context, ru *run) string {
	if rec, err := r.cfg.Responses.GetResponse(ctx, ru.owner, ru.id); err == nil && !store.Unfinished(rec.Object) {
		return gjson.GetBytes(rec.Object, "status").Str
	}
	ru.mu.Lock()
	defer ru.mu.Unlock()
	if st := gjson.GetBytes(ru.snapshot, "status").Str; !store.Unfinished(ru.snapshot) && st != "" {
		return st
	}
	return "failed"
}

// finish stores the run ended with status: its latest object (the output
// so far) with that status, and for "failed" the reason; a streamed run
// gets the matching last event.
func (r *Runner) finish(ctx context.Context, ru *run, status string, why error) {
	ru.mu.Lock()
	obj := ru.snapshot
	ru.mu.Unlock()
	edits := []jsonx.Edit{jsonx.Set("status", jsonx.Quote(status))}
	if why != nil {
		edits = append(edits, jsonx.Set("error", string(jsonx.EditObject("{}",
			jsonx.Set("code", `"server_error"`), jsonx.Set("message", jsonx.Quote(why.Error()))))))
	}
	obj = jsonx.EditObject(string(obj), edits...)
	if err := r.put(ctx, ru, obj); err != nil {
		r.log.Error("background response's end not stored", zap.String("response_id", ru.id), zap.String("status", status), zap.Error(err))
	}
	if ru.stream && status == "failed" {
		r.event(ctx, ru, "response.failed", obj)
	}
	r.log.Info("background response ended", zap.String("response_id", ru.id), zap.String("status", status), zap.NamedError("reason", why))
}

// settle makes sure a run that ended by itself left a finished record:
// the interceptor stores the response as it does any; when it could not
// (too large to keep), the final object is stored alone.
func (r *Runner) settle(ctx context.Context, ru *run) {
	rec, err := r.cfg.Responses.GetResponse(ctx, ru.owner, ru.id)
	if err == nil && !store.Unfinished(rec.Object) {
		return
	}
	ru.mu.Lock()
	obj := ru.snapshot
	ru.mu.Unlock()
	if store.Unfinished(obj) {
		r.finish(ctx, ru, "failed", errors.New("the response ended without a final answer"))
		return
	}
	if err := r.put(ctx, ru, obj); err != nil {
		r.finish(ctx, ru, "failed", fmt.Errorf("the response could not be stored: %w", err))
	}
}

// Close stops the runner: no run starts; those running may finish within
// timeout, then the rest are cancelled and stored failed.
func (r *Runner) Close(timeout time.Duration) {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-time.After(timeout):
	}
	r.stop(errShutdown)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		r.log.Warn("background runs did not stop after cancellation; they lapse")
	}
}

// eventSink turns the live stream the exchange writes (server-sent events)
// into the run's event log: each event renumbered in the run's sequence,
// the exchange's own response.created left out (the log opened with the
// queued one).
type eventSink struct {
	r   *Runner
	ru  *run
	ctx context.Context
	buf []byte
}

func (s *eventSink) Write(p []byte) (int, error) {
	s.buf = append(s.buf, p...)
	for {
		i := bytes.Index(s.buf, []byte("\n\n"))
		if i < 0 {
			return len(p), nil
		}
		s.take(s.buf[:i])
		s.buf = s.buf[i+2:]
	}
}

func (s *eventSink) flush() {
	if len(bytes.TrimSpace(s.buf)) > 0 {
		s.take(s.buf)
	}
	s.buf = nil
}

// take keeps one event block.
func (s *eventSink) take(block []byte) {
	var data []byte
	for _, line := range bytes.Split(block, []byte("\n")) {
		if d, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
			data = append(data, d...)
		}
	}
	if len(data) == 0 || s.ctx.Err() != nil {
		// A comment, or what a cancelled loop writes as it stops: the
		// run's end is stored by finish.
		return
	}
	if gjson.GetBytes(data, "type").Str == "response.created" {
		return
	}
	s.r.append(context.WithoutCancel(s.ctx), s.ru, data)
}
