package messages

import (
	"bytes"
	"io"
	"sync"
	"time"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/jsonx"
)

// collector is the buffered path's emitter: the loop keeps the blocks.
type collector struct{}

func (collector) start(string)          {}
func (collector) block(string)          {}
func (collector) running() func()       { return func() {} }
func (collector) finish(string, string) {}

// events writes Anthropic's stream: message_start, each block as
// content_block_start/delta/stop (a tool's input as one input_json_delta;
// a result whole in its content_block_start), message_delta and
// message_stop; ping while a call runs. Each event is one Write, flushed.
type events struct {
	mu    sync.Mutex
	w     io.Writer
	fl    interface{ Flush() error }
	every time.Duration
	index int
	err   error
}

func newEvents(w io.Writer, every time.Duration) *events {
	e := &events{w: w, every: every}
	e.fl, _ = w.(interface{ Flush() error })
	return e
}

func (e *events) write(name, data string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return
	}
	if _, err := io.WriteString(e.w, "event: "+name+"\ndata: "+data+"\n\n"); err != nil {
		e.err = err
		return
	}
	if e.fl != nil {
		e.err = e.fl.Flush()
	}
}

func (e *events) start(head string) {
	e.write("message_start", `{"type":"message_start","message":`+head+`}`)
}

func (e *events) block(b string) {
	i := itoa(e.index)
	e.index++
	blk := gjson.Parse(b)
	var first, delta string
	switch blk.Get("type").Str {
	case "text":
		first = string(jsonx.EditObject(b, jsonx.Set("text", `""`)))
		if t := blk.Get("text").Str; t != "" {
			delta = `{"type":"text_delta","text":` + blk.Get("text").Raw + `}`
		}
	case "thinking":
		first = string(jsonx.EditObject(b, jsonx.Set("thinking", `""`), jsonx.Set("signature", `""`)))
		e.write("content_block_start", `{"type":"content_block_start","index":`+i+`,"content_block":`+first+`}`)
		e.write("content_block_delta", `{"type":"content_block_delta","index":`+i+`,"delta":{"type":"thinking_delta","thinking":`+blk.Get("thinking").Raw+`}}`)
		if s := blk.Get("signature"); s.Str != "" {
			e.write("content_block_delta", `{"type":"content_block_delta","index":`+i+`,"delta":{"type":"signature_delta","signature":`+s.Raw+`}}`)
		}
		e.write("content_block_stop", `{"type":"content_block_stop","index":`+i+`}`)
		return
	case "tool_use", "server_tool_use":
		first = string(jsonx.EditObject(b, jsonx.Set("input", `{}`)))
		if in := blk.Get("input"); in.Raw != "" && in.Raw != "{}" {
			delta = `{"type":"input_json_delta","partial_json":` + jsonx.Quote(in.Raw) + `}`
		}
	default:
		first = b // a result block arrives whole
	}
	e.write("content_block_start", `{"type":"content_block_start","index":`+i+`,"content_block":`+first+`}`)
	if delta != "" {
		e.write("content_block_delta", `{"type":"content_block_delta","index":`+i+`,"delta":`+delta+`}`)
	}
	e.write("content_block_stop", `{"type":"content_block_stop","index":`+i+`}`)
}

func (e *events) running() func() {
	if e.every <= 0 {
		return func() {}
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(e.every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				e.write("ping", `{"type":"ping"}`)
			}
		}
	}()
	return func() { close(stop); <-done }
}

func (e *events) finish(delta, usage string) {
	e.write("message_delta", `{"type":"message_delta","delta":`+delta+`,"usage":`+usage+`}`)
	e.write("message_stop", `{"type":"message_stop"}`)
}

// eventStream is a finished message as Anthropic's events (the buffered
// path's answer to a streaming client).
func eventStream(msg []byte) []byte {
	var buf bytes.Buffer
	e := newEvents(&buf, 0)
	m := gjson.ParseBytes(msg)
	head := jsonx.EditObject(m.Raw, jsonx.Set("content", "[]"), jsonx.Set("stop_reason", "null"), jsonx.Set("stop_sequence", "null"),
		jsonx.Set("container", "null"), jsonx.Set("usage", `{"input_tokens":`+itoa(int(m.Get("usage.input_tokens").Int()))+`,"output_tokens":1}`))
	e.start(string(head))
	m.Get("content").ForEach(func(_, b gjson.Result) bool {
		e.block(b.Raw)
		return true
	})
	e.finish(`{"stop_reason":`+m.Get("stop_reason").Raw+`,"stop_sequence":`+m.Get("stop_sequence").Raw+`,"container":`+m.Get("container").Raw+`}`, m.Get("usage").Raw)
	return buf.Bytes()
}
