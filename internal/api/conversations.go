package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/store"
)

// This file is OpenAI's Conversations API over Config.Conversations:
// POST /v1/conversations, GET/POST/DELETE /v1/conversations/{id}, and
// POST/GET /v1/conversations/{id}/items, GET/DELETE …/items/{item_id}.
// The interceptor reads a conversation's items in front of a response's
// input and appends each response to it (interceptor.WithConversations),
// so conversations work in front of any model server.

// OpenAI's bounds (its API reference and SDKs): at most 20 items per
// create call, 16 metadata pairs, keys of at most 64 and values of at most
// 512 characters.
const (
	maxCreateItems     = 20
	maxMetadataPairs   = 16
	maxMetadataKeyLen  = 64
	maxMetadataValLen  = 512
	conversationObject = "conversation"
)

type conversationJSON struct {
	ID        string          `json:"id"`
	Object    string          `json:"object"`
	CreatedAt int64           `json:"created_at"`
	Metadata  json.RawMessage `json:"metadata"`
}

func conversationOf(c store.Conversation) conversationJSON {
	md := c.Metadata
	if len(md) == 0 || string(md) == "null" {
		md = json.RawMessage(`{}`)
	}
	return conversationJSON{ID: c.ID, Object: conversationObject, CreatedAt: c.CreatedAt, Metadata: md}
}

// createConversation is POST /v1/conversations.
func (s *Server) createConversation(w http.ResponseWriter, r *http.Request, owner string) {
	m, e := readJSONObject(w, r)
	if e != nil {
		writeError(w, e)
		return
	}
	for k := range m {
		if k != "items" && k != "metadata" {
			writeError(w, apierror.Invalid(k, "unknown_parameter", "Unknown parameter: '%s'.", k))
			return
		}
	}
	md, e := checkMetadata(m["metadata"])
	if e != nil {
		writeError(w, e)
		return
	}
	var items []store.ConversationItem
	if raw, ok := m["items"]; ok && string(raw) != "null" {
		if items, e = s.conversationItems(r, owner, raw); e != nil {
			writeError(w, e)
			return
		}
	}
	c := store.Conversation{ID: newConversationID(), Owner: owner, CreatedAt: s.now().Unix(), Metadata: md}
	if err := s.cfg.Conversations.PutConversation(r.Context(), c, items); err != nil {
		s.conversationError(w, r, err, c.ID)
		return
	}
	writeJSON(w, http.StatusOK, conversationOf(c))
}

// getConversation is GET /v1/conversations/{id}.
func (s *Server) getConversation(w http.ResponseWriter, r *http.Request, owner string) {
	id := r.PathValue("id")
	c, err := s.cfg.Conversations.GetConversation(r.Context(), owner, id)
	if err != nil {
		s.conversationError(w, r, err, id)
		return
	}
	writeJSON(w, http.StatusOK, conversationOf(c))
}

// updateConversation is POST /v1/conversations/{id}: {"metadata": …},
// required (null clears it). The new metadata replaces the old; a
// conversation that does not exist (or was just deleted) is a 404.
func (s *Server) updateConversation(w http.ResponseWriter, r *http.Request, owner string) {
	id := r.PathValue("id")
	m, e := readJSONObject(w, r)
	if e != nil {
		writeError(w, e)
		return
	}
	raw, ok := m["metadata"]
	if !ok {
		writeError(w, apierror.Invalid("metadata", "missing_required_parameter", "Missing required parameter: 'metadata'."))
		return
	}
	for k := range m {
		if k != "metadata" {
			writeError(w, apierror.Invalid(k, "unknown_parameter", "Unknown parameter: '%s'.", k))
			return
		}
	}
	md, e := checkMetadata(raw)
	if e != nil {
		writeError(w, e)
		return
	}
	// One atomic store call: a delete landing meanwhile leaves the
	// conversation deleted (404), never re-created empty.
	c, err := s.cfg.Conversations.UpdateConversation(r.Context(), owner, id, md)
	if err != nil {
		s.conversationError(w, r, err, id)
		return
	}
	writeJSON(w, http.StatusOK, conversationOf(c))
}

// deleteConversation is DELETE /v1/conversations/{id}.
func (s *Server) deleteConversation(w http.ResponseWriter, r *http.Request, owner string) {
	id := r.PathValue("id")
	if err := s.cfg.Conversations.DeleteConversation(r.Context(), owner, id); err != nil {
		s.conversationError(w, r, err, id)
		return
	}
	writeJSON(w, http.StatusOK, deletedObject{ID: id, Object: "conversation.deleted", Deleted: true})
}

// createItems is POST /v1/conversations/{id}/items: {"items": […]}, at
// most 20; the answer lists the items created.
func (s *Server) createItems(w http.ResponseWriter, r *http.Request, owner string) {
	id := r.PathValue("id")
	m, e := readJSONObject(w, r)
	if e != nil {
		writeError(w, e)
		return
	}
	raw, ok := m["items"]
	if !ok {
		writeError(w, apierror.Invalid("items", "missing_required_parameter", "Missing required parameter: 'items'."))
		return
	}
	items, e := s.conversationItems(r, owner, raw)
	if e != nil {
		writeError(w, e)
		return
	}
	if err := s.cfg.Conversations.AppendItems(r.Context(), owner, id, items); err != nil {
		s.conversationError(w, r, err, id)
		return
	}
	inc := slices.Contains(includes(r.URL.Query()), includeOutputs)
	writeJSON(w, http.StatusOK, newList(shownItems(items, inc), itemID, false))
}

// listItems is GET /v1/conversations/{id}/items.
func (s *Server) listItems(w http.ResponseWriter, r *http.Request, owner string) {
	id := r.PathValue("id")
	o, e := listOptions(r, 20, 100)
	if e != nil {
		writeError(w, e)
		return
	}
	page, more, err := s.cfg.Conversations.ListItems(r.Context(), owner, id, o)
	if err != nil {
		s.conversationError(w, r, err, id)
		return
	}
	inc := slices.Contains(includes(r.URL.Query()), includeOutputs)
	writeJSON(w, http.StatusOK, newList(shownItems(page, inc), itemID, more))
}

// getItem is GET /v1/conversations/{id}/items/{item_id}.
func (s *Server) getItem(w http.ResponseWriter, r *http.Request, owner string) {
	id, itemID := r.PathValue("id"), r.PathValue("item_id")
	it, err := s.cfg.Conversations.GetItem(r.Context(), owner, id, itemID)
	if err != nil {
		s.itemError(w, r, err, id, itemID)
		return
	}
	inc := slices.Contains(includes(r.URL.Query()), includeOutputs)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(shownItems([]store.ConversationItem{it}, inc)[0])
}

// deleteItem is DELETE /v1/conversations/{id}/items/{item_id}; the answer
// is the conversation, as OpenAI's is.
func (s *Server) deleteItem(w http.ResponseWriter, r *http.Request, owner string) {
	id, itemID := r.PathValue("id"), r.PathValue("item_id")
	if err := s.cfg.Conversations.DeleteItem(r.Context(), owner, id, itemID); err != nil {
		s.itemError(w, r, err, id, itemID)
		return
	}
	c, err := s.cfg.Conversations.GetConversation(r.Context(), owner, id)
	if err != nil {
		s.conversationError(w, r, err, id)
		return
	}
	writeJSON(w, http.StatusOK, conversationOf(c))
}

// conversationItems reads the items of a create: at most 20 objects, each
// given an id (and a status) when it has none, an easy message
// ({"role","content"}) as the message item it stands for, and an
// item_reference to an item of one of the caller's stored responses as
// that item.
func (s *Server) conversationItems(r *http.Request, owner string, raw json.RawMessage) ([]store.ConversationItem, *apierror.Error) {
	v := gjson.ParseBytes(raw)
	if !v.IsArray() {
		return nil, invalidType("items", "an array of items", raw)
	}
	arr := v.Array()
	if len(arr) > maxCreateItems {
		return nil, apierror.Invalid("items", "array_above_max_length", "Invalid 'items': array too long. Expected an array with maximum length %d, but got an array with length %d instead.", maxCreateItems, len(arr))
	}
	out := make([]store.ConversationItem, 0, len(arr))
	seen := map[string]bool{}
	for k, it := range arr {
		param := "items[" + strconv.Itoa(k) + "]"
		ci, e := s.conversationItem(r, owner, param, it)
		if e != nil {
			return nil, e
		}
		if seen[ci.ID] {
			return nil, apierror.Invalid(param+".id", "duplicate_item", "Duplicate item id '%s'.", ci.ID)
		}
		seen[ci.ID] = true
		out = append(out, ci)
	}
	return out, nil
}

func (s *Server) conversationItem(r *http.Request, owner, param string, it gjson.Result) (store.ConversationItem, *apierror.Error) {
	if !it.IsObject() {
		return store.ConversationItem{}, apierror.Invalid(param, "invalid_type", "Invalid type for '%s': expected an item object.", param)
	}
	typ := it.Get("type").Str
	if typ == "item_reference" || (typ == "" && it.Get("id").Exists() && !it.Get("role").Exists()) {
		return s.referencedItem(r, owner, param, it.Get("id").Str)
	}
	doc := it.Raw
	if typ == "" {
		if !it.Get("role").Exists() {
			return store.ConversationItem{}, apierror.Invalid(param+".type", "missing_required_parameter", "Missing required parameter: '%s.type'.", param)
		}
		typ = "message"
		doc, _ = sjson.Set(doc, "type", typ)
	}
	if typ == "message" {
		if c := it.Get("content"); c.Type == gjson.String {
			part := "input_text"
			if it.Get("role").Str == "assistant" {
				part = "output_text"
			}
			doc, _ = sjson.SetRaw(doc, "content", `[{"type":"`+part+`","text":`+c.Raw+`}]`)
		}
		if !it.Get("status").Exists() {
			doc, _ = sjson.Set(doc, "status", "completed")
		}
	}
	id := it.Get("id").Str
	switch {
	case !it.Get("id").Exists() || it.Get("id").Type == gjson.Null:
		id = idgen.NewItem(typ)
		doc, _ = sjson.Set(doc, "id", id)
	case !store.ValidID(id):
		return store.ConversationItem{}, apierror.Invalid(param+".id", "invalid_value", "Invalid '%s.id': expected an ID that contains letters, numbers, underscores, or dashes.", param)
	}
	return store.ConversationItem{ID: id, Item: json.RawMessage(doc)}, nil
}

// referencedItem is an item_reference of a create: the caller's stored
// response item, with what the model saw of it.
func (s *Server) referencedItem(r *http.Request, owner, param, id string) (store.ConversationItem, *apierror.Error) {
	notFound := apierror.NotFound(param+".id", "", "Item with id '%s' not found.", id)
	if s.cfg.Responses == nil || !store.ValidID(id) {
		return store.ConversationItem{}, notFound
	}
	rec, err := s.cfg.Responses.FindItem(r.Context(), owner, id)
	if err != nil {
		return store.ConversationItem{}, notFound
	}
	var item json.RawMessage
	gjson.GetBytes(rec.Object, "output").ForEach(func(_, o gjson.Result) bool {
		if o.Get("id").Str == id {
			item = json.RawMessage(o.Raw)
			return false
		}
		return true
	})
	if item == nil {
		return store.ConversationItem{}, notFound
	}
	ci := store.ConversationItem{ID: id, Item: item}
	for _, ri := range rec.Items {
		if ri.ID == id {
			ci.Model = ri.Model
		}
	}
	return ci, nil
}

// shownItems are items as a client reads them: outputs of
// code_interpreter_calls only when asked to include them.
func shownItems(items []store.ConversationItem, include bool) []json.RawMessage {
	out := make([]json.RawMessage, len(items))
	for k, it := range items {
		out[k] = it.Item
		if !include && gjson.GetBytes(it.Item, "type").Str == "code_interpreter_call" && gjson.GetBytes(it.Item, "outputs").Type != gjson.Null {
			if b, err := sjson.SetRawBytes(slices.Clone([]byte(it.Item)), "outputs", []byte("null")); err == nil {
				out[k] = b
			}
		}
	}
	return out
}

func itemID(it json.RawMessage) string { return gjson.GetBytes(it, "id").Str }

// checkMetadata validates OpenAI's metadata: null, or an object of at most
// 16 string values, keys ≤ 64 and values ≤ 512 characters.
func checkMetadata(raw json.RawMessage) (json.RawMessage, *apierror.Error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	v := gjson.ParseBytes(raw)
	if !v.IsObject() {
		return nil, invalidType("metadata", "an object", raw)
	}
	n := 0
	var e *apierror.Error
	v.ForEach(func(k, val gjson.Result) bool {
		n++
		switch {
		case n > maxMetadataPairs:
			e = apierror.Invalid("metadata", "object_above_max_properties", "Invalid 'metadata': too many properties. Expected an object with at most %d properties.", maxMetadataPairs)
		case utf8.RuneCountInString(k.Str) > maxMetadataKeyLen:
			e = apierror.Invalid("metadata", "invalid_value", "Invalid 'metadata': keys are at most %d characters.", maxMetadataKeyLen)
		case val.Type != gjson.String:
			e = apierror.Invalid("metadata."+k.Str, "invalid_type", "Invalid type for 'metadata.%s': expected a string.", k.Str)
		case utf8.RuneCountInString(val.Str) > maxMetadataValLen:
			e = apierror.Invalid("metadata."+k.Str, "string_above_max_length", "Invalid 'metadata.%s': values are at most %d characters.", k.Str, maxMetadataValLen)
		}
		return e == nil
	})
	return raw, e
}

func (s *Server) conversationError(w http.ResponseWriter, r *http.Request, err error, id string) {
	var dup *store.DuplicateItemError
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeError(w, apierror.NotFound("", "", "Conversation with id '%s' not found.", id))
	case errors.As(err, &dup):
		writeError(w, apierror.Invalid("items", "duplicate_item", "The conversation already has an item with id '%s'.", dup.ID))
	default:
		s.storeError(w, r, err, "", "conversation", id)
	}
}

func (s *Server) itemError(w http.ResponseWriter, r *http.Request, err error, id, itemID string) {
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, apierror.NotFound("", "", "Item with id '%s' not found in conversation '%s'.", itemID, id))
		return
	}
	s.conversationError(w, r, err, id)
}

func newConversationID() string { return idgen.NewTagged("conv_", 48) }
