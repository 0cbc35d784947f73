package skills_test

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"hash/crc32"
	"io/fs"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"github.com/codeinterp/codeinterp/internal/skills"
)

const manifest = "---\nname: csv-report\ndescription: Summarise a CSV file into a short report.\n---\n# CSV report\nRun scripts/report.py FILE.\n"

// entry is one zip entry of a test archive.
type entry struct {
	name   string
	data   []byte
	mode   fs.FileMode // 0: a regular file (0644)
	method uint16      // 0: deflate
	// lieSize, when set, is the uncompressed size the headers claim.
	lieSize uint64
}

func makeZip(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
		if e.method != 0 {
			h.Method = e.method
		}
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		h.SetMode(mode)
		if len(e.data) > 1<<20 || e.lieSize != 0 || e.method > zip.Deflate {
			// Raw: the headers say what the test wants (lieSize), and a
			// large entry is deflated once for all the archives using it.
			c := deflated(e.data)
			h.CRC32 = crc32.ChecksumIEEE(e.data)
			h.CompressedSize64 = uint64(len(c))
			h.UncompressedSize64 = uint64(len(e.data))
			if e.lieSize != 0 {
				h.UncompressedSize64 = e.lieSize
			}
			w, err := zw.CreateRaw(h)
			if err != nil {
				t.Fatal(err)
			}
			w.Write(c)
			continue
		}
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(e.data)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// deflatedCache keeps the deflated form of the large test files.
var deflatedCache = map[[2]uintptr][]byte{}

func deflated(data []byte) []byte {
	k := [2]uintptr{uintptr(unsafe.Pointer(unsafe.SliceData(data))), uintptr(len(data))}
	if c, ok := deflatedCache[k]; ok {
		return c
	}
	var c bytes.Buffer
	fw, _ := flate.NewWriter(&c, flate.BestSpeed)
	fw.Write(data)
	fw.Close()
	deflatedCache[k] = c.Bytes()
	return c.Bytes()
}

func ok(name string) entry { return entry{name: name, data: []byte("print('hi')\n")} }
func md(name string) entry { return entry{name: name, data: []byte(manifest)} }

// TestHostileZips is the corpus of uploads that must be refused with a
// 400 naming the field, each for its reason.
func TestHostileZips(t *testing.T) {
	zeros := make([]byte, 10<<20)
	big := make([]byte, skills.MaxFileBytes+1)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range big {
		if i%64 == 0 {
			big[i] = byte(rng.Uint32()) // about 60:1, under MaxRatio
		}
	}
	many := []entry{md("s/SKILL.md")}
	for i := range skills.MaxFiles {
		many = append(many, ok("s/f"+strings.Repeat("x", i%3)+string(rune('a'+i%26))+"/"+itoa(i)))
	}
	// Five files of 24 MiB at about 60:1: each within its bounds, 120 MiB
	// together.
	var total []entry
	total = append(total, md("s/SKILL.md"))
	for i := range 5 {
		total = append(total, entry{name: "s/part" + itoa(i), data: big[:24<<20]})
	}
	tests := []struct {
		name    string
		entries []entry
		want    string
	}{
		{"absolute path", []entry{md("s/SKILL.md"), ok("/etc/cron.d/x")}, "absolute"},
		{"drive letter", []entry{md("s/SKILL.md"), ok("C:/x.py")}, "absolute"},
		{"dot-dot", []entry{md("s/SKILL.md"), ok("s/../../evil.py")}, "escapes"},
		{"dot-dot at top", []entry{md("SKILL.md"), ok("../evil.py")}, "escapes"},
		{"backslash", []entry{md("s/SKILL.md"), ok("s\\..\\..\\evil.py")}, "backslash"},
		{"symlink", []entry{md("s/SKILL.md"), {name: "s/passwd", data: []byte("/etc/passwd"), mode: fs.ModeSymlink | 0o777}}, "symbolic link"},
		{"symlink to a folder", []entry{md("s/SKILL.md"), {name: "s/lib", data: []byte("/"), mode: fs.ModeSymlink | 0o777}}, "symbolic link"},
		{"device", []entry{md("s/SKILL.md"), {name: "s/sda", mode: fs.ModeDevice | 0o600}}, "device"},
		{"char device", []entry{md("s/SKILL.md"), {name: "s/tty", mode: fs.ModeDevice | fs.ModeCharDevice | 0o600}}, "device"},
		{"fifo", []entry{md("s/SKILL.md"), {name: "s/pipe", mode: fs.ModeNamedPipe | 0o600}}, "FIFO"},
		{"no SKILL.md", []entry{ok("s/run.py")}, "no SKILL.md"},
		{"second SKILL.md", []entry{md("s/SKILL.md"), md("s/sub/skill.md")}, "more than one"},
		{"two at the top, other case", []entry{md("s/SKILL.md"), md("s/Skill.MD")}, "more than one"},
		{"SKILL.md not at the top", []entry{md("s/docs/SKILL.md"), ok("s/run.py")}, "top of the skill"},
		{"duplicate path", []entry{md("s/SKILL.md"), ok("s/a.py"), ok("s/a.py")}, "twice"},
		{"file and folder", []entry{md("s/SKILL.md"), ok("s/a"), ok("s/a/b")}, "file and a folder"},
		{"control character", []entry{md("s/SKILL.md"), ok("s/a\u202egp.exe")}, "not valid"},
		{"no front matter", []entry{{name: "s/SKILL.md", data: []byte("# just text\n")}}, "front matter"},
		{"no name", []entry{{name: "s/SKILL.md", data: []byte("---\ndescription: d\n---\n")}}, "'name'"},
		{"no description", []entry{{name: "s/SKILL.md", data: []byte("---\nname: a\n---\n")}}, "'description'"},
		{"name with a slash", []entry{{name: "s/SKILL.md", data: []byte("---\nname: ../x\ndescription: d\n---\n")}}, "lowercase"},
		{"name too long", []entry{{name: "s/SKILL.md", data: []byte("---\nname: " + strings.Repeat("a", 65) + "\ndescription: d\n---\n")}}, "longer than 64"},
		{"zip bomb by ratio", []entry{md("s/SKILL.md"), {name: "s/zeros", data: zeros}}, "zip bombs"},
		{"file over 25 MB", []entry{md("s/SKILL.md"), {name: "s/big", data: big}}, "larger than"},
		{"header lies about the size", []entry{md("s/SKILL.md"), {name: "s/lie", data: big, lieSize: 10}}, "s/lie"},
		{"more than 500 files", many, "at most 500"},
		{"more than the total", total, "together"},
		{"unsupported method", []entry{md("s/SKILL.md"), {name: "s/x", data: []byte("x"), method: 99, lieSize: 1}}, "compression method"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, e := skills.ReadZip(makeZip(t, tc.entries...), "files")
			if e == nil {
				t.Fatal("accepted")
			}
			if e.Status != 400 || e.Param != "files" || !strings.Contains(e.Message, tc.want) {
				t.Fatalf("got %d %s %q, want 400 files …%s…", e.Status, e.Param, e.Message, tc.want)
			}
		})
	}
}

func itoa(i int) string {
	return strings.TrimLeft(string([]byte{byte('0' + i/100%10), byte('0' + i/10%10), byte('0' + i%10)}), "")
}

func TestNotAZip(t *testing.T) {
	for _, data := range [][]byte{[]byte("PK\x03\x04 not really"), make([]byte, skills.MaxZipBytes+1)} {
		if _, e := skills.ReadZip(data, "files"); e == nil || e.Param != "files" || e.Status != 400 {
			t.Fatalf("got %v", e)
		}
	}
}

func TestReadZip(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []entry
	}{
		{"top folder", []entry{{name: "csv-report/", mode: fs.ModeDir | 0o755}, md("csv-report/SKILL.md"), ok("csv-report/scripts/report.py")}},
		{"no top folder", []entry{md("SKILL.md"), ok("scripts/report.py")}},
		{"lower-case manifest", []entry{md("x/skill.md"), ok("x/scripts/report.py")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, e := skills.ReadZip(makeZip(t, tc.entries...), "files")
			if e != nil {
				t.Fatal(e)
			}
			if b.Name != "csv-report" || b.Description != "Summarise a CSV file into a short report." {
				t.Fatalf("front matter: %q %q", b.Name, b.Description)
			}
			if len(b.Files) != 2 || b.Files[0].Path != "scripts/report.py" && b.Files[1].Path != "scripts/report.py" {
				t.Fatalf("files: %+v", b.Files)
			}
			// The canonical zip reads back to the same bundle, below a
			// folder named after the skill.
			z, err := skills.Zip(b)
			if err != nil {
				t.Fatal(err)
			}
			again, e := skills.ReadZip(z, "files")
			if e != nil || again.Name != b.Name || len(again.Files) != 2 || !bytes.Equal(again.Files[0].Data, b.Files[0].Data) {
				t.Fatalf("round trip: %+v %v", again, e)
			}
			zr, _ := zip.NewReader(bytes.NewReader(z), int64(len(z)))
			if zr.File[0].Name != "csv-report/"+b.Files[0].Path {
				t.Fatalf("canonical names: %s", zr.File[0].Name)
			}
		})
	}
}

func TestFromUpload(t *testing.T) {
	folder := []skills.Part{{Filename: "csv-report/SKILL.md", Data: []byte(manifest)}, {Filename: "csv-report/scripts/report.py", Data: []byte("x")}}
	b, e := skills.FromUpload(folder, "files")
	if e != nil || b.Name != "csv-report" || b.Files[1].Path != "scripts/report.py" {
		t.Fatalf("folder: %+v %v", b, e)
	}
	one := []skills.Part{{Filename: "skill.zip", Data: makeZip(t, md("a/SKILL.md"))}}
	if b, e := skills.FromUpload(one, "files"); e != nil || len(b.Files) != 1 {
		t.Fatalf("zip: %+v %v", b, e)
	}
	for name, parts := range map[string][]skills.Part{
		"none":          nil,
		"escaping":      {{Filename: "a/SKILL.md", Data: []byte(manifest)}, {Filename: "a/../../x", Data: []byte("x")}},
		"absolute":      {{Filename: "/a/SKILL.md", Data: []byte(manifest)}},
		"two manifests": {{Filename: "a/SKILL.md", Data: []byte(manifest)}, {Filename: "a/b/SKILL.md", Data: []byte(manifest)}},
		"too large":     {{Filename: "a/SKILL.md", Data: []byte(manifest)}, {Filename: "a/big", Data: make([]byte, skills.MaxFileBytes+1)}},
	} {
		if _, e := skills.FromUpload(parts, "files"); e == nil || e.Status != 400 || e.Param != "files" {
			t.Errorf("%s: got %v", name, e)
		}
	}
}

func TestFrontMatter(t *testing.T) {
	name, desc, err := skills.FrontMatter([]byte("\uFEFF---\r\nname: 'pdf-tools'\r\nlicense: MIT\r\nmetadata:\r\n  x: y\r\ndescription: \"Fill \\\"PDF\\\" forms\" # a comment\r\n---\r\nbody"))
	if err != nil || name != "pdf-tools" || desc != `Fill "PDF" forms` {
		t.Fatalf("%q %q %v", name, desc, err)
	}
}

func TestContext(t *testing.T) {
	got := skills.Context([]skills.Mounted{{Name: "csv-report", Description: "Summarise a CSV."}})
	if !strings.Contains(got, "- csv-report: Summarise a CSV. (path: /tmp/skills/csv-report/SKILL.md)") {
		t.Fatal(got)
	}
	if skills.Context(nil) != "" {
		t.Fatal("context without skills")
	}
}
