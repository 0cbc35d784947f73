package messages

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/sse"
)

// ev is one event of an Anthropic stream, as a model server writes it.
func ev(typ, data string) string { return "event: " + typ + "\ndata: " + data + "\n\n" }

// TestReadLive: a round the model server streams, without calls of ours
// (those run in a container: e2e TestMessagesStream). The client gets
// each delta as it came under its own index (after the blocks already
// sent), the round is put together whole for the follow-up (text,
// thinking with its signature, citations, a client tool's input from its
// pieces), usage is message_start's with message_delta's over it; a broken
// stream is an error, the model server's own error event its failure.
func TestReadLive(t *testing.T) {
	const head = `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"cache_read_input_tokens":3,"output_tokens":1}}}`
	stream := ev("message_start", head) + ev("ping", `{"type":"ping"}`) +
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Hm"}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"sig"}}`) +
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`) +
		ev("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"text","text":"","citations":null}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hel"}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"citations_delta","citation":{"type":"char_location","cited_text":"x"}}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"lo \"you\""}}`) +
		ev("content_block_stop", `{"type":"content_block_stop","index":1}`) +
		ev("content_block_start", `{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_9","name":"get_weather","input":{}}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"city\":"}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"\"Oslo\"}"}}`) +
		ev("content_block_stop", `{"type":"content_block_stop","index":2}`) +
		ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":40,"input_tokens":null}}`) +
		ev("message_stop", `{"type":"message_stop"}`)
	p := testProcessor(t, true)
	read := func(stream string) (*loop, *round, string, error) {
		var out bytes.Buffer
		e := newEvents(&out, 0)
		e.index = 2 // blocks of an earlier round came first
		l := &loop{x: &Exchange{p: p}, em: e}
		rd := &round{}
		err := l.readLive(context.Background(), e, sse.NewReader(strings.NewReader(stream)), rd)
		return l, rd, out.String(), err
	}
	l, rd, out, err := read(stream)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range strings.Split(strings.TrimSuffix(out, "\n\n"), "\n\n") {
		d := gjson.Parse(e[strings.Index(e, "data: ")+6:])
		s := d.Get("type").Str
		if i := d.Get("index"); i.Exists() {
			s += ":" + i.Raw
		}
		if dt := d.Get("delta.type"); dt.Exists() {
			s += ":" + dt.Str
		}
		got = append(got, s)
	}
	want := "message_start,ping,content_block_start:2,content_block_delta:2:thinking_delta,content_block_delta:2:signature_delta,content_block_stop:2," +
		"content_block_start:3,content_block_delta:3:text_delta,content_block_delta:3:citations_delta,content_block_delta:3:text_delta,content_block_stop:3," +
		"content_block_start:4,content_block_delta:4:input_json_delta,content_block_delta:4:input_json_delta,content_block_stop:4"
	if strings.Join(got, ",") != want {
		t.Errorf("events:\n%s\nwant\n%s", strings.Join(got, ","), want)
	}
	wantContent := []string{
		`{"type":"thinking","thinking":"Hm","signature":"sig"}`,
		`{"type":"text","text":"Hello \"you\"","citations":[{"type":"char_location","cited_text":"x"}]}`,
		`{"type":"tool_use","id":"toolu_9","name":"get_weather","input":{"city":"Oslo"}}`,
	}
	if strings.Join(rd.content, "\n") != strings.Join(wantContent, "\n") {
		t.Errorf("the round whole:\n%s", strings.Join(rd.content, "\n"))
	}
	if rd.theirs != 1 || rd.ours != 0 || rd.stop != `"tool_use"` || rd.seq != "null" || len(l.blocks) != 3 {
		t.Errorf("round %+v, %d blocks", rd, len(l.blocks))
	}
	if u := l.usage; u.input != 12 || u.output != 40 || u.cacheRead != 3 || !u.cache {
		t.Errorf("usage %+v", u)
	}
	if l.id != "msg_1" || l.model != "m" {
		t.Errorf("head %q %q", l.id, l.model)
	}

	for _, tc := range []struct {
		name, stream string
		failure      string // the failure's body, when the model server's own
	}{
		{"ends before message_stop", ev("message_start", head) + ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`), ""},
		{"a delta before its start", ev("message_start", head) + ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}`), ""},
		{"a block started twice", ev("message_start", head) + strings.Repeat(ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`), 2), ""},
		{"data that is not an object", ev("message_start", `[1]`), ""},
		{"the model server's error", ev("message_start", head) + ev("error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`), `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`},
	} {
		_, _, _, err := read(tc.stream)
		var f *failure
		switch {
		case tc.failure != "":
			if !errors.As(err, &f) || string(f.body) != tc.failure {
				t.Errorf("%s: %v", tc.name, err)
			}
		case !errors.Is(err, errUpstreamStream):
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}
