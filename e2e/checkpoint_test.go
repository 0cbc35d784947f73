package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/codeinterp/codeinterp/internal/checkpoint/checkpointtest"
	"github.com/codeinterp/codeinterp/internal/store/redis/redistest"
)

// TestContainerStateAcrossReplicas is issue 28's table, as a user meets
// it: `extproc dev` replicas on one Redis and one checkpoint store (a
// shared directory, one key), each with its own wasm snapshot, one
// container. Its Python state survives the holder's kill -9 (after the
// idle checkpoint: the next turn lands on the other replica, which
// fetches the snapshot the state was taken over), a SIGTERM (the drain
// checkpoints) and a restart, and the model is never told its variables
// were reset. While a replica holds the container, turns on the other
// run there (forwarded), concurrent ones too.
func TestContainerStateAcrossReplicas(t *testing.T) {
	sh := loadShapes(t)
	bin := buildExtproc(t)
	redisURL := redistest.Start(t)
	steps := map[string]string{
		"STEP1": "x = 41\nimport statistics",
		"STEP2": "x += 1\nprint(x)",
		"STEP3": "print(x, statistics.mean([x, x]))",
		"STEP4": "x = 100\nimport time\ntime.sleep(120)",
		"STEP5": "print(x)",
		// Forwarded and concurrent turns (while A holds the container).
		"FWD":  "print(x)",
		"INCR": "n = globals().get('n', 0) + 1",
		"N":    "print(n)",
	}
	var m *model
	m = newModel(t, sh, func(t testing.TB, c *convo) reply {
		if len(c.outputs()) == 0 {
			return reply{items: []string{m.call(steps[c.userText()])}}
		}
		// The model answers with exactly what the tool told it.
		return reply{items: []string{m.message(lastOutputs(c)[0].Get("output").Str)}}
	})
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	ckpt := t.TempDir()
	env := []string{"CODEINTERP_STORE_BACKEND=redis", "CODEINTERP_STORE_REDIS_URL=" + redisURL,
		"CODEINTERP_CHECKPOINTS_DIR=" + ckpt, "CODEINTERP_CHECKPOINTS_KEY=" + base64.StdEncoding.EncodeToString(key),
		"CODEINTERP_CHECKPOINTS_AFTER=100ms"}
	start := func() (*proc, openai.Client) {
		p := startProc(t, bin, env, "dev", "--listen", "127.0.0.1:0", "--upstream", m.URL(),
			"--config", filepath.Join("..", "testdata", "e2e", "extproc.yaml"))
		t.Cleanup(func() { _ = p.cmd.Process.Kill() })
		base := p.baseURL(t)
		return p, openai.NewClient(option.WithBaseURL(base+"/"), option.WithAPIKey(apiKey), option.WithMaxRetries(0))
	}
	pa, a := start()
	pb, b := start()
	ctx := context.Background()
	ctr, err := a.Containers.New(ctx, openai.ContainerNewParams{Name: "state"})
	if err != nil {
		t.Fatal(err)
	}
	turn := func(c openai.Client, step string) string {
		t.Helper()
		p := ciParams(step, true)
		p.Tools = []responses.ToolUnionParam{responses.ToolParamOfCodeInterpreter(ctr.ID)}
		r, err := c.Responses.New(ctx, p)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		out := r.OutputText()
		// (STEP1 is the container's first run: a container made through
		// the API before it gets the note whatever happened.)
		if step != "STEP1" && strings.Contains(out, "fresh") {
			t.Fatalf("%s: the model was told the interpreter is fresh: %q", step, out)
		}
		return out
	}
	turn(a, "STEP1")
	// A holds the container: a turn on B runs there (forwarded), and
	// concurrent turns through both replicas reach its one interpreter.
	if out := turn(b, "FWD"); !strings.Contains(out, "stdout:\n41") {
		t.Fatalf("a turn on replica B while A holds the container: %q, want x = 41", out)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := ciParams("INCR", true)
			p.Tools = []responses.ToolUnionParam{responses.ToolParamOfCodeInterpreter(ctr.ID)}
			r, err := []openai.Client{a, b}[i%2].Responses.New(ctx, p)
			if err == nil && strings.Contains(r.OutputText(), "fresh") {
				err = fmt.Errorf("a concurrent turn was told the interpreter is fresh: %q", r.OutputText())
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if out := turn(b, "N"); !strings.Contains(out, "stdout:\n6") {
		t.Fatalf("after 6 concurrent turns through two replicas: %q, want n = 6", out)
	}
	waitFor(t, "replica A's idle checkpoint", func() bool {
		// The head names the state: a state without it is not a
		// checkpoint yet (the writer may die between the two).
		_, running, ok := checkpointtest.Head(ckpt, ctr.ID)
		return ok && !running && len(checkpointtest.States(ckpt, ctr.ID)) == 1
	})
	// kill -9 of the holder: nothing runs on its way down.
	if err := pa.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-pa.done
	if out := turn(b, "STEP2"); !strings.Contains(out, "stdout:\n42") {
		t.Fatalf("the next turn on replica B after A's kill -9: %q, want x = 42 from A's state", out)
	}
	// SIGTERM (a rolling deploy): B checkpoints what it holds on its way
	// down; the replica started after it restores that.
	pb.stop(t)
	pc, c := start()
	if out := turn(c, "STEP3"); !strings.Contains(out, "stdout:\n42 42") {
		t.Fatalf("after B's SIGTERM, on a new replica: %q, want 42 42", out)
	}
	// A replica killed mid-run: its client gets an error, the container
	// is not bricked, and the next turn elsewhere restores the last
	// checkpoint (C's idle one, after STEP3) and says it is older than
	// the call that was running.
	head := func() (running, ok bool) {
		_, running, ok = checkpointtest.Head(ckpt, ctr.ID)
		return running, ok
	}
	// STEP3 marked the head running before it ran; C's idle checkpoint
	// after it clears that.
	waitFor(t, "replica C's idle checkpoint", func() bool { running, ok := head(); return ok && !running })
	failed := make(chan error, 1)
	go func() {
		p := ciParams("STEP4", true)
		p.Tools = []responses.ToolUnionParam{responses.ToolParamOfCodeInterpreter(ctr.ID)}
		_, err := c.Responses.New(ctx, p)
		failed <- err
	}()
	waitFor(t, "STEP4 running on replica C", func() bool { running, ok := head(); return ok && running })
	if err := pc.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-pc.done
	if err := <-failed; err == nil {
		t.Fatal("the call running on the killed replica succeeded")
	}
	_, d := start()
	p := ciParams("STEP5", true)
	p.Tools = []responses.ToolUnionParam{responses.ToolParamOfCodeInterpreter(ctr.ID)}
	r, err := d.Responses.New(ctx, p)
	if err != nil {
		t.Fatalf("STEP5: %v", err)
	}
	if out := r.OutputText(); !strings.Contains(out, "stdout:\n42") || !strings.Contains(out, "restored from the container's last checkpoint") {
		t.Fatalf("after C was killed mid-run: %q, want x = 42 and the note that the state is older than the last call", out)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within a minute", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
