package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
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
