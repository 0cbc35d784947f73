package store

import (
	"context"
	"encoding/json"
	"errors"
)

// ErrExists is PutConversation's error for a conversation id the owner
// has already (errors.Is): a create never overwrites.
var ErrExists = errors.New("store: already exists")

// Conversation is one conversation of OpenAI's Conversations API: a
// durable list of items that responses made with "conversation": id read
// in front of their input and append their input and output to. Like
// containers it belongs to an owner.
type Conversation struct {
	ID        string `json:"id"` // "conv_…"
	Owner     string `json:"owner"`
	CreatedAt int64  `json:"created_at"` // Unix seconds
	// Metadata is the client's metadata object (at most 16 pairs), raw;
	// nil is null.
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// ConversationItem is one item of a conversation.
type ConversationItem struct {
	ID string `json:"id"` // the item's id as the client sees it
	// Item is the item as the client reads it back (a code_interpreter_call
	// with its outputs).
	Item json.RawMessage `json:"item"`
	// Model is what the model server is shown of the item, in order (see
	// ResponseItem.Model); empty means the Item itself, as the client
	// wrote it.
	Model []json.RawMessage `json:"model,omitempty"`
}

// Conversations keeps conversations and their items. Implementations are
// safe for concurrent use; each method is atomic. Another owner's
// conversation, or a deleted one, does not exist (ErrNotFound). Items are
// kept in the order they were appended.
type Conversations interface {
	// PutConversation creates a conversation with its first items. It
	// only creates: an id the owner has a conversation of already is
	// ErrExists, and that conversation — its metadata and items — stays
	// as it was (so nothing re-creates or overwrites one by accident).
	PutConversation(ctx context.Context, c Conversation, items []ConversationItem) error
	// GetConversation returns a conversation.
	GetConversation(ctx context.Context, owner, id string) (Conversation, error)
	// UpdateConversation replaces the metadata of an existing
	// conversation (nil clears it) and returns the conversation as it is
	// now; its CreatedAt and items stay. A conversation that does not
	// exist is ErrNotFound, and none is created: an update racing a
	// delete never brings the conversation back.
	UpdateConversation(ctx context.Context, owner, id string, metadata json.RawMessage) (Conversation, error)
	// DeleteConversation removes a conversation and its items.
	DeleteConversation(ctx context.Context, owner, id string) error
	// AppendItems appends items to a conversation, all or none. Past
	// ConversationLimits.Items or Bytes it is a *QuotaError and nothing is
	// appended. An item whose id the conversation holds already is a
	// *DuplicateItemError.
	AppendItems(ctx context.Context, owner, id string, items []ConversationItem) error
	// Items returns every item of a conversation, oldest first (what a
	// response continuing it shows the model).
	Items(ctx context.Context, owner, id string) ([]ConversationItem, error)
	// ListItems returns one page of a conversation's items (ListOptions:
	// Limit, Order — "desc" is newest first —, After an item id; an
	// unknown After is an empty page).
	ListItems(ctx context.Context, owner, id string, o ListOptions) (page []ConversationItem, hasMore bool, err error)
	// GetItem returns one item.
	GetItem(ctx context.Context, owner, id, itemID string) (ConversationItem, error)
	// DeleteItem removes one item.
	DeleteItem(ctx context.Context, owner, id, itemID string) error
}

// DuplicateItemError reports an item id a conversation already holds
// (errors.As); nothing was appended.
type DuplicateItemError struct{ ID string }

func (e *DuplicateItemError) Error() string {
	return "store: the conversation already has an item with id " + e.ID
}

// ConversationLimits bound a conversation. Zero is no bound.
type ConversationLimits struct {
	Items int   // items in one conversation
	Bytes int64 // their bytes (ID, Item and Model)
	// Conversations bounds one owner's conversations (an in-process
	// store's whole memory is bounded by Count × Bytes).
	Conversations int
}

// DefaultConversationLimits are the documented defaults: 10 000 items or
// 64 MiB a conversation, 1000 conversations an owner.
func DefaultConversationLimits() ConversationLimits {
	return ConversationLimits{Items: 10000, Bytes: 64 << 20, Conversations: 1000}
}

// Size is the bytes an item holds, for ConversationLimits.Bytes.
func (it ConversationItem) Size() int64 {
	n := int64(len(it.ID) + len(it.Item))
	for _, m := range it.Model {
		n += int64(len(m))
	}
	return n
}

// The QuotaError.Limit names of ConversationLimits.
const (
	LimitConversationItems = "conversation_items"
	LimitConversationBytes = "conversation_bytes"
	LimitConversations     = "owner_conversations"
)
