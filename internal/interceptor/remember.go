package interceptor

import (
	"context"
	"encoding/json"

	"github.com/tidwall/gjson"
	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/codeinterp/codeinterp/internal/store"
)

// remember keeps a finished response in the response store (WithResponses)
// unless the request said "store": false — what the client got (with every
// call's outputs), what the model saw of each item, the model server's id
// behind it — and appends its input and output to the conversation it
// continues. Both paths call it once, after their last round. A failure to
// store is logged; the client still gets its response.
func (l *loop) remember(ctx context.Context, rounds []*round) {
	x := l.x
	keep := x.ic.responses != nil && x.respID != "" && !x.req.storeOff
	if (!keep && x.hist.conv == "") || x.owner == "" || len(rounds) == 0 {
		return
	}
	obj := l.splice(rounds, true)
	l.kept = obj
	items := l.modelItems(rounds)
	input := withIDs(x.hist.clientInput, x.req.clientInput)
	if x.hist.conv != "" {
		l.appendToConversation(ctx, input, obj, items)
	}
	if !keep {
		return
	}
	last := rounds[len(rounds)-1]
	rec := store.Response{
		ID:          x.respID,
		Owner:       x.owner, // CreatedAt: the store's clock
		UpstreamID:  last.id,
		ContainerID: l.storedContainer(),
		Object:      json.RawMessage(obj),
		Input:       rawItems(input),
		ModelInput:  rawItems(arrayElems(x.req.input)[x.hist.expanded:]),
		Items:       items,
	}
	// A last round with calls of ours was answered to the client alone (a
	// limit stopped the loop, or the turn also called the client's tools):
	// the model server's chain ends at unanswered function_calls, so a
	// continuation through it sends their outputs first.
	rec.UpstreamStored = last.stored
	if len(last.calls) > 0 {
		rec.Pending = rawItems(functionOutputs(last, x.req.includeOutputs))
	}
	if p := x.hist.prev; p != nil {
		rec.Previous = p.ID
		rec.History = append(append([]string(nil), p.History...), p.ID)
	}
	if err := x.ic.responses.PutResponse(ctx, rec); err != nil {
		l.log.Warn("response not stored: it cannot be continued or read back", zap.String("response_id", rec.ID), zap.Error(err))
	}
}

// appendToConversation appends the request's input items (those the
// conversation does not hold yet) and the response's output items to its
// conversation, all at once.
func (l *loop) appendToConversation(ctx context.Context, input []string, obj []byte, items []store.ResponseItem) {
	x := l.x
	var add []store.ConversationItem
	for k, it := range input {
		id := gjson.Get(it, "id").Str
		if x.hist.convIDs[id] || gjson.Get(it, "type").Str == "item_reference" {
			continue
		}
		ci := store.ConversationItem{ID: id, Item: json.RawMessage(it)}
		if k < len(x.hist.ownModel) {
			ci.Model = rawItems(x.hist.ownModel[k])
		}
		add = append(add, ci)
	}
	out := gjson.GetBytes(obj, "output").Array()
	for k, it := range items {
		if k >= len(out) || it.ID == "" || x.hist.convIDs[it.ID] {
			continue
		}
		add = append(add, store.ConversationItem{ID: it.ID, Item: json.RawMessage(out[k].Raw), Model: it.Model})
	}
	if err := x.ic.conversations.AppendItems(ctx, x.owner, x.hist.conv, add); err != nil {
		l.log.Warn("conversation not updated: this turn is not in it", zap.String("conversation_id", x.hist.conv), zap.Error(err))
	}
}

// storedContainer is the container a continuation may reuse: a kept
// container's id, "" for an unnamed session.
func (l *loop) storedContainer() string {
	if l.x.ctr != nil {
		return l.x.ctr.ID()
	}
	return ""
}

// modelItems pairs each output item the client saw with what the model
// saw of it: our calls as the model's function_call and the
// function_call_output it was (or, for a continuation, is to be) answered
// with.
func (l *loop) modelItems(rounds []*round) []store.ResponseItem {
	var out []store.ResponseItem
	for _, rd := range rounds {
		outputs := functionOutputs(rd, l.x.req.includeOutputs)
		for idx, it := range rd.items {
			if c := rd.callAt[idx]; c != nil {
				out = append(out, callItems(c, it.Raw, outputs[indexOf(rd.calls, c)])...)
				continue
			}
			if it.Get("type").Str == "function_call_output" {
				continue
			}
			out = append(out, store.ResponseItem{ID: it.Get("id").Str, Model: rawItems([]string{it.Raw})})
		}
	}
	return out
}

// callItems pairs the client's items of c with what the model saw: one
// item is both the function_call and its output; of several (the shell's
// shell_call and shell_call_output) the first is the call, the last its
// output.
func callItems(c *call, fc, fco string) []store.ResponseItem {
	ids := c.itemIDs()
	if len(ids) == 1 {
		return []store.ResponseItem{{ID: ids[0], Model: rawItems([]string{fc, fco})}}
	}
	out := make([]store.ResponseItem, len(ids))
	for k, id := range ids {
		out[k] = store.ResponseItem{ID: id}
	}
	out[0].Model = rawItems([]string{fc})
	out[len(out)-1].Model = rawItems([]string{fco})
	return out
}

func indexOf(calls []*call, c *call) int {
	for k, d := range calls {
		if d == c {
			return k
		}
	}
	return -1
}

// withIDs is the request's input items for input_items: each with an id,
// as OpenAI lists them (an item the client sent without one gets one).
// items is the client's input when history resolution saw it, else raw is
// the upstream input of this request (no history prefix in that case).
func withIDs(items []string, raw string) []string {
	if items == nil {
		items = inputItems(gjson.Parse(raw))
	}
	out := make([]string, 0, len(items))
	for _, it := range items {
		v := gjson.Parse(it)
		if !v.IsObject() || v.Get("id").Str != "" {
			out = append(out, it)
			continue
		}
		typ := v.Get("type").Str
		if typ == "" && v.Get("role").Exists() {
			typ = "message"
		}
		out = append(out, string(jsonx.EditObject(it, jsonx.Set("id", jsonx.Quote(idgen.NewItem(typ))))))
	}
	return out
}
