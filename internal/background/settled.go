package background

import (
	"context"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/store"
)

// Settled is rs whose writes of a background response's end go through
// bs.Settle, compare-and-set: the interceptor stores a background
// response's end as it stores any response (through this, as the server
// wires it), and a cancel or another replica's verdict may have settled
// the run otherwise first (a cancel whose wait timed out, a replica that
// found the run lapsed). A write that lost is dropped — whoever settled
// the run stores the winner — so the record never says, even for a
// moment, what did not win. Every other write (a foreground response,
// one still queued or in progress, one whose run the store no longer
// has) passes; so does one when Settle cannot be asked: the runner's own
// end settles the run again and stores the winner over it.
func Settled(rs store.Responses, bs store.Background) store.Responses {
	return settledResponses{Responses: rs, bs: bs}
}

type settledResponses struct {
	store.Responses
	bs store.Background
}

func (s settledResponses) PutResponse(ctx context.Context, r store.Response) error {
	if gjson.GetBytes(r.Object, "background").Type != gjson.True || store.Unfinished(r.Object) {
		return s.Responses.PutResponse(ctx, r)
	}
	status := gjson.GetBytes(r.Object, "status").Str
	won, err := s.bs.Settle(ctx, r.Owner, r.ID, status)
	if err == nil && won != status {
		return nil
	}
	// Won, or no run (ErrNotFound), or Settle failed: stored. In the last
	// case the runner settles the run at its end and stores the winner
	// over this.
	return s.Responses.PutResponse(ctx, r)
}
