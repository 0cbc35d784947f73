package api_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/store"
)

// TestUploadNames: names that show one thing and are another (a bidi
// override makes invoice\u202etxt.exe read as invoiceexe.txt), that break
// the line they are written on (U+0085, U+2028, U+2029) or that no
// container can hold are refused at upload with OpenAI's 400, on both the
// Containers and the Files API; the longest name each accepts works.
func TestUploadNames(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client("sk-a")
	cn, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: "names"})
	if err != nil {
		t.Fatal(err)
	}
	// A Files API file becomes /mnt/data/<file_id>-<name> when attached:
	// its name leaves room for the 53-byte id and the dash.
	maxFilesAPI := store.MaxNameBytes - len(idgen.New("file-")) - 1
	hostile := []string{
		"invoice\u202etxt.exe", // right-to-left override (Cf)
		"a\u0085b.txt",         // next line (Cc, not ASCII)
		"a\u2028b.txt",         // line separator (Zl)
		"a\u2029b.txt",         // paragraph separator (Zp)
		"zero\u200bwidth.txt",  // zero-width space (Cf)
		"bom\ufeff.txt",        // zero-width no-break space (Cf)
		"tab\tname.txt",        // an ASCII control
		"del\x7f.txt",
		"..",
	}
	type upload struct {
		endpoint string
		fields   map[string]string
		max      int
	}
	for _, up := range []upload{
		{"/v1/containers/" + cn.ID + "/files", nil, store.MaxNameBytes},
		{"/v1/files", map[string]string{"purpose": "user_data"}, maxFilesAPI},
	} {
		// One byte too many, and as many characters but two bytes each.
		names := append([]string{strings.Repeat("n", up.max-4) + "x.csv", strings.Repeat("é", up.max/2) + ".csv"}, hostile...)
		if up.fields != nil {
			names = append(names, strings.Repeat("a", 236)+".csv") // the 240 characters
		}
		for _, name := range names {
			t.Run(fmt.Sprintf("%s %q", up.endpoint, name), func(t *testing.T) {
				ct, body := multipartBody(t, up.fields, name, []byte("a,b\n"))
				status, _, got := e.do("POST", up.endpoint, "sk-a", ct, body)
				checkError(t, status, got, 400, "file", "filename")
			})
		}
		longest := strings.Repeat("n", up.max-4) + ".csv"
		ct, body := multipartBody(t, up.fields, longest, []byte("a,b\n"))
		if status, _, got := e.do("POST", up.endpoint, "sk-a", ct, body); status != 200 {
			t.Errorf("%s: the longest name (%d bytes): %d %s", up.endpoint, len(longest), status, got)
		}
	}
	// Names that merely look unusual are fine.
	for _, name := range []string{"données été.csv", "数据.xlsx", "a b (1).txt", "emoji 📈.png"} {
		ct, body := multipartBody(t, nil, name, []byte("x"))
		if status, _, got := e.do("POST", "/v1/containers/"+cn.ID+"/files", "sk-a", ct, body); status != 200 {
			t.Errorf("%q refused: %d %s", name, status, got)
		}
	}
}

// TestUploadOverADirectory: code made /mnt/data/x a directory (it wrote
// /mnt/data/x/y); an upload named x cannot sit beside it — in a file system
// it could not, and storing both bricked the container. It is a 400 that
// names the file in the way, and nothing is stored.
func TestUploadOverADirectory(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client("sk-a")
	cn, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: "tree"})
	if err != nil {
		t.Fatal(err)
	}
	owner, _ := store.Owner(map[string][]string{"Authorization": {"Bearer sk-a"}}, []string{"authorization", "api-key"})
	if _, err := e.store.PutFile(ctx, store.File{Owner: owner, ContainerID: cn.ID, Path: "/mnt/data/x/y", Source: "assistant"}, []byte("made by code")); err != nil {
		t.Fatal(err)
	}
	ct, body := multipartBody(t, nil, "x", []byte("upload"))
	status, _, got := e.do("POST", "/v1/containers/"+cn.ID+"/files", "sk-a", ct, body)
	checkError(t, status, got, 400, "file", "/mnt/data/x/y")
	l, err := c.Containers.Files.List(ctx, cn.ID, openai.ContainerFileListParams{})
	if err != nil || len(l.Data) != 1 || l.Data[0].Path != "/mnt/data/x/y" {
		t.Fatalf("files after the refused upload: %+v %v", l, err)
	}
}
