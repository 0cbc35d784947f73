package messages

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/tidwall/gjson"
	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/codeexec"
	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/codeinterp/codeinterp/internal/sse"
)

// This file is a live round: the model server's Messages event stream
// (message_start, content_block_start/delta/stop, message_delta,
// message_stop, ping, error) read as it arrives. A block of the model's
// own (text, thinking, a client tool's tool_use, another server tool's
// block) goes to the client event by event under the client's index; a
// tool_use of ours is held until its content_block_stop: its
// server_tool_use id binds its whole input (history.go), so it is
// announced, run and answered then, before the rest of the round is read.
// Each block is also put together whole, for the follow-up's assistant
// turn.

// liveBlock is one block of a live round.
type liveBlock struct {
	start gjson.Result // the content_block_start's content_block
	ours  bool         // a tool_use of ours: held, not streamed
	at    int          // the client's index (streamed blocks)
	// what the deltas added
	text, input, thinking, signature []byte
	citations                        []string
	deltas                           bool
}

// add is told a delta of b.
func (b *liveBlock) add(d gjson.Result) {
	b.deltas = true
	switch d.Get("type").Str {
	case "text_delta":
		b.text = append(b.text, d.Get("text").Str...)
	case "input_json_delta":
		b.input = append(b.input, d.Get("partial_json").Str...)
	case "thinking_delta":
		b.thinking = append(b.thinking, d.Get("thinking").Str...)
	case "signature_delta":
		b.signature = append(b.signature, d.Get("signature").Str...)
	case "citations_delta":
		b.citations = append(b.citations, d.Get("citation").Raw)
	}
}

// whole is the block as the deltas made it.
func (b *liveBlock) whole() gjson.Result {
	raw := b.start.Raw
	if !b.deltas {
		return b.start
	}
	var edits []jsonx.Edit
	switch b.start.Get("type").Str {
	case "text":
		edits = append(edits, jsonx.Set("text", jsonx.Quote(b.start.Get("text").Str+string(b.text))))
		if len(b.citations) > 0 {
			var cs []string
			if c := b.start.Get("citations"); c.IsArray() {
				c.ForEach(func(_, c gjson.Result) bool { cs = append(cs, c.Raw); return true })
			}
			edits = append(edits, jsonx.Set("citations", string(jsonx.AppendArray(nil, append(cs, b.citations...)))))
		}
	case "thinking":
		edits = append(edits, jsonx.Set("thinking", jsonx.Quote(b.start.Get("thinking").Str+string(b.thinking))),
			jsonx.Set("signature", jsonx.Quote(b.start.Get("signature").Str+string(b.signature))))
	default:
		if len(b.input) > 0 {
			in := string(b.input)
			if !gjson.Valid(in) || !gjson.Parse(in).IsObject() {
				// The follow-up's history needs an object; a call of ours
				// with it is refused as invalid_tool_input (no command).
				in = "{}"
			}
			edits = append(edits, jsonx.Set("input", in))
		}
	}
	if len(edits) == 0 {
		return b.start
	}
	return gjson.ParseBytes(jsonx.EditObject(raw, edits...))
}

// errUpstreamStream is a live round the model server's stream did not
// finish (it ended before message_stop, or sent what cannot be read).
var errUpstreamStream = errors.New("the upstream model server's stream broke off")

// liveAnswer is a live round's source: rc's events. rc is closed when the
// round is read (or ctx ends, which unblocks a read).
func liveAnswer(ev *events, rc io.ReadCloser) source {
	return func(ctx context.Context, l *loop, rd *round) *failure {
		defer rc.Close()
		stop := context.AfterFunc(ctx, func() { _ = rc.Close() })
		defer stop()
		err := l.readLive(ctx, ev, sse.NewReader(rc), rd)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return cancelled()
		}
		var f *failure
		if errors.As(err, &f) {
			return f
		}
		l.x.p.log.Warn("unusable upstream stream", zap.Int("round", l.rounds), zap.Error(err))
		return &failure{status: http.StatusBadGateway, body: errorJSON(http.StatusBadGateway, "The upstream model server's stream broke off or could not be read.")}
	}
}

func (f *failure) Error() string { return string(f.body) }

// readLive reads one round's events from r until message_stop.
func (l *loop) readLive(ctx context.Context, ev *events, r *sse.Reader, rd *round) error {
	blocks := map[int64]*liveBlock{}
	var startUsage, deltaUsage gjson.Result
	for {
		e, err := r.Next()
		if errors.Is(err, io.EOF) {
			return errUpstreamStream
		}
		if err != nil {
			return err
		}
		d := gjson.ParseBytes(e.Data)
		typ := e.Name
		if typ == "" {
			typ = d.Get("type").Str
		}
		if !d.IsObject() {
			return fmt.Errorf("%w: a %q event's data is not a JSON object", errUpstreamStream, typ)
		}
		idx := d.Get("index").Int()
		switch typ {
		case "message_start":
			m := d.Get("message")
			l.begin(m)
			startUsage = m.Get("usage")
		case "content_block_start":
			cb := d.Get("content_block")
			if _, dup := blocks[idx]; dup || !cb.IsObject() {
				return fmt.Errorf("%w: content_block_start %d", errUpstreamStream, idx)
			}
			b := &liveBlock{start: cb}
			if cb.Get("type").Str == "tool_use" && codeexec.IsToolName(cb.Get("name").Str) {
				b.ours = true
			} else {
				b.at = ev.open(cb.Raw)
			}
			blocks[idx] = b
		case "content_block_delta":
			b := blocks[idx]
			if b == nil {
				return fmt.Errorf("%w: a delta of block %d before its start", errUpstreamStream, idx)
			}
			b.add(d.Get("delta"))
			if !b.ours {
				ev.delta(b.at, d.Get("delta").Raw)
			}
		case "content_block_stop":
			b := blocks[idx]
			if b == nil {
				return fmt.Errorf("%w: content_block_stop %d before its start", errUpstreamStream, idx)
			}
			delete(blocks, idx)
			if !b.ours {
				ev.close(b.at)
			}
			l.modelBlock(ctx, rd, b.whole(), !b.ours)
			if ctx.Err() != nil {
				return ctx.Err()
			}
		case "message_delta":
			rd.stop, rd.seq = d.Get("delta.stop_reason").Raw, d.Get("delta.stop_sequence").Raw
			deltaUsage = d.Get("usage")
		case "message_stop":
			l.usage.add(mergeUsage(startUsage, deltaUsage))
			return nil
		case "ping":
			ev.write("ping", `{"type":"ping"}`)
		case "error":
			// The model server's own error, as Anthropic's stream ends
			// with it.
			return &failure{status: http.StatusBadGateway, body: e.Data}
		}
	}
}

// mergeUsage is a streamed round's usage: message_start's, with what
// message_delta's (cumulative) says instead.
func mergeUsage(start, delta gjson.Result) gjson.Result {
	raw := start.Raw
	if !start.IsObject() {
		raw = "{}"
	}
	var edits []jsonx.Edit
	delta.ForEach(func(k, v gjson.Result) bool {
		if v.Type != gjson.Null {
			edits = append(edits, jsonx.Set(k.Str, v.Raw))
		}
		return true
	})
	return gjson.ParseBytes(jsonx.EditObject(raw, edits...))
}
