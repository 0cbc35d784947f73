package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/codeinterp/codeinterp/internal/store/redis/redistest"
)

// TestBackgroundAcrossReplicas drives background mode through two
// `extproc dev` replicas sharing one Redis, with openai-go: a response
// created on A is polled, resumed and cancelled through B; a stream
// dropped after a few events and resumed from its last sequence_number
// joins into the uninterrupted stream, event for event; the bounds and
// the hostile cases get OpenAI's errors; a replica killed mid-run leaves a
// response that ends failed, never in_progress.
func TestBackgroundAcrossReplicas(t *testing.T) {
	sh := loadShapes(t)
	bin := buildExtproc(t)
	redisURL := redistest.Start(t)
	steps := map[string]string{
		"QUICK":  "print(6 * 7)",
		"STREAM": "for i in range(3):\n    print('line', i)",
		"SLOW":   "import time\ntime.sleep(120)\nprint('woke')",
	}
	var m *model
	m = newModel(t, sh, func(t testing.TB, c *convo) reply {
		step := c.userText()
		if step == "SLOWMODEL" {
			time.Sleep(3 * time.Second) // a long model round
			return reply{items: []string{m.message("thought long")}}
		}
		if len(c.outputs()) == 0 {
			return reply{items: []string{m.call(steps[step])}}
		}
		return reply{items: []string{m.message("the tool said: " + lastOutputs(c)[0].Get("output").Str)}}
	})
	m.live = true // the servers stream live (interceptor.streaming: live)
	env := []string{"CODEINTERP_STORE_BACKEND=redis", "CODEINTERP_STORE_REDIS_URL=" + redisURL,
		"CODEINTERP_CHECKPOINTS_ENABLED=false", "CODEINTERP_RESPONSES_MAX_BACKGROUND=3", "CODEINTERP_CLUSTER_SECRET=the-e2e-replicas-shared-cluster-key"}
	start := func(key string, extra ...string) (*proc, openai.Client, string) {
		p := startProc(t, bin, append(append([]string(nil), env...), extra...), "dev", "--listen", "127.0.0.1:0", "--upstream", m.URL(),
			"--config", filepath.Join("..", "testdata", "e2e", "extproc.yaml"))
		t.Cleanup(func() { _ = p.cmd.Process.Kill() })
		base := p.baseURL(t)
		return p, openai.NewClient(option.WithBaseURL(base+"/"), option.WithAPIKey(key), option.WithMaxRetries(0)), base
	}
	pa, a, baseA := start(apiKey)
	pb, b, baseB := start(apiKey)
	other := openai.NewClient(option.WithBaseURL(baseB+"/"), option.WithAPIKey("sk-someone-else"), option.WithMaxRetries(0))
	ctx := context.Background()
	bg := func(step string) responses.ResponseNewParams {
		p := ciParams(step, true)
		p.Store = openai.Bool(true)
		p.Background = openai.Bool(true)
		return p
	}
	await := func(c openai.Client, id string, done func(*responses.Response) bool) *responses.Response {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			r, err := c.Responses.Get(ctx, id, responses.ResponseGetParams{Include: []responses.ResponseIncludable{responses.ResponseIncludableCodeInterpreterCallOutputs}})
			if err != nil {
				t.Fatalf("poll %s: %v", id, err)
			}
			if done(r) {
				return r
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still %s", id, r.Status)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	ended := func(r *responses.Response) bool { return r.Status != "queued" && r.Status != "in_progress" }
	wantStatus := func(err error, status int, what string) {
		t.Helper()
		var e *openai.Error
		if !errors.As(err, &e) || e.StatusCode != status {
			t.Fatalf("%s: %v, want HTTP %d", what, err, status)
		}
	}

	var quickID string
	t.Run("CreatedOnAPolledOnB", func(t *testing.T) {
		r, err := a.Responses.New(ctx, bg("QUICK"))
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != "queued" || !r.Background || !strings.HasPrefix(r.ID, "resp_") || len(r.Output) != 0 {
			t.Fatalf("the answer at once: status %q, background %v, id %q, %d output items", r.Status, r.Background, r.ID, len(r.Output))
		}
		quickID = r.ID
		done := await(b, r.ID, ended)
		if done.Status != "completed" || !done.Background {
			t.Fatalf("polled on B: status %q, background %v", done.Status, done.Background)
		}
		var ci *responses.ResponseCodeInterpreterToolCall
		for _, it := range done.Output {
			if it.Type == "code_interpreter_call" {
				c := it.AsCodeInterpreterCall()
				ci = &c
			}
		}
		if ci == nil || len(ci.Outputs) == 0 || !strings.Contains(ci.Outputs[0].Logs, "42") {
			t.Fatalf("no code_interpreter_call with the run's logs in %s", done.RawJSON())
		}
		if !strings.Contains(done.OutputText(), "42") {
			t.Fatalf("the model's answer %q does not carry the run's output", done.OutputText())
		}
	})

	t.Run("StreamDroppedAndResumedOnB", func(t *testing.T) {
		sctx, drop := context.WithCancel(ctx)
		st := a.Responses.NewStreaming(sctx, bg("STREAM"))
		var got []responses.ResponseStreamEventUnion
		for st.Next() {
			got = append(got, st.Current())
			if len(got) == 4 {
				break
			}
		}
		drop()
		_ = st.Close()
		if len(got) < 4 {
			for _, l := range pa.all() {
				if strings.Contains(l, "background") || strings.Contains(l, "stream") || strings.Contains(l, "error") {
					t.Log(l)
				}
			}
			t.Fatalf("the stream ended after %d events: %v", len(got), st.Err())
		}
		if got[0].Type != "response.created" || got[1].Type != "response.queued" || got[0].Response.Status != "queued" {
			t.Fatalf("the stream opens with %s (%s), %s; want response.created (queued), response.queued", got[0].Type, got[0].Response.Status, got[1].Type)
		}
		id := got[0].Response.ID
		rs := b.Responses.GetStreaming(ctx, id, responses.ResponseGetParams{StartingAfter: openai.Int(got[len(got)-1].SequenceNumber)})
		for rs.Next() {
			got = append(got, rs.Current())
		}
		if err := rs.Err(); err != nil {
			t.Fatalf("resumed on B: %v", err)
		}
		for k, e := range got {
			if e.SequenceNumber != int64(k) {
				t.Fatalf("event %d (%s) has sequence_number %d", k, e.Type, e.SequenceNumber)
			}
		}
		if last := got[len(got)-1]; last.Type != "response.completed" || !strings.Contains(last.Response.OutputText(), "line 2") {
			for _, l := range append(pa.all(), pb.all()...) {
				if strings.Contains(l, "background") || strings.Contains(l, "error") || strings.Contains(l, "warn") {
					t.Log(l)
				}
			}
			t.Fatalf("the joined stream ends with %s: %s", last.Type, last.RawJSON())
		}
		var sawCall bool
		for _, e := range got {
			sawCall = sawCall || e.Type == "response.code_interpreter_call.completed"
		}
		if !sawCall {
			t.Fatal("no response.code_interpreter_call.completed in the joined stream")
		}
		// The whole stream again, from its start, on A: event for event.
		full := a.Responses.GetStreaming(ctx, id, responses.ResponseGetParams{})
		var all []responses.ResponseStreamEventUnion
		for full.Next() {
			all = append(all, full.Current())
		}
		if err := full.Err(); err != nil || len(all) != len(got) {
			t.Fatalf("the uninterrupted stream: %d events (%v), the joined one %d", len(all), err, len(got))
		}
		for k := range all {
			if all[k].RawJSON() != got[k].RawJSON() {
				t.Fatalf("event %d differs:\njoined %s\nwhole  %s", k, got[k].RawJSON(), all[k].RawJSON())
			}
		}
		// Past the last event: OpenAI's 400.
		bad := b.Responses.GetStreaming(ctx, id, responses.ResponseGetParams{StartingAfter: openai.Int(int64(len(all) + 10))})
		for bad.Next() {
		}
		wantStatus(bad.Err(), http.StatusBadRequest, "starting_after beyond the last event")
	})

	t.Run("CancelDuringARun", func(t *testing.T) {
		ctr, err := a.Containers.New(ctx, openai.ContainerNewParams{Name: "bg-cancel"})
		if err != nil {
			t.Fatal(err)
		}
		p := bg("SLOW")
		p.Tools = []responses.ToolUnionParam{responses.ToolParamOfCodeInterpreter(ctr.ID)}
		r, err := a.Responses.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		await(b, r.ID, func(r *responses.Response) bool { return r.Status == "in_progress" })
		time.Sleep(2 * time.Second) // the model called the tool; the cell sleeps
		c, err := b.Responses.Cancel(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if c.Status != "cancelled" {
			t.Fatalf("cancel answered status %q", c.Status)
		}
		if got := await(a, r.ID, ended); got.Status != "cancelled" {
			t.Fatalf("after cancel: %q", got.Status)
		}
		if again, err := a.Responses.Cancel(ctx, r.ID); err != nil || again.Status != "cancelled" {
			t.Fatalf("cancel again: %v, %v", again, err)
		}
		// The container is not bricked: its next turn runs.
		q := ciParams("QUICK", true)
		q.Tools = []responses.ToolUnionParam{responses.ToolParamOfCodeInterpreter(ctr.ID)}
		next, err := b.Responses.New(ctx, q)
		if err != nil || !strings.Contains(next.OutputText(), "42") {
			t.Fatalf("the container's next turn after a cancel: %v, %v", next, err)
		}
	})

	t.Run("CancelDuringAModelRound", func(t *testing.T) {
		r, err := a.Responses.New(ctx, bg("SLOWMODEL"))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		c, err := b.Responses.Cancel(ctx, r.ID)
		if err != nil || c.Status != "cancelled" {
			t.Fatalf("cancel during the model's round: %v, %v", c, err)
		}
	})

	t.Run("CancelAfterCompletion", func(t *testing.T) {
		c, err := b.Responses.Cancel(ctx, quickID)
		if err != nil || c.Status != "completed" {
			t.Fatalf("cancelling a finished response: %v, %v; want it unchanged", c, err)
		}
	})

	t.Run("Hostile", func(t *testing.T) {
		_, err := other.Responses.Get(ctx, quickID, responses.ResponseGetParams{})
		wantStatus(err, http.StatusNotFound, "another credential's response")
		_, err = other.Responses.Cancel(ctx, quickID)
		wantStatus(err, http.StatusNotFound, "cancelling another credential's response")
		s := other.Responses.GetStreaming(ctx, quickID, responses.ResponseGetParams{})
		for s.Next() {
		}
		wantStatus(s.Err(), http.StatusNotFound, "streaming another credential's response")
		// A background response made without "stream": no events kept.
		s = a.Responses.GetStreaming(ctx, quickID, responses.ResponseGetParams{})
		for s.Next() {
		}
		wantStatus(s.Err(), http.StatusBadRequest, "streaming a response not created with stream")
		p := bg("QUICK")
		p.Store = openai.Bool(false)
		_, err = a.Responses.New(ctx, p)
		wantStatus(err, http.StatusBadRequest, "background with store: false")
	})

	t.Run("BoundPerCredential", func(t *testing.T) {
		const n = 1000
		var wg sync.WaitGroup
		var mu sync.Mutex
		var admitted []string
		refused := 0
		var other []error
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := a.Responses.New(ctx, bg("SLOW"))
				mu.Lock()
				defer mu.Unlock()
				var e *openai.Error
				switch {
				case err == nil:
					admitted = append(admitted, r.ID)
				case errors.As(err, &e) && e.StatusCode == http.StatusTooManyRequests:
					refused++
				default:
					other = append(other, err)
				}
			}()
		}
		wg.Wait()
		if len(other) > 0 || len(admitted) > 3 || len(admitted)+refused != n {
			t.Fatalf("%d admitted, %d refused with 429, other errors %v; want at most 3 admitted", len(admitted), refused, other)
		}
		for _, id := range admitted {
			if _, err := b.Responses.Cancel(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("NodeSDK", func(t *testing.T) {
		node := nodeReady(t)
		cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(cctx, node, filepath.Join(nodeDir, "background.mjs"))
		cmd.Env = append(os.Environ(), "OPENAI_BASE_URL="+baseA, "BASE_URL_B="+baseB, "OPENAI_API_KEY="+apiKey)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("background.mjs: %v\nstderr:\n%s\nstdout:\n%s", err, stderr.String(), stdout.String())
		}
		var rep struct {
			Poll struct {
				QueuedStatus string   `json:"queued_status"`
				Background   bool     `json:"background"`
				Status       string   `json:"status"`
				Text         string   `json:"text"`
				CallLogs     []string `json:"call_logs"`
			} `json:"poll"`
			Stream struct {
				Types     []string `json:"types"`
				Seqs      []int64  `json:"seqs"`
				Equal     bool     `json:"equal"`
				FinalText string   `json:"final_text"`
			} `json:"stream"`
			Cancel struct{ Status, Again, Finished string } `json:"cancel"`
		}
		if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
			t.Fatalf("background.mjs printed no report (%v): %s", err, stdout.String())
		}
		t.Logf("what openai-node decoded: %s", stdout.String())
		p := rep.Poll
		if p.QueuedStatus != "queued" || !p.Background || p.Status != "completed" || !strings.Contains(p.Text, "42") || len(p.CallLogs) != 1 || !strings.Contains(p.CallLogs[0], "42") {
			t.Errorf("poll: %+v", p)
		}
		st := rep.Stream
		for k, seq := range st.Seqs {
			if seq != int64(k) {
				t.Fatalf("stream: event %d has sequence_number %d", k, seq)
			}
		}
		if len(st.Types) < 5 || st.Types[0] != "response.created" || st.Types[1] != "response.queued" || st.Types[len(st.Types)-1] != "response.completed" ||
			!st.Equal || !strings.Contains(st.FinalText, "line 2") {
			t.Errorf("stream: %+v", st)
		}
		if c := rep.Cancel; c.Status != "cancelled" || c.Again != "cancelled" || c.Finished != "completed" {
			t.Errorf("cancel: %+v", c)
		}
	})

	t.Run("ReplicaStoppedMidRun", func(t *testing.T) {
		// SIGTERM: the run may finish within shutdown_timeout; this one
		// cannot, so it ends failed, with the reason, not in_progress.
		pc, c, _ := start(apiKey, "CODEINTERP_SERVER_SHUTDOWN_TIMEOUT=1s")
		r, err := c.Responses.New(ctx, bg("SLOW"))
		if err != nil {
			t.Fatal(err)
		}
		await(b, r.ID, func(r *responses.Response) bool { return r.Status == "in_progress" })
		time.Sleep(time.Second)
		pc.stop(t)
		got, err := b.Responses.Get(ctx, r.ID, responses.ResponseGetParams{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != "failed" || !strings.Contains(got.Error.Message, "server stopped") {
			t.Fatalf("a response whose replica stopped: status %q, error %q", got.Status, got.Error.Message)
		}
	})

	t.Run("ReplicaKilledMidRun", func(t *testing.T) {
		r, err := a.Responses.New(ctx, bg("SLOW"))
		if err != nil {
			t.Fatal(err)
		}
		await(b, r.ID, func(r *responses.Response) bool { return r.Status == "in_progress" })
		if err := pa.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		got := await(b, r.ID, ended)
		if got.Status != "failed" || !strings.Contains(got.Error.Message, "stopped") {
			t.Fatalf("a response whose replica died: status %q, error %q", got.Status, got.Error.Message)
		}
	})

}
