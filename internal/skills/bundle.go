package skills

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/store"
)

// OpenAI's limits of one skill version (developers.openai.com, the skills
// guide), and this server's own where OpenAI documents none.
const (
	MaxZipBytes  = 50 << 20 // an uploaded zip
	MaxFiles     = 500      // files in one version
	MaxFileBytes = 25 << 20 // one file, uncompressed
	// MaxTotalBytes bounds a version's files together, uncompressed: OpenAI
	// documents no such bound, but without one 500 files of 25 MB each
	// (12.5 GB from a 50 MB zip) would be accepted into memory.
	MaxTotalBytes = 100 << 20
	// MaxRatio is the most an entry may expand (uncompressed ÷ compressed)
	// once it is past ratioFloor bytes: deflate reaches about 1030:1 on
	// zeros; real text and code stay far below 100.
	MaxRatio   = 100
	ratioFloor = 1 << 20
	// ManifestName is the one file every skill has at its top.
	ManifestName = "SKILL.md"
)

// File is one file of a skill: Path is relative to the skill's folder,
// slash-separated and clean ("SKILL.md", "scripts/run.py").
type File struct {
	Path string
	Data []byte
}

// Bundle is one checked skill version: its front matter and its files,
// sorted by path, SKILL.md among them.
type Bundle struct {
	Name        string
	Description string
	Files       []File
}

// Bytes is the bundle's files' size together.
func (b Bundle) Bytes() int64 {
	var n int64
	for _, f := range b.Files {
		n += int64(len(f.Data))
	}
	return n
}

// Part is one uploaded file of a folder: Filename is its path in the
// folder as the client sent it ("my-skill/SKILL.md").
type Part struct {
	Filename string
	Data     []byte
}

// IsZip reports whether one uploaded part is a zip rather than a lone
// file of a folder: its name ends in .zip or its bytes start with a zip's
// local header.
func IsZip(p Part) bool {
	return strings.HasSuffix(strings.ToLower(p.Filename), ".zip") || bytes.HasPrefix(p.Data, []byte("PK\x03\x04"))
}

// FromUpload checks an upload — one zip, or a folder's files — and
// returns its bundle; param names the field ("files") in a refusal.
func FromUpload(parts []Part, param string) (Bundle, *apierror.Error) {
	switch {
	case len(parts) == 0:
		return Bundle{}, apierror.Invalid(param, "missing_required_parameter", "Missing required parameter: '%s'.", param)
	case len(parts) == 1 && IsZip(parts[0]):
		return ReadZip(parts[0].Data, param)
	}
	return FromFolder(parts, param)
}

// ReadZip checks a zip and returns its bundle. The zip holds one skill:
// its files below one top folder (which is dropped) or at its root. Every
// bound is counted on the bytes as they are inflated.
func ReadZip(data []byte, param string) (Bundle, *apierror.Error) {
	if len(data) > MaxZipBytes {
		return Bundle{}, invalid(param, "file_too_large", "The skill's zip is %d bytes; at most %d are accepted.", len(data), MaxZipBytes)
	}
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil && !errors.Is(err, zip.ErrInsecurePath) { // insecure names are refused below, by name
		return Bundle{}, invalid(param, "invalid_file", "The skill's upload is not a readable zip archive: %v.", err)
	}
	var files []File
	var total int64
	for _, f := range zr.File {
		name := f.Name
		mode := f.Mode()
		dir := mode.IsDir() || strings.HasSuffix(name, "/")
		if dir {
			name = strings.TrimSuffix(name, "/")
		}
		if e := checkPath(param, name); e != nil {
			return Bundle{}, e
		}
		if e := checkMode(param, name, mode); e != nil {
			return Bundle{}, e
		}
		if dir {
			continue
		}
		if len(files) == MaxFiles {
			return Bundle{}, invalid(param, "too_many_files", "A skill holds at most %d files.", MaxFiles)
		}
		b, e := inflate(param, f, MaxTotalBytes-total)
		if e != nil {
			return Bundle{}, e
		}
		total += int64(len(b))
		files = append(files, File{Path: name, Data: b})
	}
	return assemble(param, files)
}

// inflate reads one entry, bounded by MaxFileBytes, by left (what the
// version may still hold) and by MaxRatio, whatever its header says.
func inflate(param string, f *zip.File, left int64) ([]byte, *apierror.Error) {
	if f.Method != zip.Store && f.Method != zip.Deflate {
		return nil, invalid(param, "invalid_file", "The skill's file '%s' uses an unsupported zip compression method (%d); only stored and deflated entries are accepted.", f.Name, f.Method)
	}
	rc, err := f.Open()
	if err != nil {
		return nil, invalid(param, "invalid_file", "The skill's file '%s' cannot be read from the zip: %v.", f.Name, err)
	}
	defer rc.Close()
	limit := min(int64(MaxFileBytes), left)
	var buf bytes.Buffer
	chunk := make([]byte, 32<<10)
	for {
		n, err := rc.Read(chunk)
		buf.Write(chunk[:n])
		got := int64(buf.Len())
		switch {
		case got > MaxFileBytes:
			return nil, invalid(param, "file_too_large", "The skill's file '%s' is larger than %d bytes uncompressed.", f.Name, MaxFileBytes)
		case got > limit:
			return nil, invalid(param, "file_too_large", "The skill's files are larger than %d bytes together, uncompressed.", MaxTotalBytes)
		case got > ratioFloor && got > MaxRatio*max(int64(f.CompressedSize64), 1):
			return nil, invalid(param, "invalid_file", "The skill's file '%s' expands more than %d times: zip bombs are refused.", f.Name, MaxRatio)
		}
		if err == io.EOF {
			return buf.Bytes(), nil
		}
		if err != nil {
			return nil, invalid(param, "invalid_file", "The skill's file '%s' cannot be read from the zip: %v.", f.Name, err)
		}
	}
}

// FromFolder checks a folder's files, each part's filename its path; the
// files below one top folder (which is dropped) or at the root.
func FromFolder(parts []Part, param string) (Bundle, *apierror.Error) {
	if len(parts) > MaxFiles {
		return Bundle{}, invalid(param, "too_many_files", "A skill holds at most %d files.", MaxFiles)
	}
	var files []File
	var total int64
	for _, p := range parts {
		name := strings.TrimPrefix(p.Filename, "./")
		if e := checkPath(param, name); e != nil {
			return Bundle{}, e
		}
		if len(p.Data) > MaxFileBytes {
			return Bundle{}, invalid(param, "file_too_large", "The skill's file '%s' is larger than %d bytes.", name, MaxFileBytes)
		}
		if total += int64(len(p.Data)); total > MaxTotalBytes {
			return Bundle{}, invalid(param, "file_too_large", "The skill's files are larger than %d bytes together.", MaxTotalBytes)
		}
		files = append(files, File{Path: name, Data: p.Data})
	}
	return assemble(param, files)
}

// checkPath refuses a name that is not a clean relative path of valid file
// names: absolute paths, drive letters, backslashes, "..", "." and empty
// components.
func checkPath(param, name string) *apierror.Error {
	switch {
	case name == "":
		return invalid(param, "invalid_file", "The skill holds a file with an empty path.")
	case strings.HasPrefix(name, "/") || len(name) >= 2 && name[1] == ':':
		return invalid(param, "invalid_file", "The skill's path '%s' is absolute; paths must be relative to the skill's folder.", name)
	case strings.Contains(name, "\\"):
		return invalid(param, "invalid_file", "The skill's path '%s' contains a backslash; paths are separated by '/'.", name)
	}
	for _, c := range strings.Split(name, "/") {
		if c == ".." {
			return invalid(param, "invalid_file", "The skill's path '%s' escapes the skill's folder.", name)
		}
		if err := store.CheckFilename(c, store.MaxNameBytes); err != nil {
			return invalid(param, "invalid_file", "The skill's path '%s' is not valid: %v.", name, err)
		}
	}
	return nil
}

// checkMode refuses whatever is not a regular file or a directory.
func checkMode(param, name string, mode fs.FileMode) *apierror.Error {
	switch {
	case mode&fs.ModeSymlink != 0:
		return invalid(param, "invalid_file", "The skill's '%s' is a symbolic link; only regular files are accepted.", name)
	case mode&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket|fs.ModeIrregular) != 0:
		return invalid(param, "invalid_file", "The skill's '%s' is a device, FIFO or socket; only regular files are accepted.", name)
	}
	return nil
}

// assemble drops a top folder all files share, checks the tree (no
// duplicate, no file where a folder is) and the one SKILL.md, and reads
// its front matter.
func assemble(param string, files []File) (Bundle, *apierror.Error) {
	if len(files) == 0 {
		return Bundle{}, invalid(param, "invalid_file", "The skill holds no files; it needs a %s.", ManifestName)
	}
	if top := topFolder(files); top != "" {
		for i := range files {
			files[i].Path = strings.TrimPrefix(files[i].Path, top+"/")
		}
	}
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	var manifest *File
	for i, f := range files {
		if i > 0 && files[i-1].Path == f.Path {
			return Bundle{}, invalid(param, "invalid_file", "The skill holds '%s' twice.", f.Path)
		}
		if i > 0 && strings.HasPrefix(f.Path, files[i-1].Path+"/") {
			return Bundle{}, invalid(param, "invalid_file", "The skill's '%s' is a file and a folder (it holds '%s').", files[i-1].Path, f.Path)
		}
		if !strings.EqualFold(path.Base(f.Path), ManifestName) {
			continue
		}
		if manifest != nil {
			return Bundle{}, invalid(param, "invalid_file", "The skill holds more than one %s ('%s' and '%s'); exactly one is allowed.", ManifestName, manifest.Path, f.Path)
		}
		manifest = &files[i]
	}
	if manifest == nil {
		return Bundle{}, invalid(param, "invalid_file", "The skill has no %s; exactly one is required, at the top of its folder.", ManifestName)
	}
	if strings.Contains(manifest.Path, "/") {
		return Bundle{}, invalid(param, "invalid_file", "The skill's %s is at '%s'; it must be at the top of the skill's folder.", ManifestName, manifest.Path)
	}
	name, desc, err := FrontMatter(manifest.Data)
	if err != nil {
		return Bundle{}, invalid(param, "invalid_file", "The skill's %s: %v.", ManifestName, err)
	}
	return Bundle{Name: name, Description: desc, Files: files}, nil
}

// topFolder is the first path component every file shares below it, or
// "" when the files are not all in one folder.
func topFolder(files []File) string {
	top, _, ok := strings.Cut(files[0].Path, "/")
	if !ok {
		return ""
	}
	for _, f := range files[1:] {
		if t, _, ok := strings.Cut(f.Path, "/"); !ok || t != top {
			return ""
		}
	}
	return top
}

// Zip is the canonical form a bundle is kept and served in: its files
// below one folder named after the skill, deflated, with one fixed time,
// so one bundle always gives the same bytes.
func Zip(b Bundle) ([]byte, error) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	mod := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, f := range b.Files {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: b.Name + "/" + f.Path, Method: zip.Deflate, Modified: mod})
		if err != nil {
			return nil, fmt.Errorf("skills: zip %s: %w", f.Path, err)
		}
		if _, err := w.Write(f.Data); err != nil {
			return nil, fmt.Errorf("skills: zip %s: %w", f.Path, err)
		}
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("skills: zip: %w", err)
	}
	return buf.Bytes(), nil
}

// invalid is OpenAI's 400 naming param.
func invalid(param, code, format string, args ...any) *apierror.Error {
	return apierror.Invalid(param, code, format, args...)
}
