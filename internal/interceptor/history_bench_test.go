package interceptor

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/memory"
)

// BenchmarkHistory is what conversations add to a request, side by side:
// NewExchange (as the filter calls it) for turn 1 of a conversation, and
// for turn 21 of a 20-turn one continued by previous_response_id — expanded
// from the store (history: expand), or mapped to the model server's id
// (upstream) — and a pass-through request that must not pay for any of it.
// The store is the in-process one; store/redis's BenchmarkResponses
// measures a Redis lookup.
func BenchmarkHistory(b *testing.B) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		mode HistoryMode
		body func(last string) []byte
		want func(upstream string) bool // what the model server is sent
	}{
		{"turn1", HistoryExpand, func(string) []byte {
			return []byte(`{"model":"gpt-5.6","tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"input":"What is 6 times 7?"}`)
		}, func(up string) bool { return !strings.Contains(up, "function_call_output") }},
		{"turn21-expand", HistoryExpand, turn21, func(up string) bool {
			return strings.Count(up, `"function_call_output"`) == 20 && !strings.Contains(up, "previous_response_id")
		}},
		{"turn21-upstream", HistoryUpstream, turn21, func(up string) bool {
			return strings.Contains(up, `"previous_response_id":"resp_up19"`) && !strings.Contains(up, "function_call_output")
		}},
		{"pass-through-100KiB", HistoryExpand, func(string) []byte { return requestOfSize(100<<10, false) }, func(string) bool { return true }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			rs := memory.NewResponses(store.DefaultResponseLimits(), nil)
			ic := newRewriter(b, func(c *Config) { c.History = tc.mode })
			ic.responses = rs
			last := storeConversation(b, rs, 20)
			body := tc.body(last)
			x, err := ic.NewExchange(ctx, Caller{Owner: "alice"}, body)
			if err != nil || !tc.want(string(x.UpstreamBody())) {
				b.Fatalf("the model server would get %.400s (%v)", x.UpstreamBody(), err)
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ic.NewExchange(ctx, Caller{Owner: "alice"}, body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func turn21(last string) []byte {
	return []byte(`{"model":"gpt-5.6","tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"previous_response_id":"` + last +
		`","input":"And what was x again?"}`)
}

// storeConversation stores a chain of n responses for alice, each a turn
// as the store keeps one: the question, a call with its code and output,
// the answer (about 1.5 KiB a turn); it returns the last id.
func storeConversation(b *testing.B, rs store.Responses, n int) string {
	b.Helper()
	var history []string
	prev := ""
	for k := range n {
		if prev != "" {
			history = append(history, prev)
		}
		id := idgen.Random("resp_", 50)
		ci, msg := idgen.Random("ci_", 50), idgen.Random("msg_", 50)
		code := "import statistics\nvalues = [i * i for i in range(" + strconv.Itoa(k+10) + ")]\nprint(statistics.mean(values), statistics.pstdev(values))\n"
		fc := fcItem("call_"+strconv.Itoa(k), code)
		out := `{"type":"function_call_output","call_id":"call_` + strconv.Itoa(k) + `","output":` + jsonx.Quote("status: completed\nstdout:\n1234.5 987.6\nstderr: (empty)\n") + `}`
		answer := msgItem("The mean is 1234.5 and the standard deviation 987.6; the values grow quadratically, as expected.")
		r := store.Response{
			ID: id, Owner: "alice", Previous: prev, History: append([]string(nil), history...),
			UpstreamID: "resp_up" + strconv.Itoa(k), UpstreamStored: true,
			Object:     json.RawMessage(`{"id":"` + id + `","object":"response","output":[]}`),
			Input:      rawItems([]string{userMessage(`"Compute the statistics, please."`)}),
			ModelInput: rawItems([]string{userMessage(`"Compute the statistics, please."`)}),
			Items: []store.ResponseItem{
				{ID: ci, Model: rawItems([]string{fc, out})},
				{ID: msg, Model: rawItems([]string{answer})},
			},
		}
		if err := rs.PutResponse(context.Background(), r); err != nil {
			b.Fatal(err)
		}
		prev = id
	}
	return prev
}
