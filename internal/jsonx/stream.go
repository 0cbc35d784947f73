package jsonx

import (
	"unicode/utf16"
	"unicode/utf8"
)

// CodeDecoder extracts the decoded characters of the "code" string of a
// function call's arguments, {"code":"..."}, while the arguments arrive in
// pieces (response.function_call_arguments.delta). The client sees OpenAI's
// code deltas as the model writes them, so the decoder cannot wait for the
// whole arguments string: every piece is decoded as far as it goes, and
// whatever is cut off (an escape, a \u surrogate pair, a UTF-8 sequence)
// waits for the next piece. The zero value is ready to use.
//
// It follows encoding/json's decoding (invalid surrogates and invalid UTF-8
// become U+FFFD) and, like gjson (which the buffered path uses), takes the
// first "code" member. Values of other members, before or after, are
// skipped whatever their type. It never fails: on input that is not a JSON
// object it stops producing; the finished call's arguments are the
// authority, and the caller sends what is missing from them.
type CodeDecoder struct {
	st    decState
	depth int  // nesting depth while skipping a container value
	inStr bool // skipping: inside a string
	// string decoding (keys and the code value)
	esc     bool // after a backslash
	hexN    int  // hex digits of a \u escape read so far (0 = none pending)
	hexV    rune
	pending rune // a surrogate waiting for its pair, or 0
	key     []byte
	keyLong bool
	found   bool   // the code member was reached
	closed  bool   // its closing quote was read
	out     []byte // decoded bytes not yet returned
	// strs is set for a StringsDecoder: the member is an array of
	// strings, whose elements are reported as pieces.
	strs *StringsDecoder
}

type decState uint8

const (
	dStart      decState = iota // before '{'
	dKeyOrEnd                   // after '{' or ','
	dKey                        // in a member name
	dColon                      // after a name
	dValue                      // before a value
	dSkipScalar                 // in a number or literal being skipped
	dSkip                       // in a string or container being skipped
	dCode                       // in the code string
	dAfterValue                 // after a value
	dArray                      // in the array of strings, before an element or ']'
	dArrayAfter                 // in the array of strings, after an element
	dStop                       // the code string ended, or the input is not what we read
	maxKeyLen   = 16            // "code" is 4 bytes; longer names are never it
)

// Feed consumes one piece of the arguments and returns the code characters
// it completes.
func (d *CodeDecoder) Feed(piece string) string {
	for i := 0; i < len(piece) && d.st != dStop; i++ {
		d.step(piece[i])
	}
	return d.take()
}

// Done reports whether the code string has been read to its end.
func (d *CodeDecoder) Done() bool { return d.closed }

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func (d *CodeDecoder) step(c byte) {
	switch d.st {
	case dStart:
		switch {
		case c == '{':
			d.st = dKeyOrEnd
		case !isSpace(c):
			d.st = dStop
		}
	case dKeyOrEnd:
		switch {
		case c == '"':
			d.st, d.key, d.keyLong = dKey, d.key[:0], false
		case c == '}':
			d.st = dStop
		case !isSpace(c):
			d.st = dStop
		}
	case dKey:
		if d.str(c) {
			d.st = dColon
		}
	case dColon:
		switch {
		case c == ':':
			d.st = dValue
		case !isSpace(c):
			d.st = dStop
		}
	case dValue:
		switch {
		case isSpace(c):
		case c == '"' && !d.found && !d.keyLong && d.strs == nil && string(d.key) == "code":
			d.found, d.st = true, dCode
		case c == '[' && !d.found && !d.keyLong && d.strs != nil && string(d.key) == d.strs.key:
			d.found, d.st = true, dArray
		case c == '"':
			d.st, d.depth, d.inStr = dSkip, 0, true
		case c == '{' || c == '[':
			d.st, d.depth, d.inStr = dSkip, 1, false
		case c == '}' || c == ']' || c == ',':
			d.st = dStop
		default:
			d.st = dSkipScalar
		}
	case dSkipScalar:
		switch {
		case c == ',':
			d.st = dKeyOrEnd
		case c == '}':
			d.st = dStop
		case isSpace(c):
			d.st = dAfterValue
		}
	case dSkip:
		d.skip(c)
	case dCode:
		if d.str(c) {
			if d.strs != nil {
				d.strs.end()
				d.st = dArrayAfter
				return
			}
			d.st, d.closed = dStop, true
		}
	case dArray:
		switch {
		case c == '"':
			d.strs.start()
			d.st = dCode
		case c == ']':
			d.st, d.closed = dStop, true
		case !isSpace(c):
			d.st = dStop
		}
	case dArrayAfter:
		switch {
		case c == ',':
			d.st = dArray
		case c == ']':
			d.st, d.closed = dStop, true
		case !isSpace(c):
			d.st = dStop
		}
	case dAfterValue:
		switch {
		case c == ',':
			d.st = dKeyOrEnd
		case !isSpace(c): // '}' or garbage: either way nothing follows
			d.st = dStop
		}
	}
}

// skip consumes one byte of a string or container value we do not want.
func (d *CodeDecoder) skip(c byte) {
	if d.inStr {
		switch {
		case d.esc:
			d.esc = false
		case c == '\\':
			d.esc = true
		case c == '"':
			d.inStr = false
			if d.depth == 0 {
				d.st = dAfterValue
			}
		}
		return
	}
	switch c {
	case '"':
		d.inStr = true
	case '{', '[':
		d.depth++
	case '}', ']':
		d.depth--
		if d.depth == 0 {
			d.st = dAfterValue
		}
	}
}

// str consumes one byte of a string (a key, or the code) and reports
// whether it was the closing quote. Decoded bytes go to the key or to out.
func (d *CodeDecoder) str(c byte) bool {
	if d.hexN > 0 {
		v, ok := unhex(c)
		if !ok { // invalid JSON; keep what we have
			d.st = dStop
			return false
		}
		d.hexV = d.hexV<<4 | v
		d.hexN++
		if d.hexN == 5 {
			d.hexN = 0
			d.escapedRune(d.hexV)
		}
		return false
	}
	if d.esc {
		d.esc = false
		if c == 'u' {
			d.hexN, d.hexV = 1, 0
			return false
		}
		d.flushPending()
		switch c {
		case 'n':
			d.emitByte('\n')
		case 't':
			d.emitByte('\t')
		case 'r':
			d.emitByte('\r')
		case 'b':
			d.emitByte('\b')
		case 'f':
			d.emitByte('\f')
		case '"', '\\', '/':
			d.emitByte(c)
		default:
			d.st = dStop
		}
		return false
	}
	switch c {
	case '\\':
		d.esc = true
		return false
	case '"':
		d.flushPending()
		return true
	}
	d.flushPending()
	d.emitByte(c)
	return false
}

// escapedRune handles a decoded \uXXXX: a surrogate waits for its pair, as
// encoding/json pairs them; an unpaired one is U+FFFD.
func (d *CodeDecoder) escapedRune(r rune) {
	if d.pending != 0 {
		if pair := utf16.DecodeRune(d.pending, r); pair != utf8.RuneError {
			d.pending = 0
			d.emitRune(pair)
			return
		}
		d.flushPending()
	}
	if utf16.IsSurrogate(r) {
		d.pending = r
		return
	}
	d.emitRune(r)
}

// flushPending ends a surrogate that got no pair.
func (d *CodeDecoder) flushPending() {
	if d.pending != 0 {
		d.pending = 0
		d.emitRune(utf8.RuneError)
	}
}

func (d *CodeDecoder) emitRune(r rune) {
	if d.st == dKey {
		for _, b := range utf8.AppendRune(nil, r) {
			d.emitByte(b)
		}
		return
	}
	d.out = utf8.AppendRune(d.out, r)
}

func (d *CodeDecoder) emitByte(b byte) {
	if d.st == dKey {
		if len(d.key) >= maxKeyLen {
			d.keyLong = true
			return
		}
		d.key = append(d.key, b)
		return
	}
	d.out = append(d.out, b)
}

// take returns the decoded code so far as valid UTF-8: invalid bytes become
// U+FFFD (as encoding/json decodes them) and a sequence cut at the end of
// the piece waits for the rest, unless the string has ended.
func (d *CodeDecoder) take() string { return d.takeFinal(false) }

// takeFinal is take; final says the string has ended (a cut character is
// then U+FFFD).
func (d *CodeDecoder) takeFinal(final bool) string {
	var b []byte // built only when a byte is replaced
	i, start := 0, 0
	for i < len(d.out) {
		if d.out[i] < utf8.RuneSelf {
			i++
			continue
		}
		if !utf8.FullRune(d.out[i:]) && d.st != dStop && !final {
			break // the rest of the character is in the next piece
		}
		r, size := utf8.DecodeRune(d.out[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, d.out[start:i]...)
			b = append(b, "\ufffd"...)
			i++
			start = i
			continue
		}
		i += size
	}
	var s string
	if b == nil {
		s = string(d.out[:i])
	} else {
		s = string(append(b, d.out[start:i]...))
	}
	n := copy(d.out, d.out[i:])
	d.out = d.out[:n]
	return s
}

func unhex(c byte) (rune, bool) {
	switch {
	case '0' <= c && c <= '9':
		return rune(c - '0'), true
	case 'a' <= c && c <= 'f':
		return rune(c - 'a' + 10), true
	case 'A' <= c && c <= 'F':
		return rune(c - 'A' + 10), true
	}
	return 0, false
}

// StringsDecoder is CodeDecoder for a member that is an array of strings
// (the hosted shell's {"commands": ["ls", …]}): Feed reports each element
// as it starts, the decoded characters of each piece, and its end. The
// first member of the name is taken; everything else is skipped. Like
// CodeDecoder it never fails: the finished arguments are the authority.
type StringsDecoder struct {
	d      CodeDecoder
	key    string
	n      int // elements started
	pieces []StringPiece
}

// StringPiece is what one Feed learned of one element: Start (it began),
// Text (decoded characters, never a split UTF-8 sequence), End (its
// closing quote was read; Text then holds its last characters).
type StringPiece struct {
	Index      int
	Start, End bool
	Text       string
}

// NewStringsDecoder decodes the array of strings named key (at most 16
// bytes).
func NewStringsDecoder(key string) *StringsDecoder {
	s := &StringsDecoder{key: key}
	s.d.strs = s
	return s
}

// Feed consumes one piece of the arguments.
func (s *StringsDecoder) Feed(piece string) []StringPiece {
	s.pieces = s.pieces[:0]
	for i := 0; i < len(piece) && s.d.st != dStop; i++ {
		s.d.step(piece[i])
	}
	if s.d.st == dCode && s.n > 0 {
		if t := s.d.take(); t != "" {
			s.add(StringPiece{Index: s.n - 1, Text: t})
		}
	}
	return s.pieces
}

// Done reports whether the array has been read to its end.
func (s *StringsDecoder) Done() bool { return s.d.closed }

func (s *StringsDecoder) start() {
	s.add(StringPiece{Index: s.n, Start: true})
	s.n++
}

func (s *StringsDecoder) end() {
	s.add(StringPiece{Index: s.n - 1, End: true, Text: s.d.takeFinal(true)})
}

// add appends p, merged into the last piece when that is the same
// element's and did not end.
func (s *StringsDecoder) add(p StringPiece) {
	if k := len(s.pieces) - 1; k >= 0 && s.pieces[k].Index == p.Index && !s.pieces[k].End && !p.Start {
		s.pieces[k].Text += p.Text
		s.pieces[k].End = p.End
		return
	}
	s.pieces = append(s.pieces, p)
}
