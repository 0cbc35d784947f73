package storeutil

import (
	"errors"
	"fmt"
	"time"

	"github.com/codeinterp/codeinterp/internal/store"
)

// PrepareResponse validates r before PutResponse stores it and fills its
// defaults: CreatedAt now, ExpiresAt CreatedAt+TTL (left zero, never, when
// TTL is zero). The id, the owner, Previous and History must be ids a
// store can hold; an item id that is not ValidID is kept but not indexed
// (ItemIDs), since FindItem reports such an id not found anyway. The
// ResponseBytes and MaxHistory bounds are checked here because they need
// no state; maxBytes is the per-response bound actually in force (an
// in-process store cannot hold one larger than its Bytes either).
func PrepareResponse(r store.Response, l store.ResponseLimits, maxBytes int64, now time.Time) (store.Response, error) {
	switch {
	case r.Owner == "":
		return r, errors.New("store: response without an owner")
	case !store.ValidID(r.ID):
		return r, fmt.Errorf("store: invalid response id %q", r.ID)
	case r.Previous != "" && !store.ValidID(r.Previous):
		return r, fmt.Errorf("store: response %s: invalid previous response id %q", r.ID, r.Previous)
	}
	for _, h := range r.History {
		if !store.ValidID(h) {
			return r, fmt.Errorf("store: response %s: invalid response id %q in its history", r.ID, h)
		}
	}
	if l.MaxHistory > 0 && len(r.History) > l.MaxHistory {
		return r, &store.QuotaError{Limit: store.LimitHistory, Max: int64(l.MaxHistory)}
	}
	if maxBytes > 0 && r.Size() > maxBytes {
		return r, &store.QuotaError{Limit: store.LimitResponseBytes, Max: maxBytes}
	}
	// No monotonic reading: a stored time is a wall-clock time, the same
	// whichever store kept it.
	r.CreatedAt, r.ExpiresAt = r.CreatedAt.Round(0), r.ExpiresAt.Round(0)
	if r.CreatedAt.IsZero() {
		r.CreatedAt = now.Round(0)
	}
	if r.ExpiresAt.IsZero() && l.TTL > 0 {
		r.ExpiresAt = r.CreatedAt.Add(l.TTL)
	}
	return r, nil
}

// ResponseExpired reports whether r has expired at now (a zero ExpiresAt
// never does).
func ResponseExpired(r store.Response, now time.Time) bool {
	return !r.ExpiresAt.IsZero() && !now.Before(r.ExpiresAt)
}

// ItemIDs lists the ids of r's items that FindItem can find — the
// non-empty ValidID ones, each once, in order.
func ItemIDs(r store.Response) []string {
	var out []string
	seen := map[string]bool{}
	for _, it := range r.Items {
		if store.ValidID(it.ID) && !seen[it.ID] {
			seen[it.ID] = true
			out = append(out, it.ID)
		}
	}
	return out
}
