package interceptor

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/containerapi"
	"github.com/codeinterp/codeinterp/internal/containers"
	"github.com/codeinterp/codeinterp/internal/sandbox/sandboxtest"
)

// unavailableContainers opens containers whose runs are refused as the
// fencing refuses them (the lease store down, the holder lost its lease
// during the run).
type unavailableContainers struct{ fakeContainers }

func (u unavailableContainers) Open(ctx context.Context, spec containers.Spec) (containers.Container, error) {
	c, err := u.fakeContainers.Open(ctx, spec)
	return unavailableContainer{c}, err
}

type unavailableContainer struct{ containers.Container }

func (unavailableContainer) Run(context.Context, string) (containers.RunResult, error) {
	return containers.RunResult{}, fmt.Errorf("%w: the lease store could not be reached: dial tcp 10.1.2.3:6379: refused", containerapi.ErrUnavailable)
}

// TestContainerUnavailable: a run the fencing refused is a retryable 503
// in OpenAI's error shape for the whole response (buffered: the status
// and body; streamed: an error event and response.failed) — not a tool
// result the model answers as if the code had run or crashed — and the
// cause, which names servers, is not in it.
func TestContainerUnavailable(t *testing.T) {
	p := sandboxtest.New(t)
	ic := newLoopInterceptor(t, p, nil)
	ic.containers = unavailableContainers{fakeContainers{p}}
	steps := func() []step {
		return []step{{items: []string{fcItem("c1", "x += 1")}}} // no follow-up is asked for
	}

	t.Run("buffered", func(t *testing.T) {
		res := bufferedResult(t, ic, newScriptedUpstream(t, steps()...), liveRequest(""))
		e := gjson.GetBytes(res.Body, "error")
		if res.Status != http.StatusServiceUnavailable || e.Get("code").Str != "container_unavailable" || e.Get("type").Str != "server_error" || e.Get("message").Str == "" {
			t.Fatalf("answer %d %s, want a 503 container_unavailable server_error", res.Status, res.Body)
		}
		if strings.Contains(string(res.Body), "10.1.2.3") {
			t.Fatalf("the error names the cause's servers: %s", res.Body)
		}
		if res.Rounds != 0 {
			t.Fatalf("%d follow-ups after a refused run, want none", res.Rounds)
		}
	})

	t.Run("live", func(t *testing.T) {
		w := newRecWriter()
		u := newLiveUpstream(t, newScriptedUpstream(t, steps()...), w)
		if err := liveRun(context.Background(), t, ic, u, liveRequest("")); err != nil {
			t.Fatalf("StreamResponse: %v", err)
		}
		evs := parseSSE(t, string(w.body()))
		decodeStream(t, w.body())
		n := len(evs)
		if n < 3 || evs[n-2].Name != "error" || evs[n-1].Name != "response.failed" {
			t.Fatalf("stream does not end with error + response.failed: %s", w.body())
		}
		if got := evs[n-2].Data.Get("code").Str; got != "container_unavailable" {
			t.Fatalf("error code %q, want container_unavailable", got)
		}
		if strings.Contains(string(w.body()), "10.1.2.3") {
			t.Fatalf("the stream names the cause's servers: %s", w.body())
		}
	})
}
