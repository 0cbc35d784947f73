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
// content_block_start/delta/stop (a live round's blocks as the model
// server streams them: open, delta, close; a whole block's tool input as
// one input_json_delta, a result whole in its content_block_start: block),
// message_delta and message_stop; ping while a call runs. Each event is
// one Write, flushed.
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

// open starts a block (content_block_start with first as its
// content_block) under the next index, which it returns.
func (e *events) open(first string) int {
	e.mu.Lock()
	i := e.index
	e.index++
	e.mu.Unlock()
	e.write("content_block_start", `{"type":"content_block_start","index":`+itoa(i)+`,"content_block":`+first+`}`)
	return i
}

// delta is a content_block_delta of block i.
func (e *events) delta(i int, delta string) {
	e.write("content_block_delta", `{"type":"content_block_delta","index":`+itoa(i)+`,"delta":`+delta+`}`)
}

// close ends block i.
func (e *events) close(i int) {
	e.write("content_block_stop", `{"type":"content_block_stop","index":`+itoa(i)+`}`)
}

// block is a whole block as its events.
func (e *events) block(b string) {
	blk := gjson.Parse(b)
	switch blk.Get("type").Str {
	case "text":
		i := e.open(string(jsonx.EditObject(b, jsonx.Set("text", `""`))))
		if t := blk.Get("text").Str; t != "" {
			e.delta(i, `{"type":"text_delta","text":`+blk.Get("text").Raw+`}`)
		}
		e.close(i)
	case "thinking":
		i := e.open(string(jsonx.EditObject(b, jsonx.Set("thinking", `""`), jsonx.Set("signature", `""`))))
		e.delta(i, `{"type":"thinking_delta","thinking":`+blk.Get("thinking").Raw+`}`)
		if s := blk.Get("signature"); s.Str != "" {
			e.delta(i, `{"type":"signature_delta","signature":`+s.Raw+`}`)
		}
		e.close(i)
	case "tool_use", "server_tool_use":
		i := e.open(string(jsonx.EditObject(b, jsonx.Set("input", `{}`))))
		if in := blk.Get("input"); in.Raw != "" && in.Raw != "{}" {
			e.delta(i, `{"type":"input_json_delta","partial_json":`+jsonx.Quote(in.Raw)+`}`)
		}
		e.close(i)
	default:
		e.close(e.open(b)) // a result block arrives whole
	}
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
