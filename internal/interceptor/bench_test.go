package interceptor

import (
	"strconv"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/sse"
)

// requestOfSize builds a realistic request of about n bytes: a conversation
// of messages (the bulk), a function tool, and, if withTool, the native
// code_interpreter tool after the input (the worst place for a scanner).
func requestOfSize(n int, withTool bool) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"gpt-5.6","instructions":"Be brief.","input":[`)
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. \"Quoted\" and \\escaped\\ text, unicode é 日本. ", 10)
	for i := 0; b.Len() < n-300; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		b.WriteString(`{"type":"message","role":"` + role + `","content":[{"type":"input_text","text":` + jsonx.Quote(text) + `}]}`)
	}
	b.WriteString(`],"tools":[{"type":"function","name":"lookup","parameters":{"type":"object","properties":{"q":{"type":"string"}}}}`)
	if withTool {
		b.WriteString(`,{"type":"code_interpreter","container":{"type":"auto"}}`)
	}
	b.WriteString(`],"tool_choice":"auto","stream":true,"store":false}`)
	return []byte(b.String())
}

func BenchmarkRewriteRequest(b *testing.B) {
	ic := newRewriter(b, nil)
	for _, size := range []int{1 << 10, 100 << 10, 1 << 20} {
		body := requestOfSize(size, true)
		b.Run(strconv.Itoa(size>>10)+"KiB", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				x, err := ic.RewriteRequest(body)
				if err != nil || !x.Intercepted() {
					b.Fatalf("not intercepted: %v", err)
				}
			}
		})
	}
}

// BenchmarkPassThrough measures detection on a 100 KiB request without our
// tool: the common case, paid by every request on the route.
func BenchmarkPassThrough(b *testing.B) {
	ic := newRewriter(b, nil)
	cases := map[string][]byte{
		"100KiB":               requestOfSize(100<<10, false),
		"100KiB-text-mentions": []byte(strings.Replace(string(requestOfSize(100<<10, false)), "Be brief.", "You have no code_interpreter tool.", 1)),
	}
	for name, body := range cases {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				x, err := ic.RewriteRequest(body)
				if err != nil || x.Modified() {
					b.Fatalf("not passed through: %v", err)
				}
			}
		})
	}
}

// spliceFixture builds a finished loop of 5 rounds, 20 output items in all
// (reasoning, calls, texts), as the splice gets it.
func spliceFixture(b *testing.B, ic *Interceptor, stream bool) (*loop, []*round) {
	b.Helper()
	x, err := ic.RewriteRequest(requestOfSize(4<<10, true))
	if err != nil {
		b.Fatal(err)
	}
	x.req.includeOutputs = true
	x.req.clientStream = stream
	l := &loop{x: x, cfg: ic.cfg, log: ic.log, containerID: idgen.New("cntr_")}
	var rounds []*round
	code := "import statistics\nvalues = [i * i for i in range(100)]\nprint(statistics.mean(values), statistics.pstdev(values))\n"
	for r := 0; r < 5; r++ {
		items := []string{reasoningItem("Working out the statistics of the values, step " + strconv.Itoa(r) + ".")}
		if r < 4 {
			items = append(items, msgItem("Running step "+strconv.Itoa(r)+"."), fcItem("call_a"+strconv.Itoa(r), code), fcItem("call_b"+strconv.Itoa(r), code))
		} else {
			items = append(items, msgItem(strings.Repeat("The mean is 3283.5 and the deviation 2953.6. ", 8)), msgItem("Done."), msgItem("Anything else?"))
		}
		body := `{"id":"resp_` + strconv.Itoa(r) + `","object":"response","created_at":1790010453,"status":"completed","model":"m","output":[` +
			strings.Join(items, ",") + `],"tools":[],"tool_choice":"auto","usage":{"input_tokens":1315,"input_tokens_details":{"cached_tokens":1143},"output_tokens":43,"output_tokens_details":{"reasoning_tokens":32},"total_tokens":1358}}`
		rd, err := parseRound([]byte(body), &x.req)
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range rd.calls {
			c.res = sandbox.Result{Outcome: sandbox.OutcomeCompleted, Stdout: "3283.5 2953.6\n"}
		}
		rounds = append(rounds, rd)
	}
	n := 0
	for _, rd := range rounds {
		n += len(rd.items)
	}
	if n != 20 {
		b.Fatalf("%d items", n)
	}
	return l, rounds
}

func BenchmarkSplice20Items(b *testing.B) {
	ic := newRewriter(b, nil)
	l, rounds := spliceFixture(b, ic, false)
	b.ReportAllocs()
	for b.Loop() {
		_ = l.splice(rounds, false)
	}
}

func BenchmarkSpliceAndSSE20Items(b *testing.B) {
	ic := newRewriter(b, nil)
	l, rounds := spliceFixture(b, ic, true)
	b.ReportAllocs()
	var out []byte
	for b.Loop() {
		out = sse.EventStream(l.splice(rounds, false), true)
	}
	b.ReportMetric(float64(strings.Count(string(out), "\n\n")), "events")
}
