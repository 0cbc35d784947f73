package interceptor

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
	"github.com/codeinterp/codeinterp/internal/sse"
)

// benchResponse is a finished upstream response with the given items.
func benchResponse(id string, items ...string) []byte {
	return []byte(`{"id":"` + id + `","object":"response","created_at":1790010453,"status":"completed","model":"m","output":[` +
		strings.Join(items, ",") + `],"tools":[],"tool_choice":"auto","store":false,"usage":{"input_tokens":10,"output_tokens":50,"total_tokens":60}}`)
}

// benchStream is OpenAI's event stream for resp with each run of deltas
// re-cut into exactly n pieces (n tokens).
func benchStream(tb testing.TB, resp []byte, n int) []sseEvent {
	var out []sseEvent
	evs := parseSSE(tb, string(sse.EventStream(resp, false)))
	for i := 0; i < len(evs); {
		e := evs[i]
		if !e.Data.Get("delta").Exists() {
			out = append(out, e)
			i++
			continue
		}
		var text strings.Builder
		j := i
		for ; j < len(evs) && evs[j].Name == e.Name && evs[j].Data.Get("item_id").Str == e.Data.Get("item_id").Str; j++ {
			text.WriteString(evs[j].Data.Get("delta").Str)
		}
		runes := []rune(text.String())
		for k := 0; k < n; k++ {
			piece := string(runes[k*len(runes)/n : (k+1)*len(runes)/n])
			out = append(out, sseEvent{Name: e.Name, Data: gjson.Parse(string(jsonx.EditObject(e.Data.Raw, jsonx.Set("delta", jsonx.Quote(piece)))))})
		}
		i = j
	}
	return out
}

// pacedBody streams events, sleeping perToken before each delta (a model
// producing tokens), and records when the first event and the first delta
// went out.
type pacedBody struct {
	pr         *io.PipeReader
	mu         sync.Mutex
	firstEvent time.Time
	firstDelta time.Time
}

func newPacedBody(evs []sseEvent, perToken time.Duration) *pacedBody {
	pr, pw := io.Pipe()
	b := &pacedBody{pr: pr}
	go func() {
		defer pw.Close()
		for i, e := range evs {
			isDelta := e.Data.Get("delta").Exists()
			if isDelta {
				time.Sleep(perToken)
			}
			b.mu.Lock()
			now := time.Now()
			if i == 0 {
				b.firstEvent = now
			}
			if isDelta && b.firstDelta.IsZero() {
				b.firstDelta = now
			}
			b.mu.Unlock()
			if _, err := io.WriteString(pw, "event: "+e.Name+"\ndata: "+e.Data.Raw+"\n\n"); err != nil {
				return
			}
		}
	}()
	return b
}

func (b *pacedBody) Read(p []byte) (int, error) { return b.pr.Read(p) }
func (b *pacedBody) Close() error               { return b.pr.Close() }

// stampWriter records when each event's bytes were written.
type stampWriter struct {
	mu    sync.Mutex
	first time.Time
	delta time.Time // the first output_text.delta
	all   []byte
}

func (w *stampWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if w.first.IsZero() {
		w.first = now
	}
	if w.delta.IsZero() && strings.Contains(string(p), "event: response.output_text.delta\n") {
		w.delta = now
	}
	w.all = append(w.all, p...)
	return len(p), nil
}

// BenchmarkLiveTimeToFirstByte compares the live and the synthetic stream
// for a two-round exchange (a call, then the answer) whose upstream
// streams 50 tokens at 20 ms each per round: the time to the client's first
// byte and to its first text delta of the final round, from the start and
// from the upstream's own first event/delta.
func BenchmarkLiveTimeToFirstByte(b *testing.B) {
	const tokens, perToken = 50, 20 * time.Millisecond
	p := sandboxtest.New(b)
	ic, err := New(DefaultConfig(), p, nil)
	if err != nil {
		b.Fatal(err)
	}
	code := strings.TrimSpace(strings.Repeat("x = 1\n", tokens/2)) + "\nprint(x)"
	round0 := benchResponse("resp_0", `{"id":"fc_1","type":"function_call","status":"completed","arguments":`+
		jsonx.Quote(`{"code":`+jsonx.Quote(code)+`}`)+`,"call_id":"call_1","name":"code_interpreter"}`)
	round1 := benchResponse("resp_1", msgItem(strings.TrimSpace(strings.Repeat("token ", tokens))))
	streams := [][]sseEvent{benchStream(b, round0, tokens), benchStream(b, round1, tokens)}
	body := `{"model":"m","input":"go","stream":true,"tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`
	// live: first byte from the start and after the upstream's first event,
	// first final-round delta from the start and after the upstream sent it;
	// synth: the same where they exist (index 1 unused).
	var live, synth [4][]float64
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for b.Loop() {
		// Live.
		{
			x, _ := ic.RewriteRequest([]byte(body))
			x.StreamLive()
			var mu sync.Mutex
			var bodies []*pacedBody
			up := StreamUpstreamFunc(func(context.Context, []byte) (int, http.Header, io.ReadCloser, error) {
				mu.Lock()
				defer mu.Unlock()
				pb := newPacedBody(streams[len(bodies)], perToken)
				bodies = append(bodies, pb)
				return 200, http.Header{"Content-Type": {"text/event-stream"}}, pb, nil
			})
			start := time.Now()
			_, _, first, _ := up.CreateResponseStream(context.Background(), x.UpstreamBody())
			w := &stampWriter{}
			if err := x.StreamResponse(context.Background(), up, 200, nil, first, w); err != nil {
				b.Fatal(err)
			}
			live[0] = append(live[0], ms(w.first.Sub(start)))
			live[1] = append(live[1], ms(w.first.Sub(bodies[0].firstEvent)))
			live[2] = append(live[2], ms(w.delta.Sub(start)))
			live[3] = append(live[3], ms(w.delta.Sub(bodies[1].firstDelta)))
		}
		// Synthetic: the same upstream, each round answered when it is done.
		{
			x, _ := ic.RewriteRequest([]byte(body))
			var n int
			var lastDelta time.Time
			up := UpstreamFunc(func(context.Context, []byte) (int, http.Header, []byte, error) {
				time.Sleep(tokens * perToken)
				r := [][]byte{round0, round1}[n]
				n++
				lastDelta = time.Now().Add(-(tokens - 1) * perToken) // when its first delta would have been
				return 200, jsonHeader(), r, nil
			})
			start := time.Now()
			st, hdr, first, _ := up.CreateResponse(context.Background(), x.UpstreamBody())
			if _, err := x.CompleteResponse(context.Background(), up, st, hdr, first); err != nil {
				b.Fatal(err)
			}
			done := time.Now() // the whole body is the first byte and the first delta
			synth[0] = append(synth[0], ms(done.Sub(start)))
			synth[2] = append(synth[2], ms(done.Sub(start)))
			synth[3] = append(synth[3], ms(done.Sub(lastDelta)))
		}
	}
	median := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	b.ReportMetric(median(live[0]), "live-first-byte-ms")
	b.ReportMetric(median(live[1]), "live-first-byte-after-upstream-ms")
	b.ReportMetric(median(live[2]), "live-final-delta-ms")
	b.ReportMetric(median(live[3]), "live-final-delta-after-upstream-ms")
	b.ReportMetric(median(synth[0]), "synthetic-first-byte-ms")
	b.ReportMetric(median(synth[2]), "synthetic-final-delta-ms")
	b.ReportMetric(median(synth[3]), "synthetic-final-delta-after-upstream-ms")
}

// eventReader hands out one event per Read and stamps when it did.
type eventReader struct {
	evs   [][]byte
	next  int
	off   int
	given []time.Time
}

func (r *eventReader) Read(p []byte) (int, error) {
	if r.next == len(r.evs) {
		return 0, io.EOF
	}
	e := r.evs[r.next]
	n := copy(p, e[r.off:])
	r.off += n
	if r.off == len(e) {
		r.given = append(r.given, time.Now())
		r.next++
		r.off = 0
	}
	return n, nil
}

// countWriter stamps each Write (the live path writes once per upstream
// event it passes).
type countWriter struct{ at []time.Time }

func (w *countWriter) Write(p []byte) (int, error) {
	w.at = append(w.at, time.Now())
	return len(p), nil
}

// BenchmarkLivePassThrough measures what the live path adds to each
// upstream event it passes through (a text delta: parse, renumber,
// re-index, write): ns per event, and the median per-event latency from the
// event's arrival to its write.
func BenchmarkLivePassThrough(b *testing.B) {
	ic := newRewriter(b, nil)
	const n = 500
	resp := benchResponse("resp_0", msgItem(strings.TrimSpace(strings.Repeat("token ", n))))
	var evs [][]byte
	for _, e := range benchStream(b, resp, n) {
		evs = append(evs, []byte("event: "+e.Name+"\ndata: "+e.Data.Raw+"\n\n"))
	}
	body := []byte(`{"model":"m","input":"go","stream":true,"tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`)
	var lat []time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		x, _ := ic.RewriteRequest(body)
		x.StreamLive()
		r := &eventReader{evs: evs}
		w := &countWriter{at: make([]time.Time, 0, len(evs))}
		if err := x.StreamResponse(context.Background(), nil, 200, nil, r, w); err != nil {
			b.Fatal(err)
		}
		// Writes and events pair up after the opening two (created and
		// in_progress are written together with nothing else).
		if len(w.at) >= len(r.given) {
			for k := 2; k < len(r.given)-1; k++ {
				lat = append(lat, w.at[k].Sub(r.given[k]))
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/event")
	if len(lat) > 0 {
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "median-ns/event")
	}
	b.ReportMetric(float64(len(evs)), "events")
}
