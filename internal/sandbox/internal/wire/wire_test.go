package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"testing"
)

// TestWriteFileData: a frame whose file data is streamed reads back as
// the same message, and is the bytes json.Marshal would have framed.
func TestWriteFileData(t *testing.T) {
	data := make([]byte, streamData+12345)
	for i := range data {
		data[i] = byte(i * 31)
	}
	m := &Msg{Kind: KindFileResult, FileResult: &FileResult{ID: 3, Data: data, Size: int64(len(data))}}
	var streamed bytes.Buffer
	if err := writeFileData(&streamed, m); err != nil {
		t.Fatal(err)
	}
	got, err := Read(bytes.NewReader(streamed.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Errorf("read back a different message: id %d, %d bytes", got.FileResult.ID, len(got.FileResult.Data))
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(b)))
	if want := append(hdr[:], b...); !bytes.Equal(streamed.Bytes(), want) {
		t.Error("the streamed frame differs from json.Marshal's")
	}
}

// TestReadFrameBound: a frame above the caller's bound is refused from its
// header, before its body is read, and one at the bound reads.
func TestReadFrameBound(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteFrame(&buf, map[string]string{"kind": "ready"}, 64); err != nil {
		t.Fatal(err)
	}
	n := buf.Len() - 4
	frame := buf.Bytes()
	var v map[string]string
	r := bytes.NewReader(frame)
	if err := ReadFrame(r, &v, n-1); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("ReadFrame with bound %d of a %d-byte frame: %v; want ErrFrameTooLarge", n-1, n, err)
	}
	if r.Len() != n {
		t.Errorf("%d bytes left unread after the refusal; want the body's %d", r.Len(), n)
	}
	if err := ReadFrame(bytes.NewReader(frame), &v, n); err != nil || v["kind"] != "ready" {
		t.Fatalf("ReadFrame at the bound: %v, %v", v, err)
	}
	if err := WriteFrame(&buf, map[string]string{"kind": "ready"}, n-1); err == nil {
		t.Error("WriteFrame sent a frame above its bound")
	}
}

// TestReceive: a Receiver delivers the frames in order, then closes its
// channel with the error that stopped it.
func TestReceive(t *testing.T) {
	var buf bytes.Buffer
	for _, k := range []string{KindReady, KindResult} {
		if err := Write(&buf, &Msg{Kind: k}); err != nil {
			t.Fatal(err)
		}
	}
	rc := Receive[Msg](&buf, MaxFrame, 0)
	var kinds []string
	for m := range rc.C() {
		kinds = append(kinds, m.Kind)
	}
	if !reflect.DeepEqual(kinds, []string{KindReady, KindResult}) || !errors.Is(rc.Err(), io.EOF) {
		t.Errorf("received %v, then %v; want [ready result], then EOF", kinds, rc.Err())
	}
}

// countingWriter records each Write's bytes.
type countingWriter struct{ writes [][]byte }

func (c *countingWriter) Write(p []byte) (int, error) {
	c.writes = append(c.writes, bytes.Clone(p))
	return len(p), nil
}

// TestWriteFrameWrites: a small frame goes out in one write (a peer blocked
// in read wakes once), a large one as header and body; both read back.
func TestWriteFrameWrites(t *testing.T) {
	for _, tc := range []struct {
		name   string
		code   int
		writes int
	}{
		{"small", 100, 1},
		{"at the bound", smallFrame - 200, 1},
		{"large", smallFrame + 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &Msg{Kind: KindRun, Run: &Run{ID: 7, Code: bytes.Repeat([]byte("x"), tc.code*3/4)}}
			var c countingWriter
			if err := Write(&c, m); err != nil {
				t.Fatal(err)
			}
			if len(c.writes) != tc.writes {
				t.Errorf("%d writes, want %d", len(c.writes), tc.writes)
			}
			got, err := Read(bytes.NewReader(bytes.Join(c.writes, nil)))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, m) {
				t.Error("read back a different message")
			}
		})
	}
}
