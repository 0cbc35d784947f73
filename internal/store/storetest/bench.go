package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/internal/store"
)

// BenchmarkResponses measures the lookups a conversation's next turn makes
// in s — one response (previous_response_id), its 20-turn chain in one
// round trip (history: expand), one item (item_reference) — and a put, on
// responses of about 1.5 KiB, the same for every implementation so their
// figures sit side by side.
func BenchmarkResponses(b *testing.B, s store.Responses) {
	ctx := context.Background()
	ids := make([]string, 20)
	for k := range ids {
		ids[k] = fmt.Sprintf("resp_bench%02d", k)
		if err := s.PutResponse(ctx, benchResponse(ids[k], ids[:k])); err != nil {
			b.Fatal(err)
		}
	}
	last := ids[len(ids)-1]
	b.Run("get", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.GetResponse(ctx, alice, last); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("get-chain-20", func(b *testing.B) {
		for b.Loop() {
			if rs, err := s.GetResponses(ctx, alice, ids); err != nil || len(rs) != len(ids) {
				b.Fatal(len(rs), err)
			}
		}
	})
	b.Run("find-item", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.FindItem(ctx, alice, "ci_"+last); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("put", func(b *testing.B) {
		r := benchResponse("resp_benchput", ids)
		for b.Loop() {
			if err := s.PutResponse(ctx, r); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func benchResponse(id string, history []string) store.Response {
	text := strings.Repeat("The mean is 1234.5 and the deviation 987.6. ", 10)
	return store.Response{
		ID: id, Owner: alice, History: append([]string(nil), history...), UpstreamID: "up_" + id, UpstreamStored: true,
		Object:     json.RawMessage(`{"id":"` + id + `","object":"response","output":[{"type":"message","content":[{"type":"output_text","text":"` + text + `"}]}]}`),
		Input:      []json.RawMessage{json.RawMessage(`{"id":"msg_in","type":"message","role":"user","content":"Compute the statistics."}`)},
		ModelInput: []json.RawMessage{json.RawMessage(`{"type":"message","role":"user","content":"Compute the statistics."}`)},
		Items: []store.ResponseItem{
			{ID: "ci_" + id, Model: []json.RawMessage{
				json.RawMessage(`{"type":"function_call","call_id":"call_1","name":"code_interpreter","arguments":"{\"code\":\"print(1)\"}"}`),
				json.RawMessage(`{"type":"function_call_output","call_id":"call_1","output":"status: completed\nstdout:\n1\n"}`)}},
			{ID: "msg_" + id, Model: []json.RawMessage{json.RawMessage(`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"` + text + `"}]}`)}},
		},
	}
}
