package e2e

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"
)

// Live streams through the front proxy in FULL_DUPLEX_STREAMED: the scripted
// model streams fixture-shaped events with pauses, and gates hold it before
// chosen events until the client has what a live gateway forwards by then
// (liveness proved by order, not by timing).

// seen is what the client has received so far.
type seen struct {
	mu     sync.Mutex
	types  []string
	notify chan struct{}
}

func newSeen() *seen { return &seen{notify: make(chan struct{})} }

func (s *seen) add(typ string) {
	s.mu.Lock()
	s.types = append(s.types, typ)
	close(s.notify)
	s.notify = make(chan struct{})
	s.mu.Unlock()
}

// waitFor blocks until the client got an event of type typ.
func (s *seen) waitFor(typ string, d time.Duration) bool {
	deadline := time.After(d)
	for {
		s.mu.Lock()
		ok, ch := slices.Contains(s.types, typ), s.notify
		s.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-deadline:
			return false
		}
	}
}

// askLive streams p, recording each event as it arrives, and feeds the
// whole stream to openai-go's ResponseAccumulator.
func askLive(ctx context.Context, t *testing.T, s *stack, p responses.ResponseNewParams, sn *seen) (*responses.Response, []responses.ResponseStreamEventUnion, error) {
	t.Helper()
	var acc responses.ResponseAccumulator
	final, evs, err := readStream(s.client.Responses.NewStreaming(ctx, p), func(ev responses.ResponseStreamEventUnion) {
		sn.add(ev.Type)
		var se responses.ResponsesServerEventUnion
		if err := se.UnmarshalJSON([]byte(ev.RawJSON())); err != nil {
			t.Errorf("openai-go cannot decode %s: %v", ev.Type, err)
		} else if err := acc.AddEvent(se); err != nil {
			t.Errorf("ResponseAccumulator rejects %s: %v", ev.RawJSON(), err)
		}
	})
	if err != nil {
		return nil, evs, err
	}
	if r, err := acc.ReconstructedResponse(); err != nil || r.ID != final.ID || len(r.Output) != len(final.Output) {
		t.Errorf("accumulated response %v (%v) differs from response.completed", r, err)
	}
	return final, evs, nil
}

// essentials is what must agree between a live and a buffered answer to
// the same scenario: every output item's type, status, code, outputs and
// text, and the usage (ids and times differ by nature).
func essentials(r *responses.Response) []string {
	out := []string{gjson.Get(r.RawJSON(), "usage").Raw, string(r.Status)}
	for _, it := range gjson.Get(r.RawJSON(), "output").Array() {
		out = append(out, it.Get("type").Str+"|"+it.Get("status").Str+"|"+it.Get("code").Str+"|"+
			it.Get("outputs").Raw+"|"+it.Get("content.#.text").Raw+"|"+it.Get("content.#.annotations").Raw)
	}
	return out
}

func TestLiveStream(t *testing.T) {
	sh := loadShapes(t)
	var m *model
	script := func(t testing.TB, c *convo) reply {
		switch len(c.outputs()) {
		case 0: // several calls in one turn, escapes in the code
			return reply{items: []string{m.call("x = 20\nprint(\"one\\tsep\")"), m.call("print('two', x + 1)")}}
		case 2: // a second round
			return reply{items: []string{m.call("print(\"caf\\u00e9\", x * 2)")}}
		default:
			return reply{items: []string{m.message("Done: one, two 21 and café 40.")}}
		}
	}
	s := newStack(t, sh, script, stackOptions{eventDelay: 5 * time.Millisecond})
	m = s.model
	sn := newSeen()
	gates := map[[2]any]string{
		// Before the first round ends, the client has the response's start.
		{0, "response.completed"}: "response.created",
		// Before the first call's code is finished, its code is arriving.
		{0, "response.function_call_arguments.done"}: "response.code_interpreter_call_code.delta",
		// Before the final round's text is finished, its deltas are arriving.
		{2, "response.output_text.done"}: "response.output_text.delta",
	}
	var gmu sync.Mutex
	passed := map[[2]any]bool{}
	m.gate = func(request int, event string) {
		key := [2]any{request, event}
		gmu.Lock()
		want, ok := gates[key]
		done := passed[key]
		passed[key] = true
		gmu.Unlock()
		if ok && !done && !sn.waitFor(want, 20*time.Second) {
			t.Errorf("request %d: the client never got %s while the model held %s: the stream is not live", request, want, event)
		}
	}
	live, evs, err := askLive(context.Background(), t, s, ciParams("three things", true), sn)
	if err != nil {
		t.Fatal(err)
	}
	gmu.Lock()
	if len(passed) < len(gates) {
		t.Errorf("only %d of %d gates were reached", len(passed), len(gates))
	}
	gmu.Unlock()
	checkStream(t, sh, evs, false)
	for _, ev := range evs {
		if strings.Contains(ev.Type, "function_call") {
			t.Errorf("our function's event %s reached the client", ev.Type)
		}
	}
	if n := countType(evs, "response.created"); n != 1 {
		t.Errorf("%d response.created events, want 1", n)
	}
	for _, ty := range []string{"response.code_interpreter_call.in_progress", "response.code_interpreter_call.interpreting", "response.code_interpreter_call.completed"} {
		if n := countType(evs, ty); n != 3 {
			t.Errorf("%d %s events, want one per call (3)", n, ty)
		}
	}
	reqs := m.all()
	if len(reqs) != 3 || gjson.GetBytes(reqs[1].body, "stream").Type != gjson.True {
		t.Fatalf("model requests %d; follow-ups of a live stream must stream too", len(reqs))
	}

	m.gate = nil
	buffered, _, err := ask(context.Background(), t, s, ciParams("three things", true), false)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := essentials(live), essentials(buffered); !slices.Equal(a, b) {
		t.Errorf("live and buffered answers differ:\nlive:     %q\nbuffered: %q", a, b)
	}
	if logs := ciCalls(live); len(logs) != 3 || logs[0].Outputs[0].Logs != "one\tsep\n" || logs[2].Outputs[0].Logs != "café 40\n" {
		t.Errorf("calls %+v", logs)
	}
	s.drained(t)
}

func countType(evs []responses.ResponseStreamEventUnion, typ string) int {
	n := 0
	for _, ev := range evs {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

// A model server that dies mid-stream ends the client's stream with an
// error event and response.failed; nothing more is asked of the model.
func TestLiveUpstreamDiesMidStream(t *testing.T) {
	sh := loadShapes(t)
	var m *model
	s := newStack(t, sh, func(t testing.TB, c *convo) reply {
		if len(c.outputs()) == 0 {
			return reply{items: []string{m.call("print(25)")}}
		}
		return reply{items: []string{m.message("a long answer that never finishes")}, breakAfter: 5}
	}, stackOptions{})
	m = s.model
	_, evs, err := ask(context.Background(), t, s, ciParams("x", true), true)
	if err == nil {
		t.Fatal("stream completed although the model died")
	}
	if len(evs) < 2 || evs[len(evs)-2].Type != "error" || evs[len(evs)-1].Type != "response.failed" {
		t.Fatalf("stream ends %v; want error then response.failed", lastTypes(evs, 3))
	}
	if got := evs[len(evs)-1].Response.Output; len(got) == 0 || got[0].Type != "code_interpreter_call" {
		t.Errorf("response.failed lacks what was produced: %v", got)
	}
	s.drained(t)
	if n := len(m.all()); n != 2 {
		t.Errorf("model requests %d, want 2", n)
	}
}

func lastTypes(evs []responses.ResponseStreamEventUnion, n int) []string {
	var out []string
	for _, ev := range evs[max(0, len(evs)-n):] {
		out = append(out, ev.Type)
	}
	return out
}
