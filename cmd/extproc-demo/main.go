// Command extproc-demo shows codeinterp end to end on one machine: it
// starts `extproc dev` (the ext_proc server behind its Envoy-like front
// proxy) in front of a scripted model, sends one Responses request with
// OpenAI's native code_interpreter tool through the official openai-go
// client, non-streamed and then streamed, and prints what comes back,
// including the real code_interpreter_call.
//
//	extproc-demo [--extproc PATH] [--config FILE]
//	extproc-demo --upstream http://127.0.0.1:11434 --model qwen3:8b   (a real model)
//
// With --upstream the scripted model is not started and the request goes to
// the given OpenAI-compatible server (vLLM, Ollama, OpenAI; the API key comes
// from OPENAI_API_KEY). Production runs Envoy, not `extproc dev`.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "extproc-demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("extproc-demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	extproc := fs.String("extproc", defaultExtproc(), "the extproc binary")
	configPath := fs.String("config", "", "configuration FILE passed to `extproc dev`")
	upstream := fs.String("upstream", "", "a real OpenAI-compatible server URL instead of the scripted model")
	model := fs.String("model", "gpt-5.6", "model name to ask for")
	prompt := fs.String("prompt", "Use Python to compute the sum and the mean of the squares of 1 through 10.", "the user message")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	up := *upstream
	if up == "" {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: &scriptedModel{log: stderr}, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(lis) }()
		defer srv.Close()
		up = "http://" + lis.Addr().String()
		fmt.Fprintf(stderr, "scripted model on %s (use --upstream to talk to a real one)\n", up)
	}

	devArgs := []string{"dev", "--listen", "127.0.0.1:0", "--upstream", up}
	if *configPath != "" {
		devArgs = append(devArgs, "--config", *configPath)
	}
	base, stopDev, err := startDev(ctx, *extproc, devArgs, stderr)
	if err != nil {
		return err
	}
	defer stopDev()
	fmt.Fprintf(stderr, "extproc dev is up: OPENAI_BASE_URL=%s\n\n", base)

	apiKey := os.Getenv("OPENAI_API_KEY")
	if apiKey == "" {
		apiKey = "sk-demo"
	}
	client := openai.NewClient(option.WithBaseURL(base+"/"), option.WithAPIKey(apiKey), option.WithMaxRetries(0))
	params := responses.ResponseNewParams{
		Model: *model,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(*prompt)},
		Store: openai.Bool(false),
		Tools: []responses.ToolUnionParam{responses.ToolParamOfCodeInterpreter(
			responses.ToolCodeInterpreterContainerCodeInterpreterContainerAutoParam{})},
		Include: []responses.ResponseIncludable{responses.ResponseIncludableCodeInterpreterCallOutputs},
	}

	fmt.Fprintln(stdout, "=== non-streaming: client.Responses.New ===")
	r, err := client.Responses.New(ctx, params)
	if err != nil {
		return fmt.Errorf("non-streaming request: %w", err)
	}
	if err := printResponse(stdout, r); err != nil {
		return err
	}

	fmt.Fprintln(stdout, "\n=== streaming: client.Responses.NewStreaming ===")
	fmt.Fprintln(stdout, "  (ms since the request: each event is printed as it arrives; the scripted model pauses 40 ms per event)")
	start := time.Now()
	st := client.Responses.NewStreaming(ctx, params)
	var final *responses.Response
	for st.Next() {
		ev := st.Current()
		line := fmt.Sprintf("  %5d ms %3d %s", time.Since(start).Milliseconds(), ev.SequenceNumber, ev.Type)
		switch ev.Type {
		case "response.code_interpreter_call_code.delta", "response.output_text.delta":
			line += fmt.Sprintf(" %q", ev.Delta)
		case "response.output_item.added", "response.output_item.done":
			line += " (" + ev.Item.Type + ")"
		case "response.completed":
			f := ev.Response
			final = &f
		}
		fmt.Fprintln(stdout, line)
	}
	if err := st.Err(); err != nil {
		return fmt.Errorf("streaming request: %w", err)
	}
	if final == nil {
		return errors.New("the stream ended without response.completed")
	}
	fmt.Fprintln(stdout, "final response from response.completed:")
	return printResponse(stdout, final)
}

// printResponse prints the whole response and then its code_interpreter_call.
func printResponse(w io.Writer, r *responses.Response) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, []byte(r.RawJSON()), "", "  "); err != nil {
		return fmt.Errorf("response is not JSON: %w", err)
	}
	fmt.Fprintln(w, buf.String())
	found := false
	for _, it := range r.Output {
		if it.Type != "code_interpreter_call" {
			continue
		}
		found = true
		ci := it.AsCodeInterpreterCall()
		fmt.Fprintf(w, "code_interpreter_call %s  status=%s  container=%s\n  code:\n%s", ci.ID, ci.Status, ci.ContainerID, indentBlock(ci.Code))
		for _, o := range ci.Outputs {
			fmt.Fprintf(w, "  %s:\n%s", o.Type, indentBlock(o.Logs))
		}
	}
	fmt.Fprintf(w, "answer: %s\n", r.OutputText())
	if !found {
		return errors.New("the response has no code_interpreter_call")
	}
	return nil
}

func indentBlock(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString("    " + l + "\n")
	}
	return b.String()
}

// startDev starts `extproc dev` and waits for the line naming its address.
// Its logs go to stderr.
func startDev(ctx context.Context, bin string, args []string, stderr io.Writer) (base string, stop func(), err error) {
	cmd := exec.Command(bin, args...)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		return "", nil, err
	}
	cmd.Stdout = stderr
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("starting %s: %w (build it with `go build -o bin/ ./cmd/extproc` or pass --extproc)", bin, err)
	}
	exited := make(chan error, 1)
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if rest, ok := strings.CutPrefix(line, "extproc dev: OPENAI_BASE_URL="); ok {
				select {
				case found <- strings.Fields(rest)[0]:
				default:
				}
			}
			if quietLog(line) {
				continue
			}
			fmt.Fprintln(stderr, "  [extproc] "+line)
		}
		exited <- cmd.Wait()
	}()
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	select {
	case base = <-found:
		return base, stop, nil
	case err := <-exited:
		return "", nil, fmt.Errorf("extproc dev exited before it was ready: %v", err)
	case <-ctx.Done():
		stop()
		return "", nil, fmt.Errorf("waiting for extproc dev: %w", ctx.Err())
	}
}

// quietLog reports JSON log lines below warn level: the demo's output is
// the response, not the server's info logs.
func quietLog(line string) bool {
	var l struct {
		Level string `json:"level"`
	}
	if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &l) != nil {
		return false
	}
	return l.Level == "debug" || l.Level == "info"
}

// defaultExtproc is extproc next to this binary, else the one on PATH.
func defaultExtproc() string {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "extproc")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "extproc"
}
