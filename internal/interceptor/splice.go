package interceptor

import (
	"strconv"
	"strings"

	"github.com/codeinterp/codeinterp/internal/containerapi"
	"github.com/codeinterp/codeinterp/internal/jsonx"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// splice builds the client's response: the last round's response object
// with every round's output items, each hosted tool's call shown as its
// tool's items (tool.items), usage summed and the request echo fields as the client sent them.
// outputs fills every call's outputs whatever the request's include said
// (for the response store).
func (l *loop) splice(rounds []*round, outputs bool) []byte {
	first, last := rounds[0], rounds[len(rounds)-1]
	var items []string
	var shownImages []containerapi.File // images not yet cited by a message
	for _, rd := range rounds {
		for idx, it := range rd.items {
			if c := rd.callAt[idx]; c != nil {
				items = append(items, c.tool.items(l, c, outputs)...)
				shownImages = append(shownImages, c.images...)
				continue
			}
			switch it.Get("type").Str {
			case "function_call_output":
				continue // never the client's to see; upstreams do not send them anyway
			case "message":
				if l.files != nil {
					items = append(items, l.annotate(it, shownImages))
					shownImages = nil
					continue
				}
			}
			items = append(items, it.Raw)
		}
	}
	edits := []jsonx.Edit{jsonx.Set("output", string(jsonx.AppendArray(nil, items)))}
	if len(rounds) > 1 {
		if u := sumUsage(rounds); u != "" {
			edits = append(edits, jsonx.Set("usage", u))
		}
		if ca := first.root.Get("created_at"); ca.Exists() && last.root.Get("created_at").Exists() {
			edits = append(edits, jsonx.Set("created_at", ca.Raw))
		}
	}
	edits = l.echoEdits(edits, first.root, last.root)
	return jsonx.EditObject(last.doc, edits...)
}

// echoEdits restores the request fields a response echoes (tools,
// tool_choice, previous_response_id) to what the client sent, in the
// response object last of a loop whose first upstream response is first.
// The spliced response and the live stream's opening events share it.
func (l *loop) echoEdits(edits []jsonx.Edit, first, last gjson.Result) []jsonx.Edit {
	req := &l.x.req
	if l.x.respID != "" {
		// One response, one id of ours, for every round and both paths.
		edits = append(edits, jsonx.Set("id", jsonx.Quote(l.x.respID)))
	}
	if req.background {
		edits = append(edits, jsonx.Set("background", "true"))
	}
	if c := l.x.hist.conv; c != "" {
		edits = append(edits, jsonx.Set("conversation", `{"id":`+jsonx.Quote(c)+`}`))
	}
	if last.Get("tools").Exists() && req.clientTools != "" {
		edits = append(edits, jsonx.Set("tools", req.clientTools))
	}
	if tc := last.Get("tool_choice"); tc.Exists() {
		switch {
		case req.clientToolChoice != "":
			edits = append(edits, jsonx.Set("tool_choice", req.clientToolChoice))
		case first.Get("tool_choice").Exists():
			// The client left it to the default: show what the first turn used.
			edits = append(edits, jsonx.Set("tool_choice", first.Get("tool_choice").Raw))
		}
	}
	if last.Get("previous_response_id").Exists() {
		prev := req.clientPrevID
		if prev == "" {
			prev = "null"
		}
		edits = append(edits, jsonx.Set("previous_response_id", prev))
	}
	return edits
}

// annotate adds OpenAI's container_file_citation annotations to a message's
// output_text parts: first a start_index = end_index = 0 citation for each
// image the calls before it displayed (on its first text part), then one
// for each sandbox:/mnt/data/<name> link to a file of the container.
func (l *loop) annotate(msg gjson.Result, images []containerapi.File) string {
	content := msg.Get("content")
	if !content.IsArray() {
		return msg.Raw
	}
	var parts []string
	changed, first := false, true
	content.ForEach(func(_, p gjson.Result) bool {
		if p.Get("type").Str != "output_text" {
			parts = append(parts, p.Raw)
			return true
		}
		var ann []string
		p.Get("annotations").ForEach(func(_, a gjson.Result) bool {
			ann = append(ann, a.Raw)
			return true
		})
		n := len(ann)
		if first {
			for _, im := range images {
				ann = append(ann, citation(l.containerID, im, 0, 0))
			}
			first = false
		}
		ann = append(ann, citations(l.containerID, p.Get("text").Str, l.files)...)
		if len(ann) == n {
			parts = append(parts, p.Raw)
			return true
		}
		changed = true
		parts = append(parts, string(jsonx.EditObject(p.Raw, jsonx.Set("annotations", string(jsonx.AppendArray(nil, ann))))))
		return true
	})
	if !changed {
		return msg.Raw
	}
	return string(jsonx.EditObject(msg.Raw, jsonx.Set("content", string(jsonx.AppendArray(nil, parts)))))
}

// sumUsage adds up every integer in the rounds' usage objects (tokens and
// their details), keeping the last round's layout and any other fields.
func sumUsage(rounds []*round) string {
	var order []string
	sums := map[string]int64{}
	var walk func(prefix string, v gjson.Result)
	walk = func(prefix string, v gjson.Result) {
		v.ForEach(func(k, val gjson.Result) bool {
			p := prefix + escapePath(k.Str)
			switch {
			case val.IsObject():
				walk(p+".", val)
			case val.Type == gjson.Number && !strings.ContainsAny(val.Raw, ".eE"):
				if _, ok := sums[p]; !ok {
					order = append(order, p)
				}
				sums[p] += val.Int()
			}
			return true
		})
	}
	base := ""
	for _, rd := range rounds {
		u := rd.root.Get("usage")
		if !u.IsObject() {
			continue
		}
		walk("", u)
		base = u.Raw
	}
	if len(order) == 0 {
		return ""
	}
	if lu := rounds[len(rounds)-1].root.Get("usage"); lu.IsObject() {
		base = lu.Raw
	}
	for _, p := range order {
		if s, err := sjson.SetRaw(base, p, itoa(sums[p])); err == nil {
			base = s
		}
	}
	return base
}

// escapePath escapes a key for a gjson/sjson path.
func escapePath(k string) string {
	if !strings.ContainsAny(k, `.*?|#@\!:`) {
		return k
	}
	var b strings.Builder
	for _, r := range k {
		if strings.ContainsRune(`.*?|#@\!:`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
