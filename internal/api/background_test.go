package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/api"
	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/redis"
	"github.com/codeinterp/codeinterp/internal/store/redis/redistest"
)

// bgEnv is an API server over Redis with background mode: its store's
// Background is the one a runner of this replica renews through.
type bgEnv struct {
	*env
	bg   *redis.Background
	resp *redis.Responses
}

func newBGEnv(t *testing.T, edit func(*api.Config)) *bgEnv {
	t.Helper()
	return newBGEnvWith(t, edit)
}

// newBGEnvWith is newBGEnv with the background store's options.
func newBGEnvWith(t *testing.T, edit func(*api.Config), opts ...redis.Option) *bgEnv {
	t.Helper()
	ctx := context.Background()
	url := redistest.Start(t)
	ck := &clock{t: time.Now()}
	st, err := redis.New(ctx, url, store.DefaultLimits(), ck.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	rs, err := redis.NewResponses(ctx, url, store.DefaultResponseLimits(), ck.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	bg, err := redis.NewBackground(ctx, url, nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bg.Close() })
	e := newEnvStore(t, st, ck, func(c *api.Config) {
		c.Responses, c.Background = rs, bg
		if edit != nil {
			edit(c)
		}
	})
	return &bgEnv{env: e, bg: bg, resp: rs}
}

// bearerOwner is the store owner of a bearer key.
func bearerOwner(key string) string {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+key)
	o, _ := store.Owner(h, store.DefaultAuthHeaders())
	return o
}

// startRun stores a running streamed background response of key's with
// its first two events, as a runner does.
func (e *bgEnv) startRun(key, id string, ttl time.Duration) {
	e.t.Helper()
	ctx := context.Background()
	owner := bearerOwner(key)
	obj := fmt.Sprintf(`{"id":%q,"object":"response","status":"in_progress","background":true,"output":[]}`, id)
	if err := e.resp.PutResponse(ctx, store.Response{ID: id, Owner: owner, CreatedAt: time.Now(), Object: []byte(obj)}); err != nil {
		e.t.Fatal(err)
	}
	if err := e.bg.Begin(ctx, owner, id, 0, 0, ttl, time.Hour); err != nil {
		e.t.Fatal(err)
	}
	for seq, typ := range []string{"response.created", "response.queued"} {
		ev := fmt.Sprintf(`{"type":%q,"sequence_number":%d}`, typ, seq)
		if err := e.bg.AppendEvent(ctx, owner, id, int64(seq), []byte(ev)); err != nil {
			e.t.Fatal(err)
		}
	}
}

// resume opens the resumed stream of id; the caller closes the body.
func (e *bgEnv) resume(ctx context.Context, key, id string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", e.url+"/v1/responses/"+id+"?stream=true", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	return http.DefaultClient.Do(req)
}

// TestResumedStreamsBounded: one credential opening many resumed streams
// neither starves the store (another credential's run keeps renewing, so
// it is not taken for dead) nor other credentials' streams; past its cap
// it gets 429s (issue 38 row 5).
func TestResumedStreamsBounded(t *testing.T) {
	const perOwner, opened = 8, 40
	e := newBGEnv(t, func(c *api.Config) { c.MaxResumedStreamsPerOwner, c.MaxResumedStreams = perOwner, 64 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.startRun("sk-greedy", "resp_greedy", time.Minute)
	const ttl = 2 * time.Second
	e.startRun("sk-other", "resp_other", ttl)

	// The other credential's runner renews every ttl/4 through the same
	// store; a renewal that fails or comes late lets its run lapse.
	renewErr := make(chan error, 1)
	var renewers sync.WaitGroup
	renewers.Add(1)
	go func() {
		defer renewers.Done()
		for ctx.Err() == nil {
			start := time.Now()
			rctx, rcancel := context.WithTimeout(ctx, ttl/2)
			ok, err := e.bg.Renew(rctx, bearerOwner("sk-other"), "resp_other", ttl)
			rcancel()
			if ctx.Err() != nil {
				return
			}
			if err != nil || !ok {
				renewErr <- fmt.Errorf("renew after %v: ok %v, %v", time.Since(start), ok, err)
				return
			}
			time.Sleep(ttl / 4)
		}
	}()

	var mu sync.Mutex
	codes := map[int]int{}
	var bodies []*http.Response
	var wg sync.WaitGroup
	for range opened {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := e.resume(ctx, "sk-greedy", "resp_greedy")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			codes[res.StatusCode]++
			if res.StatusCode == http.StatusOK {
				bodies = append(bodies, res)
				return
			}
			var b strings.Builder
			_, _ = bufio.NewReader(res.Body).WriteTo(&b)
			res.Body.Close()
			if res.StatusCode == http.StatusTooManyRequests {
				checkError(t, res.StatusCode, []byte(b.String()), http.StatusTooManyRequests, "", "resumed streams")
			}
		}()
	}
	wg.Wait()
	defer func() {
		for _, b := range bodies {
			b.Body.Close()
		}
	}()
	if codes[http.StatusOK] != perOwner || codes[http.StatusTooManyRequests] != opened-perOwner {
		t.Errorf("%d streams opened: %v, want %d 200s and the rest 429s", opened, codes, perOwner)
	}

	// The other credential's stream resumes and follows its run.
	res, err := e.resume(ctx, "sk-other", "resp_other")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("the other credential's stream: %d", res.StatusCode)
	}
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				lines <- d
			}
		}
		close(lines)
	}()
	next := func() string {
		t.Helper()
		select {
		case l := <-lines:
			return l
		case err := <-renewErr:
			t.Fatalf("the other credential's run: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatal("the other credential's stream is stuck")
		}
		return ""
	}
	for range 2 {
		next()
	}
	if err := e.bg.AppendEvent(ctx, bearerOwner("sk-other"), "resp_other", 2, []byte(`{"type":"response.in_progress","sequence_number":2}`)); err != nil {
		t.Fatal(err)
	}
	if l := next(); !strings.Contains(l, `"sequence_number":2`) {
		t.Fatalf("the live event: %s", l)
	}
	// Renewals went on throughout, several ttls long.
	select {
	case err := <-renewErr:
		t.Fatalf("the other credential's run: %v", err)
	case <-time.After(2 * ttl):
	}
	if ok, err := e.bg.Running(ctx, bearerOwner("sk-other"), "resp_other"); !ok || err != nil {
		t.Fatalf("the other credential's run was taken for dead: %v, %v", ok, err)
	}
	cancel()
	renewers.Wait()
}

// TestResumeTrimmedEvents: a client resuming a background stream whose
// events the store's bound forgot (the logs of runs that ended longest
// ago go first) gets an OpenAI-shaped 400 saying so, not a stream that
// silently misses its start nor "cannot be streamed" (issue 38 row 5).
func TestResumeTrimmedEvents(t *testing.T) {
	e := newBGEnvWith(t, nil, redis.WithBackgroundBytes(400))
	ctx := context.Background()
	e.startRun("sk-a", "resp_old", time.Minute)
	if err := e.bg.End(ctx, bearerOwner("sk-a"), "resp_old"); err != nil {
		t.Fatal(err)
	}
	e.startRun("sk-b", "resp_new", time.Minute)
	big := fmt.Sprintf(`{"type":"response.output_text.delta","sequence_number":2,"delta":%q}`, strings.Repeat("x", 200))
	if err := e.bg.AppendEvent(ctx, bearerOwner("sk-b"), "resp_new", 2, []byte(big)); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"?stream=true", "?stream=true&starting_after=0"} {
		status, _, body := e.do("GET", "/v1/responses/resp_old"+q, "sk-a", "", nil)
		if status != http.StatusBadRequest {
			t.Fatalf("%s: %d %s, want 400", q, status, body)
		}
		var got struct {
			Error struct{ Message, Type, Param, Code string }
		}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("%s: %v: %s", q, err, body)
		}
		if got.Error.Type != "invalid_request_error" || got.Error.Code != "events_expired" || !strings.Contains(got.Error.Message, "no longer kept") {
			t.Fatalf("%s: %s, want an invalid_request_error saying its events are no longer kept", q, body)
		}
	}
	// The run that is still going streams as before.
	res, err := e.resume(ctx, "sk-b", "resp_new")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("the running response's stream: %d", res.StatusCode)
	}
}
