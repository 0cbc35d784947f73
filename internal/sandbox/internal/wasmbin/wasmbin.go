package wasmbin

import (
	"bytes"
	"errors"
	"fmt"
)

// Section ids (WebAssembly core spec 5.5.2).
const (
	secImport    = 2
	secGlobal    = 6
	secExport    = 7
	secData      = 11
	secDataCount = 12
)

var magic = []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}

// Global is one global of the module's index space.
type Global struct {
	Index    uint32
	Mutable  bool
	Imported bool
	// Export is the global's export name, "" when it is not exported.
	Export string
}

type section struct {
	id   byte
	body []byte
}

func sections(bin []byte) ([]section, error) {
	if !bytes.HasPrefix(bin, magic) {
		return nil, errors.New("wasmbin: not a WebAssembly 1.0 binary")
	}
	r := &reader{b: bin[len(magic):]}
	var out []section
	for !r.done() {
		id, err := r.byte()
		if err != nil {
			return nil, err
		}
		n, err := r.u32()
		if err != nil {
			return nil, err
		}
		body, err := r.bytes(int(n))
		if err != nil {
			return nil, err
		}
		out = append(out, section{id, body})
	}
	return out, nil
}

// Globals lists the module's globals, imported ones first, with their
// export names.
func Globals(bin []byte) ([]Global, error) {
	secs, err := sections(bin)
	if err != nil {
		return nil, err
	}
	var gs []Global
	exports := map[uint32]string{}
	for _, s := range secs {
		r := &reader{b: s.body}
		switch s.id {
		case secImport:
			n, err := r.u32()
			if err != nil {
				return nil, err
			}
			for range n {
				if _, err := r.name(); err != nil {
					return nil, err
				}
				if _, err := r.name(); err != nil {
					return nil, err
				}
				kind, err := r.byte()
				if err != nil {
					return nil, err
				}
				switch kind {
				case 0: // func: type index
					_, err = r.u32()
				case 1: // table: reftype, limits
					if _, err = r.byte(); err == nil {
						err = r.limits()
					}
				case 2: // memory: limits
					err = r.limits()
				case 3: // global: valtype, mut
					var mut byte
					if _, err = r.byte(); err == nil {
						mut, err = r.byte()
						gs = append(gs, Global{Index: uint32(len(gs)), Mutable: mut == 1, Imported: true})
					}
				case 4: // tag: attribute, type index
					if _, err = r.byte(); err == nil {
						_, err = r.u32()
					}
				default:
					err = fmt.Errorf("wasmbin: unknown import kind %d", kind)
				}
				if err != nil {
					return nil, err
				}
			}
		case secGlobal:
			n, err := r.u32()
			if err != nil {
				return nil, err
			}
			for range n {
				if _, err := r.byte(); err != nil { // valtype
					return nil, err
				}
				mut, err := r.byte()
				if err != nil {
					return nil, err
				}
				if err := r.constExpr(); err != nil {
					return nil, err
				}
				gs = append(gs, Global{Index: uint32(len(gs)), Mutable: mut == 1})
			}
		case secExport:
			n, err := r.u32()
			if err != nil {
				return nil, err
			}
			for range n {
				name, err := r.name()
				if err != nil {
					return nil, err
				}
				kind, err := r.byte()
				if err != nil {
					return nil, err
				}
				idx, err := r.u32()
				if err != nil {
					return nil, err
				}
				if kind == 3 {
					exports[idx] = name
				}
			}
		}
	}
	for i := range gs {
		gs[i].Export = exports[gs[i].Index]
	}
	return gs, nil
}

// StripData returns bin with its data segments removed (the data section,
// and a data count section if there is one, become empty vectors). A
// module whose code uses memory.init or data.drop on those segments then
// fails validation when compiled, loudly.
func StripData(bin []byte) ([]byte, error) {
	secs, err := sections(bin)
	if err != nil {
		return nil, err
	}
	out := bytes.NewBuffer(make([]byte, 0, len(bin)))
	out.Write(magic)
	for _, s := range secs {
		body := s.body
		if s.id == secData || s.id == secDataCount {
			body = []byte{0} // vec(0) / count 0
		}
		out.WriteByte(s.id)
		out.Write(uleb(uint32(len(body))))
		out.Write(body)
	}
	return out.Bytes(), nil
}

func uleb(v uint32) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

type reader struct {
	b []byte
	i int
}

var errShort = errors.New("wasmbin: truncated binary")

func (r *reader) done() bool { return r.i >= len(r.b) }

func (r *reader) byte() (byte, error) {
	if r.i >= len(r.b) {
		return 0, errShort
	}
	c := r.b[r.i]
	r.i++
	return c, nil
}

func (r *reader) bytes(n int) ([]byte, error) {
	if n < 0 || r.i+n > len(r.b) {
		return nil, errShort
	}
	s := r.b[r.i : r.i+n]
	r.i += n
	return s, nil
}

func (r *reader) u32() (uint32, error) {
	var v uint32
	for shift := 0; shift < 35; shift += 7 {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		v |= uint32(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, nil
		}
	}
	return 0, errors.New("wasmbin: bad LEB128")
}

// sleb skips a signed LEB128 of up to 64 bits.
func (r *reader) sleb() error {
	for range 10 {
		c, err := r.byte()
		if err != nil {
			return err
		}
		if c&0x80 == 0 {
			return nil
		}
	}
	return errors.New("wasmbin: bad LEB128")
}

func (r *reader) name() (string, error) {
	n, err := r.u32()
	if err != nil {
		return "", err
	}
	b, err := r.bytes(int(n))
	return string(b), err
}

func (r *reader) limits() error {
	flags, err := r.byte()
	if err != nil {
		return err
	}
	if _, err := r.u32(); err != nil {
		return err
	}
	if flags&1 != 0 {
		_, err = r.u32()
	}
	return err
}

// constExpr skips a constant expression up to its end opcode.
func (r *reader) constExpr() error {
	for {
		op, err := r.byte()
		if err != nil {
			return err
		}
		switch op {
		case 0x0b: // end
			return nil
		case 0x41, 0x42: // i32.const, i64.const
			err = r.sleb()
		case 0x43:
			_, err = r.bytes(4)
		case 0x44:
			_, err = r.bytes(8)
		case 0x23, 0xd2: // global.get, ref.func
			_, err = r.u32()
		case 0xd0: // ref.null
			_, err = r.byte()
		case 0x6a, 0x6b, 0x6c, 0x7c, 0x7d, 0x7e: // extended-const arithmetic
		default:
			return fmt.Errorf("wasmbin: opcode 0x%02x in a constant expression", op)
		}
		if err != nil {
			return err
		}
	}
}
