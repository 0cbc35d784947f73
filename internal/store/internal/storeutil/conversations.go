package storeutil

import (
	"errors"
	"fmt"

	"github.com/codeinterp/codeinterp/internal/store"
)

// CheckConversation validates what PutConversation stores: an owner, an
// id a store can hold, and first items with such ids (CheckItemIDs).
func CheckConversation(c store.Conversation, items []store.ConversationItem) error {
	switch {
	case c.Owner == "":
		return errors.New("store: conversation without an owner")
	case !store.ValidID(c.ID):
		return fmt.Errorf("store: invalid conversation id %q", c.ID)
	}
	return CheckItemIDs(c.ID, items)
}

// CheckItemIDs refuses items of conversation id whose ids a store could
// not look up again (not store.ValidID).
func CheckItemIDs(id string, items []store.ConversationItem) error {
	for _, it := range items {
		if !store.ValidID(it.ID) {
			return fmt.Errorf("store: conversation %s: invalid item id %q", id, it.ID)
		}
	}
	return nil
}
