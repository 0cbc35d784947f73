package interceptor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/tidwall/gjson"
	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/codeinterp/codeinterp/internal/store"
)

// This file is the request side of conversations: a request that continues
// one of this server's stored responses (previous_response_id), references
// its items (item_reference) or replays its code_interpreter_call items
// without their outputs is given what the model really saw, from the store
// (WithResponses). The response side — storing what a response made — is
// remember, in remember.go.

// HistoryMode says how a request continuing one of our responses reaches
// the model server.
type HistoryMode string

// The history modes.
const (
	// HistoryAuto uses the model server's own state when it stored the
	// response's last round, else expands.
	HistoryAuto HistoryMode = "auto"
	// HistoryUpstream maps our response id to the model server's id of
	// the response's last round.
	HistoryUpstream HistoryMode = "upstream"
	// HistoryExpand sends the conversation itself: every earlier request's
	// input and every response's items as the model saw them (code calls
	// as function_call and function_call_output pairs), for model servers
	// that keep no state.
	HistoryExpand HistoryMode = "expand"
)

// WithResponses keeps the responses this server makes in r (unless a
// request says "store": false) and resolves previous_response_id,
// item_reference and replayed calls against it. Every intercepted response
// then gets an id of this server's ("resp_…"), the same for buffered and
// live answers.
func WithResponses(r store.Responses) Option { return func(i *Interceptor) { i.responses = r } }

// WithConversations keeps OpenAI's Conversations in c: a request with
// "conversation": id (one of c's) gets the conversation's items in front of
// its input, and its input and output are appended to it once it is
// answered — in front of any model server.
func WithConversations(c store.Conversations) Option {
	return func(i *Interceptor) { i.conversations = c }
}

// history is what resolveHistory did to a request.
type history struct {
	changed bool
	// prevRaw is the client's previous_response_id (raw JSON), which the
	// response echoes; prev is our stored response it names, or nil.
	prevRaw string
	prev    *store.Response
	// conv is our conversation the request continues ("" for none), and
	// convIDs the ids of the items it holds.
	conv    string
	convIDs map[string]bool
	// expanded is how many items at the head of the upstream input are
	// the expanded conversation (not this request's own input).
	expanded int
	// clientInput is the request's input items as the client sent them,
	// and ownModel what the model got of each.
	clientInput []string
	ownModel    [][]string
	// reuse are containers of the responses continued or referenced,
	// newest first, for a container of type auto.
	reuse []string
}

// ours says the request continues a response or a conversation of this
// server's: its answer is ours to make, and to keep.
func (h *history) ours() bool { return h.prev != nil || h.conv != "" }

// mayUseHistory is a quick test that body may use history of ours; its
// absence keeps the pass-through path free of parsing. One scan for '_' (a
// rare byte, as for the tool markers) finds "_response_id", "_reference"
// and the tool's markers — the tool, because an item_reference may come
// without its type (openai-go sends {"id": …}), which no marker shows;
// a code_interpreter_call item, which may be one to look up — and one more
// finds the conversation parameter. A key spelled with
// escapes is missed: such a request reaches the model server as it is.
func mayUseHistory(body []byte) bool {
	for b := body; ; b = b[1:] {
		i := bytes.IndexByte(b, '_')
		if i < 0 {
			break
		}
		b = b[i:]
		if bytes.HasPrefix(b, toolMarker) || bytes.HasPrefix(b, callMarker) || bytes.HasPrefix(b, prevMarker) || bytes.HasPrefix(b, refMarker) || bytes.HasPrefix(b, autoMarker) {
			return true
		}
	}
	return bytes.Contains(body, convMarker)
}

var (
	prevMarker = []byte(`_response_id"`)
	refMarker  = []byte(`_reference"`)
	convMarker = []byte(`versation"`)
)

// resolveHistory rewrites body against the owner's stored responses and
// conversations. It returns body unchanged (h.changed false) when nothing
// in it is ours.
func (i *Interceptor) resolveHistory(ctx context.Context, owner string, body []byte) ([]byte, *history, error) {
	h := &history{}
	if (i.responses == nil && i.conversations == nil) || owner == "" || !mayUseHistory(body) {
		return body, h, nil
	}
	doc := string(body)
	root := gjson.Parse(doc)
	if !root.IsObject() {
		return body, h, nil
	}
	input := root.Get("input")
	var edits []jsonx.Edit
	var prefix []string

	pr, conv := root.Get("previous_response_id"), conversationID(root.Get("conversation"))
	// Validated only when there is something to look up: most requests
	// with the tool continue nothing, and rewriteRequest validates them.
	lookups := (pr.Type == gjson.String && pr.Str != "" && i.responses != nil) ||
		(conv != "" && i.conversations != nil) || (i.responses != nil && anyResolvable(input))
	if !lookups || !gjson.Valid(doc) {
		return body, h, nil
	}
	var prev *store.Response
	if pr.Type == gjson.String && pr.Str != "" && i.responses != nil {
		rec, err := i.responses.GetResponse(ctx, owner, pr.Str)
		switch {
		case errors.Is(err, store.ErrNotFound) && idgen.Tagged(pr.Str, "resp_"):
			// Ours, but gone (expired, deleted, store: false, or another
			// credential's): OpenAI's answer, not a model server's guess.
			return nil, nil, &apierror.Error{Status: http.StatusBadRequest, Type: apierror.TypeInvalidRequest, Param: "previous_response_id",
				Code: "previous_response_not_found", Message: "Previous response with id '" + pr.Str + "' not found."}
		case errors.Is(err, store.ErrNotFound):
			// Not ours: the model server's business.
		case err != nil:
			i.log.Error("response store lookup failed", zap.Error(err))
			return nil, nil, storeUnavailable()
		default:
			prev = &rec
		}
	}
	var convItems []store.ConversationItem
	if conv != "" && i.conversations != nil {
		items, err := i.conversations.Items(ctx, owner, conv)
		switch {
		case errors.Is(err, store.ErrNotFound) && idgen.Tagged(conv, "conv_"):
			return nil, nil, &apierror.Error{Status: http.StatusNotFound, Type: apierror.TypeInvalidRequest, Param: "conversation",
				Message: "Conversation with id '" + conv + "' not found."}
		case errors.Is(err, store.ErrNotFound):
			// The model server's own conversation, or none: its business.
		case err != nil:
			i.log.Error("conversation store lookup failed", zap.Error(err))
			return nil, nil, storeUnavailable()
		default:
			h.conv, convItems = conv, items
		}
	}
	if (prev != nil || h.conv != "") && pr.Exists() && pr.Type != gjson.Null && conv != "" {
		return nil, nil, &apierror.Error{Status: http.StatusBadRequest, Type: apierror.TypeInvalidRequest, Code: "mutually_exclusive_parameters",
			Message: "Mutually exclusive parameters: Ensure you are only providing one of: 'previous_response_id' or 'conversation'."}
	}
	switch {
	case prev != nil:
		h.prev, h.prevRaw = prev, pr.Raw
		if prev.ContainerID != "" {
			h.reuse = append(h.reuse, prev.ContainerID)
		}
		if i.useUpstream(*prev) {
			edits = append(edits, jsonx.Set("previous_response_id", jsonx.Quote(prev.UpstreamID)))
			for _, m := range prev.Pending {
				prefix = append(prefix, string(m))
			}
		} else {
			items, err := i.expand(ctx, owner, *prev)
			if err != nil {
				return nil, nil, err
			}
			prefix = items
			edits = append(edits, jsonx.Del("previous_response_id"))
		}
	case h.conv != "":
		h.convIDs = make(map[string]bool, len(convItems))
		for k := len(convItems) - 1; k >= 0; k-- {
			it := convItems[k]
			h.convIDs[it.ID] = true
			if id := i.itemContainer(gjson.ParseBytes(it.Item)); id != "" {
				h.reuse = append(h.reuse, id)
			}
		}
		for _, it := range convItems {
			if len(it.Model) == 0 {
				prefix = append(prefix, string(it.Item))
				continue
			}
			for _, m := range it.Model {
				prefix = append(prefix, string(m))
			}
		}
		edits = append(edits, jsonx.Del("conversation"))
	}

	own, changed, reuse, err := i.resolveItems(ctx, owner, input)
	if err != nil {
		return nil, nil, err
	}
	h.reuse = append(h.reuse, reuse...)
	if !h.ours() && !changed {
		return body, h, nil
	}
	h.changed = true
	h.clientInput = inputItems(input)
	h.ownModel = own
	h.expanded = len(prefix)
	all := prefix
	for _, m := range own {
		all = append(all, m...)
	}
	edits = append(edits, jsonx.Set("input", string(jsonx.AppendArray(nil, all))))
	out := jsonx.EditObject(doc, edits...)
	if max := i.cfg.MaxBodyBytes; max > 0 && len(out) > max && len(body) <= max {
		param := "previous_response_id"
		if h.conv != "" {
			param = "conversation"
		}
		return nil, nil, &apierror.Error{Status: http.StatusBadRequest, Type: apierror.TypeInvalidRequest, Param: param, Code: "context_too_large",
			Message: fmt.Sprintf("The conversation this request continues is %d bytes with its history; this server sends at most %d to the model. Start a new conversation, or continue from a later response.", len(out), max)}
	}
	return out, h, nil
}

// conversationID reads the conversation parameter: an id, or {"id": id}.
func conversationID(c gjson.Result) string {
	switch {
	case c.Type == gjson.String:
		return c.Str
	case c.IsObject():
		return c.Get("id").Str
	}
	return ""
}

// adopt records what history resolution did to the request of x, whose
// body was resolved: the client's previous_response_id is what the
// response echoes, a request changed only by its history is Modified, and
// an intercepted response gets an id of ours.
func (x *Exchange) adopt(h *history, resolved []byte) {
	x.hist = *h
	if h.changed {
		if h.prev != nil {
			x.req.clientPrevID = h.prevRaw
		}
		if !x.req.modified {
			x.req.modified, x.req.upstream = true, resolved
		}
	}
	if (x.ic.responses != nil || h.conv != "") && x.req.intercepted {
		x.respID = idgen.NewTagged("resp_", 50)
	}
}

// useUpstream reports whether a continuation of rec goes through the model
// server's own state.
func (i *Interceptor) useUpstream(rec store.Response) bool {
	switch i.cfg.History {
	case HistoryUpstream:
		return rec.UpstreamID != ""
	case HistoryExpand:
		return false
	}
	return rec.UpstreamID != "" && rec.UpstreamStored
}

// expand is the conversation up to and including rec, as the model saw it.
func (i *Interceptor) expand(ctx context.Context, owner string, rec store.Response) ([]string, error) {
	chain, err := i.responses.GetResponses(ctx, owner, rec.History)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, &apierror.Error{Status: http.StatusBadRequest, Type: apierror.TypeInvalidRequest, Param: "previous_response_id", Code: "previous_response_not_found",
			Message: "Previous response with id '" + rec.ID + "' continues a conversation of which an earlier response was deleted or has expired; its history cannot be rebuilt."}
	case err != nil:
		i.log.Error("response store lookup failed", zap.Error(err))
		return nil, storeUnavailable()
	}
	chain = append(chain, rec)
	var out []string
	for _, r := range chain {
		for _, m := range r.ModelInput {
			out = append(out, string(m))
		}
		for _, it := range r.Items {
			for _, m := range it.Model {
				out = append(out, string(m))
			}
		}
	}
	return out, nil
}

// resolveItems replaces, in the request's input, every item_reference to
// an item of ours and every replayed code_interpreter_call of ours that
// lacks its outputs by what the model saw of that item. Other items are
// kept as they are. items holds, per input item, what the model gets.
func (i *Interceptor) resolveItems(ctx context.Context, owner string, input gjson.Result) (items [][]string, changed bool, reuse []string, err error) {
	if !input.IsArray() {
		if input.Type == gjson.String {
			return [][]string{{userMessage(input.Raw)}}, false, nil, nil
		}
		return nil, false, nil, nil
	}
	var found []store.Response // the responses looked up so far
	input.ForEach(func(_, it gjson.Result) bool {
		id, ok := resolvable(it)
		if !ok || i.responses == nil {
			items = append(items, []string{it.Raw})
			return true
		}
		// A client replays a response's items together (a call, then the
		// answer): one lookup serves all the items of a response found.
		rec, e := cachedItem(found, id)
		if e != nil {
			rec, e = i.responses.FindItem(ctx, owner, id)
			if e == nil {
				found = append(found, rec)
			}
		}
		if errors.Is(e, store.ErrNotFound) {
			if it.Get("type").Str != "code_interpreter_call" && idgen.Tagged(id, "ci_") {
				// A reference to a call of ours that is gone: the model
				// server never knew it.
				err = &apierror.Error{Status: http.StatusNotFound, Type: apierror.TypeInvalidRequest, Param: "input",
					Message: "Item with id '" + id + "' not found. Items are not persisted when `store` is set to false. Try again with `store` set to true, or remove this item from your input."}
				return false
			}
			items = append(items, []string{it.Raw})
			return true
		}
		if e != nil {
			i.log.Error("response store lookup failed", zap.Error(e))
			err = storeUnavailable()
			return false
		}
		model := []string{it.Raw}
		for _, ri := range rec.Items {
			if ri.ID == id && len(ri.Model) > 0 {
				model = model[:0]
				for _, m := range ri.Model {
					model = append(model, string(m))
				}
				changed = true
				if rec.ContainerID != "" {
					reuse = append([]string{rec.ContainerID}, reuse...)
				}
				break
			}
		}
		items = append(items, model)
		return true
	})
	return items, changed, reuse, err
}

// cachedItem returns the response of found that holds the item id, or
// store.ErrNotFound.
func cachedItem(found []store.Response, id string) (store.Response, error) {
	for _, r := range found {
		if r.HasItem(id) {
			return r, nil
		}
	}
	return store.Response{}, store.ErrNotFound
}

// resolvable says whether an input item may stand for a stored item of
// ours, and its id: an item_reference (with or without its type), or a code_interpreter_call replayed
// without outputs (null, [] or missing: what the Agents SDK and LangChain
// send back).
func resolvable(it gjson.Result) (string, bool) {
	id := it.Get("id")
	if id.Type != gjson.String || id.Str == "" {
		return "", false
	}
	typ := it.Get("type")
	switch {
	case typ.Str == "item_reference":
		return id.Str, true
	case !typ.Exists() || typ.Type == gjson.Null:
		// An item_reference may leave its type out (openai-go does); a
		// message without a type has a role.
		return id.Str, !it.Get("role").Exists()
	}
	switch typ.Str {
	case "code_interpreter_call":
		o := it.Get("outputs")
		return id.Str, !o.Exists() || o.Type == gjson.Null || (o.IsArray() && len(o.Array()) == 0)
	}
	return "", false
}

// anyResolvable reports whether input has an item resolveItems may look up.
func anyResolvable(input gjson.Result) bool {
	found := false
	input.ForEach(func(_, it gjson.Result) bool {
		_, found = resolvable(it)
		return !found
	})
	return found
}

func inputItems(input gjson.Result) []string {
	switch {
	case input.IsArray():
		return arrayElems(input.Raw)
	case input.Type == gjson.String:
		return []string{userMessage(input.Raw)}
	}
	return nil
}

func userMessage(content string) string {
	return string(jsonx.AppendEditedObject(nil, `{}`, jsonx.Set("type", `"message"`), jsonx.Set("role", `"user"`), jsonx.Set("content", content)))
}

func storeUnavailable() *apierror.Error {
	return &apierror.Error{Status: http.StatusInternalServerError, Type: apierror.TypeServer,
		Message: "The response store is unavailable; try again later."}
}

// rawItems converts raw JSON strings to the store's form.
func rawItems(items []string) []json.RawMessage {
	out := make([]json.RawMessage, len(items))
	for k, s := range items {
		out[k] = json.RawMessage(s)
	}
	return out
}
