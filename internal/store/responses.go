package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/tidwall/gjson"
)

// Response is one response this server produced (the interceptor's
// spliced answer to POST /v1/responses), kept so that a later request can
// continue it (previous_response_id), reference its items (item_reference),
// replay its calls with their real outputs, and read it back
// (GET /v1/responses/{id}). Like containers it belongs to an owner.
type Response struct {
	ID        string    `json:"id"` // "resp_…", the id the client got
	Owner     string    `json:"owner"`
	CreatedAt time.Time `json:"created_at"`
	// ExpiresAt is when the store forgets the response (Put sets it from
	// ResponseLimits.TTL when zero).
	ExpiresAt time.Time `json:"expires_at"`

	// Previous is the response this one continued (its
	// previous_response_id, one of ours), "" for none.
	Previous string `json:"previous,omitempty"`
	// History lists every earlier response of the chain, oldest first,
	// ending with Previous: what GetResponses fetches to rebuild the
	// conversation in one round trip.
	History []string `json:"history,omitempty"`
	// UpstreamID is the model server's id of the last round behind this
	// response; UpstreamStored says whether the model server kept it (so a
	// continuation can name it as its previous_response_id there).
	UpstreamID     string `json:"upstream_id,omitempty"`
	UpstreamStored bool   `json:"upstream_stored,omitempty"`
	// Pending are the function_call_output items the model server's last
	// round is owed: its calls were answered to the client only (the turn
	// also called the client's tools, or a limit ended the loop). A
	// continuation through UpstreamID sends them first.
	Pending []json.RawMessage `json:"pending,omitempty"`
	// ContainerID is the container the response's code ran in, if any.
	ContainerID string `json:"container_id,omitempty"`

	// Object is the response object as the client got it, with every
	// code_interpreter_call's outputs filled (GET /v1/responses/{id}
	// removes them unless asked to include them).
	Object json.RawMessage `json:"object"`
	// Input is the request's input items as the client sent them, each
	// with an id (GET /v1/responses/{id}/input_items).
	Input []json.RawMessage `json:"input"`
	// ModelInput is this request's own input as the model server got it
	// (references resolved, replayed calls rewritten); with each Item's
	// Model it rebuilds what the model saw, for a model server that keeps
	// no state.
	ModelInput []json.RawMessage `json:"model_input"`
	// Items are the output items in order, each with what the model saw
	// of it.
	Items []ResponseItem `json:"items"`
}

// ResponseItem is one output item of a stored response.
type ResponseItem struct {
	// ID is the item's id as the client saw it ("ci_…", "msg_…", "rs_…"),
	// "" when it had none. FindItem looks items up by it; an id that is
	// not ValidID is kept but not indexed (FindItem reports such an id not
	// found, as it does every id that is not ValidID).
	ID string `json:"id,omitempty"`
	// Model is what the model server saw of the item, in order: for a
	// code_interpreter_call the model's function_call and the
	// function_call_output it was answered with; for other items the item
	// itself.
	Model []json.RawMessage `json:"model"`
}

// Size is the bytes a response holds, for the bounds of ResponseLimits.
func (r Response) Size() int64 {
	n := int64(len(r.Object))
	for _, s := range r.Input {
		n += int64(len(s))
	}
	for _, s := range r.ModelInput {
		n += int64(len(s))
	}
	for _, s := range r.Pending {
		n += int64(len(s))
	}
	for _, it := range r.Items {
		n += int64(len(it.ID))
		for _, s := range it.Model {
			n += int64(len(s))
		}
	}
	return n
}

// Responses keeps stored responses. Implementations are safe for
// concurrent use; each method is atomic. A response of another owner, an
// expired or a deleted one does not exist (ErrNotFound).
type Responses interface {
	// PutResponse stores r (ExpiresAt defaults to CreatedAt + TTL; r.ID,
	// Previous and History must be ValidIDs). A response larger than ResponseLimits.ResponseBytes,
	// or a History longer than MaxHistory, is a *QuotaError and nothing is
	// stored. Storing an id again replaces it (its items' index too). A
	// response already expired is not stored: it replaces a stored one by
	// nothing.
	PutResponse(ctx context.Context, r Response) error
	// GetResponse returns one response.
	GetResponse(ctx context.Context, owner, id string) (Response, error)
	// GetResponses returns the responses of ids, in that order, in one
	// round trip; if any is missing the error is ErrNotFound (wrapped,
	// naming the first id missing).
	GetResponses(ctx context.Context, owner string, ids []string) ([]Response, error)
	// FindItem returns the response one of whose Items has the id itemID.
	FindItem(ctx context.Context, owner, itemID string) (Response, error)
	// DeleteResponse removes a response and its items' index; later
	// responses of its chain stay, but can no longer be expanded.
	DeleteResponse(ctx context.Context, owner, id string) error
}

// ResponseLimits bound the responses a store holds. Zero is no bound.
type ResponseLimits struct {
	// TTL is how long a response is kept after it was made.
	TTL time.Duration
	// ResponseBytes bounds one response (Response.Size).
	ResponseBytes int64
	// MaxHistory bounds the chain a response continues (len(History)).
	MaxHistory int
	// Count and Bytes bound all responses of an in-process store, which
	// forgets the oldest to stay within them (a shared store such as Redis
	// relies on TTL and its own maxmemory instead).
	Count int
	Bytes int64
}

// DefaultResponseLimits are the documented defaults: 30 days, 16 MiB a
// response, 1000 turns, and 10 000 responses or 256 MiB in process.
func DefaultResponseLimits() ResponseLimits {
	return ResponseLimits{
		TTL:           30 * 24 * time.Hour,
		ResponseBytes: 16 << 20,
		MaxHistory:    1000,
		Count:         10000,
		Bytes:         256 << 20,
	}
}

// LimitResponseBytes and LimitHistory are the QuotaError.Limit names of
// ResponseLimits.
const (
	LimitResponseBytes = "response_bytes"
	LimitHistory       = "history"
)

// HasItem reports whether itemID is the id of one of r's items.
func (r Response) HasItem(itemID string) bool {
	for _, it := range r.Items {
		if it.ID == itemID {
			return true
		}
	}
	return false
}

// Unfinished reports a Response object whose status says its run has not
// ended (queued or in_progress): a background response still going, or
// one whose runner died (the API shows it failed).
func Unfinished(obj []byte) bool {
	st := gjson.GetBytes(obj, "status").Str
	return st == "queued" || st == "in_progress"
}
