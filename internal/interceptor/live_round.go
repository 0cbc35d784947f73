package interceptor

import (
	"context"
	"errors"
	"io"
	"sort"
	"strconv"

	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/codeinterp/codeinterp/internal/sse"
	"github.com/tidwall/gjson"
	"github.com/tidwall/pretty"
	"go.uber.org/zap"
)

// roundState is what one upstream round's stream has shown so far.
type roundState struct {
	calls map[int]*liveCall // the hosted tools' calls by upstream output_index
	// at maps an upstream output_index to the client's: past a call
	// shown as more items than one (the shell's two), the client's
	// indexes run ahead of the upstream's by extra.
	at    map[int]int
	extra int
	msgs  map[int]*heldMessage // with a container: messages, whose endings wait for citations
	items map[int]string       // output_item.done items, for a terminal response without output
}

// liveCall is one hosted tool's call while the model writes it and while
// it runs.
type liveCall struct {
	t      tool
	ids    []string // the client's items' ids (tool.newIDs)
	at     int      // the client's output index of the first item
	callID string   // the model's call_id, as its output_item.added had it
	st     any      // the tool's own state (its live.go events)
}

// outputIndex is the output_index field of the call's k-th item.
func (lc *liveCall) outputIndex(k int) sse.Field {
	return sse.Field{Key: "output_index", Value: strconv.Itoa(lc.at + k)}
}

// at is the client's output index of the round's upstream item idx.
func (s *liveStream) at(rs *roundState, idx int) int {
	if v, ok := rs.at[idx]; ok {
		return v
	}
	v := s.base + idx + rs.extra
	rs.at[idx] = v
	return v
}

// heldMessage is a message whose events from its first output_text.done
// on wait for the end of the response: the buffered splice cites the
// container's files in it, which are only known once every call has run,
// and the citations must come before output_text.done (as OpenAI sends
// them). Its text deltas are not held.
type heldMessage struct {
	index   int           // spliced output index
	anns    map[int64]int // annotations the upstream sent per content index
	holding bool
	events  []gjson.Result
}

// streamRound streams one upstream round to the client and returns it
// parsed from its terminal event. body is the round's SSE.
func (s *liveStream) streamRound(ctx context.Context, body io.Reader, first bool) (*round, error) {
	rs := &roundState{calls: map[int]*liveCall{}, at: map[int]int{}, items: map[int]string{}}
	if s.l.x.ctr != nil {
		rs.msgs = map[int]*heldMessage{}
	}
	s.rs = rs
	if c, ok := body.(closeOnReturn); ok {
		defer func() {
			c.stop()
			_ = c.Close()
		}()
	}
	r := sse.NewReader(body)
	for {
		ev, err := r.Next()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if !errors.Is(err, io.EOF) {
				s.l.log.Warn("upstream stream broke off", zap.Int("round", s.l.followUps), zap.Error(err))
			}
			return nil, &failure{code: "upstream_unavailable",
				msg: "The upstream model server's stream ended before its response was complete (round " + strconv.Itoa(s.l.followUps) + ")."}
		}
		data := ev.Data
		if !gjson.ValidBytes(data) {
			return nil, badUpstreamEvent()
		}
		if bytesHasNewline(data) { // multi-line data: one line for the client
			data = pretty.Ugly(data)
		}
		root := gjson.ParseBytes(data)
		if !root.IsObject() {
			return nil, badUpstreamEvent()
		}
		typ := root.Get("type").Str
		if typ == "" {
			typ = ev.Name
		}
		switch typ {
		case "response.created", "response.in_progress":
			if first {
				s.openingEvent(typ, root.Get("response"))
			}
		case "response.completed", "response.incomplete", "response.failed":
			return s.endRound(rs, root.Get("response"))
		case "error":
			e := root
			if root.Get("error").IsObject() {
				e = root.Get("error")
			}
			msg := e.Get("message").Str
			if msg == "" {
				msg = "The upstream model server reported an error."
			}
			code := e.Get("code").Str
			if code == "" {
				code = e.Get("type").Str
			}
			return nil, &failure{code: code, msg: msg, param: e.Get("param").Str}
		default:
			s.pass(rs, typ, root)
		}
		if len(s.out.sw.Bytes()) > 0 {
			if err := s.out.flush(); err != nil {
				return nil, err
			}
		}
	}
}

func badUpstreamEvent() *failure {
	return &failure{code: "bad_upstream_response", msg: "The upstream model server sent a stream event this server could not read."}
}

// openingEvent shows the first round's response.created/in_progress with
// the request fields echoed as the client sent them (as the splice does).
func (s *liveStream) openingEvent(typ string, resp gjson.Result) {
	if !resp.IsObject() {
		return
	}
	shown := string(jsonx.EditObject(resp.Raw, s.l.echoEdits(nil, resp, resp)...))
	if !s.started {
		s.started, s.opening = true, gjson.Parse(shown)
	}
	s.out.sw.Event(typ, sse.Field{Key: "response", Value: shown})
}

// pass handles one upstream event of the round's output.
func (s *liveStream) pass(rs *roundState, typ string, root gjson.Result) {
	oi := root.Get("output_index")
	idx := int(oi.Int())
	var lc *liveCall
	if oi.Exists() {
		lc = rs.calls[idx]
	}
	switch typ {
	case "response.output_item.added":
		it := root.Get("item")
		if t := s.l.x.req.toolFor(it.Get("name").Str); it.Get("type").Str == "function_call" && t != nil && lc == nil {
			s.openCall(rs, idx, t, it.Get("call_id").Str)
			return
		}
		if rs.msgs != nil && it.Get("type").Str == "message" {
			rs.msgs[idx] = &heldMessage{index: s.at(rs, idx), anns: map[int64]int{}}
		}
	case "response.function_call_arguments.delta":
		if lc != nil {
			lc.t.argsDelta(s, lc, root.Get("delta").Str)
			return
		}
	case "response.function_call_arguments.done":
		if lc != nil {
			act := lc.t.Decode(root.Get("arguments"))
			lc.t.argsDone(s, lc, &call{index: idx, callID: lc.callID, tool: lc.t, act: act, code: act.Text(), argErr: act.Invalid(),
				ciID: lc.ids[0], moreIDs: lc.ids[1:]})
			return
		}
	case "response.output_item.done":
		rs.items[idx] = root.Get("item").Raw
		if lc == nil {
			s.finished[s.at(rs, idx)] = root.Get("item").Raw
		}
	}
	if lc != nil {
		return // the rest of our call's events are not the client's: its run is
	}
	if hm := rs.msgs[idx]; hm != nil && oi.Exists() {
		switch {
		case typ == "response.output_text.annotation.added" && !hm.holding:
			hm.anns[root.Get("content_index").Int()]++
		case typ == "response.output_text.done" && !hm.holding:
			hm.holding = true
			s.held = append(s.held, hm)
		}
		if hm.holding {
			hm.events = append(hm.events, root)
			return
		}
	}
	if oi.Exists() {
		s.out.sw.Passthrough(typ, root, s.at(rs, idx))
	} else {
		s.out.sw.Passthrough(typ, root, -1)
	}
}

// openCall shows a hosted tool's call starting, as its tool does.
func (s *liveStream) openCall(rs *roundState, idx int, t tool, callID string) *liveCall {
	lc := &liveCall{t: t, ids: t.newIDs(), at: s.at(rs, idx), callID: callID}
	rs.calls[idx] = lc
	rs.extra += len(lc.ids) - 1
	t.opened(s, lc)
	return lc
}

// endRound parses the round from its terminal response and ties the calls
// the client was shown to the round's calls.
func (s *liveStream) endRound(rs *roundState, resp gjson.Result) (*round, error) {
	if !resp.IsObject() {
		return nil, badUpstreamEvent()
	}
	doc := resp.Raw
	// Some servers leave the output out of the terminal event; the items
	// were all in output_item.done.
	if out := resp.Get("output"); (!out.IsArray() || out.Raw == "[]") && len(rs.items) > 0 {
		idx := make([]int, 0, len(rs.items))
		for k := range rs.items {
			idx = append(idx, k)
		}
		sort.Ints(idx)
		items := make([]string, 0, len(idx))
		for _, k := range idx {
			items = append(items, rs.items[k])
		}
		doc = string(jsonx.EditObject(doc, jsonx.Set("output", string(jsonx.AppendArray(nil, items)))))
	}
	rd, err := parseRound([]byte(doc), &s.l.x.req)
	if err != nil {
		return nil, badUpstreamEvent()
	}
	for _, c := range rd.calls {
		lc := rs.calls[c.index]
		if lc == nil || lc.t != c.tool {
			lc = s.openCall(rs, c.index, c.tool, c.callID)
		}
		c.ciID, c.moreIDs = lc.ids[0], lc.ids[1:]
		lc.t.argsDone(s, lc, c)
	}
	if err := s.out.flush(); err != nil {
		return nil, err
	}
	return rd, nil
}

// releaseHeld sends the held message endings, with the citations of the
// spliced response: annotation.added for each new one before its part's
// output_text.done, and the parts and items as spliced.
func (s *liveStream) releaseHeld(final []byte) {
	out := gjson.GetBytes(final, "output")
	sort.SliceStable(s.held, func(a, b int) bool { return s.held[a].index < s.held[b].index })
	for _, hm := range s.held {
		item := out.Get(strconv.Itoa(hm.index))
		for _, ev := range hm.events {
			typ := ev.Get("type").Str
			ci := ev.Get("content_index")
			part := item.Get("content." + ci.Raw)
			switch {
			case !item.Exists():
			case typ == "response.output_text.done" && part.Exists():
				anns := part.Get("annotations").Array()
				for k := hm.anns[ci.Int()]; k < len(anns); k++ {
					s.out.sw.Event("response.output_text.annotation.added",
						sse.Field{Key: "annotation", Value: anns[k].Raw}, sse.Field{Key: "annotation_index", Value: strconv.Itoa(k)}, sse.Field{Key: "content_index", Value: ci.Raw},
						sse.Field{Key: "item_id", Value: jsonx.Quote(item.Get("id").Str)}, sse.Field{Key: "output_index", Value: strconv.Itoa(hm.index)})
				}
			case typ == "response.content_part.done" && part.Exists():
				ev = gjson.Parse(string(jsonx.EditObject(ev.Raw, jsonx.Set("part", part.Raw))))
			case typ == "response.output_item.done":
				ev = gjson.Parse(string(jsonx.EditObject(ev.Raw, jsonx.Set("item", item.Raw))))
			}
			s.out.sw.Passthrough(typ, ev, hm.index)
		}
	}
	s.held = nil
}
