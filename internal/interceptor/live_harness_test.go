package interceptor

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/containers"
	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sse"
	"github.com/codeinterp/codeinterp/internal/store"
)

// The live path's test stand-ins: a streaming upstream that answers with
// the very response objects of the buffered tests' scripted upstream, as
// the event stream OpenAI sends for them (the synthesiser is checked
// against the recordings, function_call_arguments deltas included), one
// event at a time with delays and gates; and a client writer that records
// every event the interceptor writes, and when.

// gate holds the upstream before one of its events until the client has
// received an event: a live interceptor lets it through, a buffering one
// never does (the gate then times out and the test fails). It proves
// liveness by order, not by timing.
type gate struct {
	round  int
	before string // the upstream event type it holds, …
	nth    int    // … its nth occurrence in the round (0-based)
	want   func(e sseEvent) bool
	what   string
}

type liveUpstream struct {
	t  *testing.T
	su *scriptedUpstream
	w  *recWriter

	delay   time.Duration
	gates   []gate
	runeCut bool        // cut every delta into single characters (escapes split everywhere)
	dieAt   map[int]int // round → close the stream after this many events
	errAt   map[int]int // round → send an error event after this many events

	mu       sync.Mutex
	rounds   int
	finished []time.Time // when each round's last event was written
	running  sync.WaitGroup
}

func newLiveUpstream(t *testing.T, su *scriptedUpstream, w *recWriter) *liveUpstream {
	u := &liveUpstream{t: t, su: su, w: w, delay: time.Millisecond, dieAt: map[int]int{}, errAt: map[int]int{}}
	t.Cleanup(u.running.Wait) // no writer goroutine outlives its test
	return u
}

func (u *liveUpstream) CreateResponseStream(ctx context.Context, body []byte) (int, http.Header, io.ReadCloser, error) {
	if gjson.GetBytes(body, "stream").Type != gjson.True {
		u.t.Errorf("live upstream request without stream:true: %s", body)
	}
	st, hdr, b, err := u.su.CreateResponse(ctx, jsonx.EditObject(string(body), jsonx.Del("stream")))
	if err != nil || st < 200 || st > 299 {
		return st, hdr, io.NopCloser(bytes.NewReader(b)), err
	}
	u.mu.Lock()
	round := u.rounds
	u.rounds++
	u.mu.Unlock()
	events := u.events(b)
	pr, pw := io.Pipe()
	u.running.Add(1)
	go func() {
		defer u.running.Done()
		defer pw.Close()
		counts := map[string]int{}
		for k, ev := range events {
			if n, ok := u.dieAt[round]; ok && k == n {
				return // the connection drops: EOF without a terminal event
			}
			if n, ok := u.errAt[round]; ok && k == n {
				_, _ = io.WriteString(pw, "event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\",\"message\":\"The model crashed.\",\"param\":null,\"sequence_number\":"+itoa(int64(k))+"}\n\n")
				return
			}
			for _, g := range u.gates {
				if g.round == round && g.before == ev.Name && g.nth == counts[ev.Name] {
					if !u.w.waitFor(g.want, 10*time.Second) {
						u.t.Errorf("round %d: the client never got %s while the upstream held %s: the stream is not live", round, g.what, ev.Name)
					}
				}
			}
			counts[ev.Name]++
			select {
			case <-ctx.Done():
				return
			case <-time.After(u.delay):
			}
			if _, err := io.WriteString(pw, "event: "+ev.Name+"\ndata: "+ev.Data.Raw+"\n\n"); err != nil {
				return
			}
		}
		u.mu.Lock()
		u.finished = append(u.finished, time.Now())
		u.mu.Unlock()
	}()
	return 200, http.Header{"Content-Type": {"text/event-stream"}}, pr, nil
}

// events is the stream OpenAI sends for the response object b, its deltas
// cut into characters when runeCut, renumbered.
func (u *liveUpstream) events(b []byte) []sseEvent {
	var out []sseEvent
	for _, e := range parseSSE(u.t, string(sse.EventStream(b, true))) {
		d := e.Data.Get("delta")
		if !u.runeCut || !d.Exists() || utf8.RuneCountInString(d.Str) < 2 {
			out = append(out, e)
			continue
		}
		for _, r := range d.Str {
			out = append(out, sseEvent{Name: e.Name, Data: gjson.Parse(string(jsonx.EditObject(e.Data.Raw, jsonx.Set("delta", jsonx.Quote(string(r))))))})
		}
	}
	for i := range out {
		out[i].Data = gjson.Parse(string(jsonx.EditObject(out[i].Data.Raw, jsonx.Set("sequence_number", itoa(int64(i))))))
	}
	return out
}

// recWriter is the client: it records the events written, with times, and
// lets gates wait for one.
type recWriter struct {
	mu      sync.Mutex
	buf     []byte
	pending []byte
	events  []recEvent
	flushes int
	writes  int
	notify  chan struct{}
	failAt  int // fail the nth write (a client gone); 0 = never
}

type recEvent struct {
	sseEvent
	at      time.Time
	flushed bool // a Flush followed the write that carried it
}

func newRecWriter() *recWriter { return &recWriter{notify: make(chan struct{})} }

func (w *recWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes++
	if w.failAt > 0 && w.writes >= w.failAt {
		return 0, io.ErrClosedPipe
	}
	now := time.Now()
	w.buf = append(w.buf, p...)
	w.pending = append(w.pending, p...)
	for {
		i := bytes.Index(w.pending, []byte("\n\n"))
		if i < 0 {
			break
		}
		block := string(w.pending[:i])
		w.pending = w.pending[i+2:]
		name, data, _ := strings.Cut(block, "\n")
		w.events = append(w.events, recEvent{sseEvent: sseEvent{Name: strings.TrimPrefix(name, "event: "), Data: gjson.Parse(strings.TrimPrefix(data, "data: "))}, at: now})
	}
	close(w.notify)
	w.notify = make(chan struct{})
	return len(p), nil
}

func (w *recWriter) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.flushes++
	for i := len(w.events) - 1; i >= 0 && !w.events[i].flushed; i-- {
		w.events[i].flushed = true
	}
	return nil
}

func (w *recWriter) waitFor(pred func(sseEvent) bool, timeout time.Duration) bool {
	deadline := time.After(timeout)
	for {
		w.mu.Lock()
		for _, e := range w.events {
			if pred(e.sseEvent) {
				w.mu.Unlock()
				return true
			}
		}
		ch := w.notify
		w.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			return false
		}
	}
}

func (w *recWriter) body() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]byte(nil), w.buf...)
}

func isEvent(name string) func(sseEvent) bool {
	return func(e sseEvent) bool { return e.Name == name }
}

// liveRun sends body through the live path: rewrite, StreamLive, the first
// streamed answer, StreamResponse into w.
func liveRun(ctx context.Context, t *testing.T, ic *Interceptor, u *liveUpstream, body []byte) error {
	t.Helper()
	x, err := ic.NewExchange(ctx, Caller{Owner: "owner"}, body)
	if err != nil {
		t.Fatal(err)
	}
	if !x.StreamLive() || !x.Live() {
		t.Fatal("a streaming intercepted request does not go live")
	}
	st, hdr, rb, err := u.CreateResponseStream(ctx, x.UpstreamBody())
	if err != nil {
		t.Fatal(err)
	}
	if code, h := x.StreamHead(st, hdr); st == 200 && (code != 200 || h.Get("Content-Type") != ContentTypeSSE) {
		t.Fatalf("StreamHead: %d %v", code, h)
	}
	return x.StreamResponse(ctx, u, st, hdr, rb, u.w)
}

// bufferedRun answers the same request through CompleteResponse, JSON.
func bufferedRun(t *testing.T, ic *Interceptor, su *scriptedUpstream, body []byte) []byte {
	t.Helper()
	return bufferedResult(t, ic, su, body).Body
}

// bufferedResult is bufferedRun's whole answer (status, body, rounds).
func bufferedResult(t *testing.T, ic *Interceptor, su *scriptedUpstream, body []byte) *Result {
	t.Helper()
	x, err := ic.NewExchange(context.Background(), Caller{Owner: "owner"}, jsonx.EditObject(string(body), jsonx.Set("stream", "false")))
	if err != nil {
		t.Fatal(err)
	}
	st, hdr, b, err := su.CreateResponse(context.Background(), x.UpstreamBody())
	if err != nil {
		t.Fatal(err)
	}
	res, err := x.CompleteResponse(context.Background(), su, st, hdr, b)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

var idRE = regexp.MustCompile(`\b(resp|ci|cntr)_[0-9a-f]+\b`)

// normalized replaces the random ids (responses, calls, containers) by
// their order of first appearance, and decodes the JSON for a field by
// field comparison.
func normalized(t *testing.T, doc string) any {
	t.Helper()
	seen := map[string]string{}
	doc = idRE.ReplaceAllStringFunc(doc, func(id string) string {
		if n, ok := seen[id]; ok {
			return n
		}
		n := strings.SplitN(id, "_", 2)[0] + "_#" + itoa(int64(len(seen)))
		seen[id] = n
		return n
	})
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatalf("not JSON: %v: %s", err, doc)
	}
	return v
}

// fakeContainers keeps each response's container in one real sandbox
// session and reports a file the code writes to /mnt/data/out.csv, enough
// for the citations of the splice.
type fakeContainers struct{ p sandbox.Provider }

func (f fakeContainers) Open(ctx context.Context, spec containers.Spec) (containers.Container, error) {
	return &fakeContainer{p: f.p, id: idgen.New("cntr_")}, nil
}

// Network implements containers.Container: no network.
func (c *fakeContainer) Network() *egress.Policy { return nil }

// Skills implements containers.Container: none.
func (c *fakeContainer) Skills() []store.ContainerSkill { return nil }

type fakeContainer struct {
	p     sandbox.Provider
	id    string
	sess  sandbox.Session
	files []containers.File
}

func (c *fakeContainer) ID() string { return c.id }

func (c *fakeContainer) Files(context.Context) ([]containers.File, error) { return c.files, nil }

func (c *fakeContainer) Run(ctx context.Context, code string) (containers.RunResult, error) {
	if c.sess == nil {
		s, err := c.p.Open(ctx, sandbox.SessionOptions{})
		if err != nil {
			return containers.RunResult{}, err
		}
		c.sess = s
	}
	r, err := c.sess.Run(ctx, code)
	if err != nil {
		return containers.RunResult{}, err
	}
	var changed []containers.File
	if strings.Contains(code, "/mnt/data/out.csv") && len(c.files) == 0 {
		c.files = []containers.File{{ID: "cfile_1", Path: "/mnt/data/out.csv", Filename: "out.csv", Bytes: 8}}
		changed = c.files
	}
	return containers.RunResult{Result: r, Changed: changed}, nil
}

// Shell implements containers.Container on the session's provider's shell.
func (c *fakeContainer) Shell(ctx context.Context, req sandbox.ShellRequest) (containers.RunResult, error) {
	if c.sess == nil {
		s, err := c.p.Open(ctx, sandbox.SessionOptions{})
		if err != nil {
			return containers.RunResult{}, err
		}
		c.sess = s
	}
	r, err := sandbox.Shell(ctx, c.sess, req)
	return containers.RunResult{Result: r}, err
}

func (c *fakeContainer) Close() error {
	if c.sess != nil {
		return c.sess.Close()
	}
	return nil
}
