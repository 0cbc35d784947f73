package background

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/processor"
	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/memory"
)

// fakeExchange completes at once, storing its response as the interceptor
// does, and runs onComplete after (a cancel landing as the run finishes).
type fakeExchange struct {
	processor.Exchange
	id         string
	owner      string
	rs         store.Responses
	onComplete func()
	// beforeComplete, when set, runs just before the response is stored.
	beforeComplete func()
}

func (f *fakeExchange) Background() bool     { return true }
func (f *fakeExchange) ResponseID() string   { return f.id }
func (f *fakeExchange) ClientStream() bool   { return false }
func (f *fakeExchange) UpstreamBody() []byte { return []byte(`{}`) }
func (f *fakeExchange) Close()               {}
func (f *fakeExchange) QueuedResponse(status string, _ time.Time) []byte {
	return fmt.Appendf(nil, `{"id":%q,"object":"response","status":%q,"background":true}`, f.id, status)
}

func (f *fakeExchange) CompleteResponse(ctx context.Context, _ processor.Upstream, _ int, _ http.Header, _ []byte) (*processor.Result, error) {
	body := fmt.Appendf(nil, `{"id":%q,"object":"response","status":"completed","background":true}`, f.id)
	if f.beforeComplete != nil {
		f.beforeComplete()
	}
	if err := f.rs.PutResponse(ctx, store.Response{ID: f.id, Owner: f.owner, CreatedAt: time.Now(), Object: body}); err != nil {
		return nil, err
	}
	f.onComplete()
	return &processor.Result{Status: 200, Body: body}, nil
}

type fakeUpstream struct{ processor.StreamUpstream }

func (fakeUpstream) CreateResponse(context.Context, []byte) (int, http.Header, []byte, error) {
	return 200, http.Header{}, []byte(`{}`), nil
}

type noReservation struct{}

func (noReservation) Release() {}

// TestCancelRacingCompletion: a cancel landing as a run finishes — many
// times, at random moments around its end — never overwrites what won:
// the stored status is the settled one, and a cancel that came after the
// response was stored lost (the record says completed).
func TestCancelRacingCompletion(t *testing.T) {
	ctx := context.Background()
	bs, rs := memory.NewBackground(nil), memory.NewResponses(store.DefaultResponseLimits(), nil)
	r, err := New(Config{Store: bs, Responses: rs, Poll: time.Millisecond}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(time.Second)
	wins := map[string]int{}
	for i := range 200 {
		id := fmt.Sprintf("resp_race%d", i)
		after := i%2 == 0 // the cancel lands after the response was stored
		cancel := func() {
			_ = bs.Cancel(ctx, "o", id)
			r.Cancel("o", id)
		}
		ex := &fakeExchange{id: id, owner: "o", rs: rs, onComplete: func() {}}
		if after {
			ex.onComplete = cancel
		} else {
			go func() {
				time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
				cancel()
			}()
		}
		if _, err := r.Start(ctx, processor.Caller{Owner: "o"}, ex, struct {
			fakeUpstream
			processor.StreamUpstream
		}{}, noReservation{}); err != nil {
			t.Fatal(err)
		}
		var won string
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			if ok, _ := bs.Running(ctx, "o", id); !ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still running", id)
			}
		}
		won, err = bs.Settle(ctx, "o", id, "probe")
		if err != nil {
			t.Fatal(err)
		}
		rec, err := rs.GetResponse(ctx, "o", id)
		if err != nil {
			t.Fatal(err)
		}
		if got := gjson.GetBytes(rec.Object, "status").Str; got != won {
			t.Fatalf("%s: stored %q, settled %q", id, got, won)
		}
		if after && won != "completed" {
			t.Fatalf("%s: a cancel after the response was stored won: %q", id, won)
		}
		wins[won]++
	}
	t.Logf("winners: %v", wins)
}
