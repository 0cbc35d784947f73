package e2e

import (
	"bufio"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkLiveStreamThroughProxy is a two-round code_interpreter stream
// through the front proxy, the gRPC filter and the sandbox: the model
// streams every event 20 ms after the previous one (≈ 50 tokens a round),
// as a real model produces tokens. It reports, live and synthetic side by
// side, when the client's first byte arrives after the model's first event,
// when the final round's first text delta arrives after the model sent it,
// and the median delay the gateway adds to each text delta of the final
// round (target ≤ 50 ms, ≤ 50 ms and ≤ 0.2 ms live).
func BenchmarkLiveStreamThroughProxy(b *testing.B) {
	sh := loadShapes(b)
	const perEvent = 20 * time.Millisecond
	answer := strings.TrimSpace(strings.Repeat("token ", 50))
	for _, mode := range []struct {
		name      string
		synthetic bool
	}{{"live", false}, {"synthetic", true}} {
		b.Run(mode.name, func(b *testing.B) {
			var m *model
			s := newStack(b, sh, func(t testing.TB, c *convo) reply {
				if len(c.outputs()) == 0 {
					return reply{items: []string{m.call("total = sum(i * i for i in range(1, 11))\nprint(total)")}}
				}
				return reply{items: []string{m.message(answer)}}
			}, stackOptions{synthetic: mode.synthetic, eventDelay: perEvent, quiet: true})
			m = s.model
			body, err := json.Marshal(ciParams("sum of squares", true))
			if err != nil {
				b.Fatal(err)
			}
			var req map[string]any
			_ = json.Unmarshal(body, &req)
			req["stream"] = true
			body, _ = json.Marshal(req)
			client := &http.Client{}
			var firstByte, finalDelta, perDelta []time.Duration
			for b.Loop() {
				m.mu.Lock()
				m.sent = map[int][]sentEvent{}
				m.requests = nil
				m.mu.Unlock()
				arrivals := streamArrivals(b, client, s.proxyURL+"/v1/responses", string(body))
				m.mu.Lock()
				sent := m.sent
				m.mu.Unlock()
				if len(sent) != 2 || len(arrivals) == 0 {
					b.Fatalf("model streamed %d rounds, client got %d events", len(sent), len(arrivals))
				}
				firstByte = append(firstByte, arrivals[0].at.Sub(sent[0][0].at))
				sentDeltas := ofType(sent[1], "response.output_text.delta")
				gotDeltas := ofType(arrivals, "response.output_text.delta")
				if len(sentDeltas) == 0 || len(gotDeltas) != len(sentDeltas) {
					b.Fatalf("model sent %d text deltas, client got %d", len(sentDeltas), len(gotDeltas))
				}
				finalDelta = append(finalDelta, gotDeltas[0].Sub(sentDeltas[0]))
				var lat []time.Duration
				for i := range gotDeltas {
					lat = append(lat, gotDeltas[i].Sub(sentDeltas[i]))
				}
				slices.Sort(lat)
				perDelta = append(perDelta, lat[len(lat)/2])
			}
			ms := func(ds []time.Duration) float64 {
				med, _ := quantiles(ds)
				return med / 1000
			}
			b.ReportMetric(ms(firstByte), "first-byte-after-upstream-ms")
			b.ReportMetric(ms(finalDelta), "final-delta-after-upstream-ms")
			b.ReportMetric(ms(perDelta), "added-per-delta-median-ms")
		})
	}
}

// streamArrivals posts body and records when each event arrived (at the
// client, after the front proxy).
func streamArrivals(b *testing.B, c *http.Client, u, body string) []sentEvent {
	resp, err := post(c, u, body)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b.Fatalf("status %d, content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var out []sentEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		if typ, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			out = append(out, sentEvent{typ, time.Now()})
		}
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	return out
}

// ofType are the times of the events of type typ.
func ofType(evs []sentEvent, typ string) []time.Time {
	var out []time.Time
	for _, e := range evs {
		if e.typ == typ {
			out = append(out, e.at)
		}
	}
	return out
}
