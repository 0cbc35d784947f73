package egress

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"
)

// maxRedactedValue bounds the secrets whose echo the proxy looks for in
// responses: the scan keeps len-1 bytes back per connection, and a value
// larger than this would not fit a request header of any common origin
// anyway (they refuse headers over 8–64 KiB).
const maxRedactedValue = 64 << 10

// echoPattern is one spelling of a secret's value an origin may echo
// back (verbatim, or escaped by a JSON encoder) and what replaces it.
type echoPattern struct{ find, repl []byte }

// echoPatterns lists, per secret, the spellings to take out of the
// responses of its domain: the value as sent, and as Go's and Python's
// JSON encoders escape it (httpbin-style echo services are JSON).
func echoPatterns(secrets []Secret) []echoPattern {
	var out []echoPattern
	seen := map[string]bool{}
	for _, s := range secrets {
		if len(s.Value) > maxRedactedValue {
			continue
		}
		for _, f := range []string{s.Value, jsonGo(s.Value), jsonASCII(s.Value)} {
			if f != "" && !seen[f] {
				seen[f] = true
				out = append(out, echoPattern{find: []byte(f), repl: []byte(placeholder(s.Name))})
			}
		}
	}
	return out
}

func jsonGo(v string) string {
	b, _ := json.Marshal(v)
	return string(b[1 : len(b)-1])
}

// jsonASCII is Python's json.dumps with ensure_ascii (its default).
func jsonASCII(v string) string {
	var b strings.Builder
	for _, r := range v {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r < 0x20 || r >= 0x7f:
			if r > 0xffff {
				r1, r2 := utf16Pair(r)
				fmt.Fprintf(&b, "\\u%04x\\u%04x", r1, r2)
			} else if r != utf8.RuneError {
				fmt.Fprintf(&b, "\\u%04x", r)
			}
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func utf16Pair(r rune) (rune, rune) {
	r -= 0x10000
	return 0xd800 + (r>>10)&0x3ff, 0xdc00 + r&0x3ff
}

func redactString(v string, pats []echoPattern) string {
	for _, p := range pats {
		v = strings.ReplaceAll(v, string(p.find), string(p.repl))
	}
	return v
}

// redactResponse takes a domain's secrets back out of its response before
// the sandbox reads it: an origin that reflects request headers
// (httpbin.org/headers, OpenAI's own example) would otherwise hand the
// code the value the placeholder stood for. Headers are rewritten; the
// body is decoded if gzip or deflate (the request went out without
// Accept-Encoding, so most origins send it plain), scanned as it streams
// and re-framed as chunked. Another Content-Encoding cannot be scanned and
// is refused. Best effort: an origin that transforms the value otherwise
// (base64, a part of it) still can; give secrets only to origins that do
// not echo them.
func redactResponse(resp *http.Response, pats []echoPattern) *refusal {
	if len(pats) == 0 {
		return nil
	}
	for _, vs := range resp.Header {
		for i, v := range vs {
			vs[i] = redactString(v, pats)
		}
	}
	if resp.Body == nil || resp.Body == http.NoBody || resp.ContentLength == 0 {
		return nil
	}
	body := resp.Body
	switch enc := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			return &refusal{reasonUpstreamFailed, 502, "the origin's gzip body is corrupt"}
		}
		body = readCloser{zr, resp.Body}
	case "deflate":
		zr, err := zlib.NewReader(body)
		if err != nil {
			return &refusal{reasonUpstreamFailed, 502, "the origin's deflate body is corrupt"}
		}
		body = readCloser{zr, resp.Body}
	default:
		return &refusal{reasonEncodedResponse, 502, fmt.Sprintf("the origin sent a %q body, which the proxy cannot check for this domain's secrets; refused", enc)}
	}
	resp.Header.Del("Content-Encoding")
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
	resp.TransferEncoding = []string{"chunked"}
	resp.Body = newRedactor(body, pats)
	return nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// redactor replaces every pattern in a stream. It holds back the last
// (longest pattern - 1) bytes of what it has read, so a pattern split
// across reads is still found whole.
type redactor struct {
	src  io.ReadCloser
	pats []echoPattern
	keep int
	buf  []byte // read, not yet scanned past
	out  []byte // scanned, ready
	tmp  []byte
	err  error
}

func newRedactor(src io.ReadCloser, pats []echoPattern) *redactor {
	longest := 0
	for _, p := range pats {
		longest = max(longest, len(p.find))
	}
	return &redactor{src: src, pats: pats, keep: longest - 1, tmp: make([]byte, 32<<10)}
}

func (r *redactor) Read(p []byte) (int, error) {
	for len(r.out) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		n, err := r.src.Read(r.tmp)
		r.buf = append(r.buf, r.tmp[:n]...)
		if err != nil {
			r.err = err
		}
		r.scan(err != nil)
	}
	n := copy(p, r.out)
	r.out = r.out[n:]
	return n, nil
}

func (r *redactor) scan(final bool) {
	var out []byte
	i := 0
	// A match may only start where every pattern starting there is wholly
	// read: before the held-back tail, unless the stream has ended.
	limit := len(r.buf)
	if !final {
		limit = max(0, len(r.buf)-r.keep)
	}
	for {
		best, bp := -1, 0
		for k, p := range r.pats {
			j := bytes.Index(r.buf[i:], p.find)
			if j >= 0 && (best < 0 || j < best || j == best && len(p.find) > len(r.pats[bp].find)) {
				best, bp = j, k
			}
		}
		if best < 0 || i+best >= limit {
			break
		}
		out = append(out, r.buf[i:i+best]...)
		out = append(out, r.pats[bp].repl...)
		i += best + len(r.pats[bp].find)
	}
	safe := max(i, limit)
	out = append(out, r.buf[i:safe]...)
	r.out = out
	r.buf = append(r.buf[:0:0], r.buf[safe:]...)
}

func (r *redactor) Close() error { return r.src.Close() }
