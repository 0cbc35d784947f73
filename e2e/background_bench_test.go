package e2e

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/store/redis/redistest"
)

// BenchmarkBackground measures background mode through two `extproc dev`
// replicas sharing a Redis on loopback (issue 30's targets):
//
//   - queued: a background request until its queued Response is read, and
//     plain: the same request without background (the model answers in one
//     round, no code) — queued-over-plain is the difference of medians;
//   - resume: GET /v1/responses/{id}?stream=true&starting_after=N on the
//     other replica until the first replayed event is read;
//   - cancel: POST /v1/responses/{id}/cancel on the other replica, during a
//     run (a cell that sleeps), until the answer (status cancelled) is
//     read: the loop stopped and the end stored — on wasm, and on gVisor.
func BenchmarkBackground(b *testing.B) {
	bin := buildExtproc(b)
	sh := loadShapes(b)
	redisURL := redistest.Start(b)
	var m *model
	m = newModel(b, sh, func(t testing.TB, c *convo) reply {
		switch c.userText() {
		case "PLAIN":
			return reply{items: []string{m.message("no code needed")}}
		case "SLOW":
			if len(c.outputs()) == 0 {
				return reply{items: []string{m.call("import time\ntime.sleep(120)")}}
			}
		default:
			if len(c.outputs()) == 0 {
				return reply{items: []string{m.call("for i in range(3):\n    print(i)")}}
			}
		}
		return reply{items: []string{m.message("done")}}
	})
	m.live = true
	env := []string{"CODEINTERP_STORE_BACKEND=redis", "CODEINTERP_STORE_REDIS_URL=" + redisURL, "CODEINTERP_CHECKPOINTS_ENABLED=false", "CODEINTERP_CLUSTER_SECRET=the-e2e-replicas-shared-cluster-key"}
	dev := func(config string) string { return startDev(b, bin, m.URL(), config, env...) }
	wasmCfg := "sandbox:\n  isolation:\n    cgroup_parent: /codeinterp-e2e\nlogging:\n  level: warn\n"
	a, other := dev(wasmCfg), dev(wasmCfg)
	c := &http.Client{}
	req := func(method, u, body string) *http.Request {
		r, err := http.NewRequest(method, u, strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer "+apiKey)
		return r
	}
	read := func(r *http.Request) []byte {
		resp, err := c.Do(r)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("%s %s: %d %s", r.Method, r.URL, resp.StatusCode, out)
		}
		return out
	}
	body := func(input string, background, stream bool) string {
		s := `{"model":"gpt-5.6","input":"` + input + `","tools":[{"type":"code_interpreter","container":{"type":"auto"}}]`
		if background {
			s += `,"background":true`
		}
		if stream {
			s += `,"stream":true`
		}
		return s + "}"
	}
	await := func(base, id string, done func(status string) bool) {
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			st := gjson.GetBytes(read(req(http.MethodGet, base+"/responses/"+id, "")), "status").Str
			if done(st) {
				return
			}
			if time.Now().After(deadline) {
				b.Fatalf("%s still %s", id, st)
			}
		}
	}
	ended := func(s string) bool { return s != "queued" && s != "in_progress" }

	b.Run("queued", func(b *testing.B) {
		var plain, queued []time.Duration
		var ids []string
		for range b.N {
			t0 := time.Now()
			read(req(http.MethodPost, a+"/responses", body("PLAIN", false, false)))
			plain = append(plain, time.Since(t0))
			t0 = time.Now()
			out := read(req(http.MethodPost, a+"/responses", body("PLAIN", true, false)))
			queued = append(queued, time.Since(t0))
			if gjson.GetBytes(out, "status").Str != "queued" {
				b.Fatalf("not queued: %s", out)
			}
			ids = append(ids, gjson.GetBytes(out, "id").Str)
			// One at a time: the bound is not what is measured.
			b.StopTimer()
			await(a, ids[len(ids)-1], ended)
			b.StartTimer()
		}
		b.StopTimer()
		pm, _ := quantiles(plain)
		qm, _ := quantiles(queued)
		reportQuantiles(b, plain, "plain", false)
		reportQuantiles(b, queued, "queued", true)
		b.ReportMetric(qm-pm, "queued-over-plain-median-µs")
	})

	b.Run("resume", func(b *testing.B) {
		// One streamed background response, finished, resumed b.N times.
		resp, err := c.Do(req(http.MethodPost, a+"/responses", body("STREAM", true, true)))
		if err != nil {
			b.Fatal(err)
		}
		first, _ := bufio.NewReader(resp.Body).ReadString('\n')
		_ = first
		var id string
		for deadline := time.Now().Add(time.Minute); id == ""; time.Sleep(10 * time.Millisecond) {
			// The id is the first event's: read the stream to its end.
			all, _ := io.ReadAll(resp.Body)
			for _, l := range bytes.Split(all, []byte("\n")) {
				if d, ok := bytes.CutPrefix(l, []byte("data: ")); ok && id == "" {
					id = gjson.GetBytes(d, "response.id").Str
				}
			}
			if time.Now().After(deadline) {
				b.Fatal("no response id in the stream")
			}
		}
		resp.Body.Close()
		await(other, id, ended)
		var firsts []time.Duration
		b.ResetTimer()
		for range b.N {
			t0 := time.Now()
			r, err := c.Do(req(http.MethodGet, other+"/responses/"+id+"?stream=true&starting_after=5", ""))
			if err != nil {
				b.Fatal(err)
			}
			br := bufio.NewReader(r.Body)
			for {
				l, err := br.ReadString('\n')
				if err != nil {
					b.Fatalf("no replayed event: %v", err)
				}
				if strings.HasPrefix(l, "data: ") {
					break
				}
			}
			firsts = append(firsts, time.Since(t0))
			r.Body.Close()
		}
		b.StopTimer()
		reportQuantiles(b, firsts, "first-event", true)
	})

	cancel := func(b *testing.B, base, peer string) {
		var ds []time.Duration
		for range b.N {
			b.StopTimer()
			out := read(req(http.MethodPost, base+"/responses", body("SLOW", true, false)))
			id := gjson.GetBytes(out, "id").Str
			await(peer, id, func(s string) bool { return s == "in_progress" })
			time.Sleep(time.Second) // the cell is running
			b.StartTimer()
			t0 := time.Now()
			got := read(req(http.MethodPost, peer+"/responses/"+id+"/cancel", ""))
			ds = append(ds, time.Since(t0))
			if st := gjson.GetBytes(got, "status").Str; st != "cancelled" {
				b.Fatalf("cancel answered %s", st)
			}
		}
		b.StopTimer()
		reportQuantiles(b, ds, "cancel", true)
	}
	b.Run("cancel-wasm", func(b *testing.B) { cancel(b, a, other) })
	b.Run("cancel-gvisor", func(b *testing.B) {
		g := dev("sandbox:\n  provider: gvisor\n  isolation:\n    cgroup_parent: /codeinterp-e2e-gvisor\nlogging:\n  level: warn\n")
		cancel(b, g, other)
	})
}
