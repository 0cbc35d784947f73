// Package skills is OpenAI's skills as this server keeps and mounts them,
// the parts that need no store or transport: an upload (one zip, or a
// folder's files sent as multipart parts) checked against OpenAI's limits
// and turned into a Bundle; the canonical zip a Bundle is kept as; and
// where a container's skills are mounted and what the model is told of
// them.
//
// Uploads are hostile input: every bound is enforced while the bytes are
// read, never taken from a zip's headers (a header's sizes can lie), and
// nothing that could reach outside the skill's folder — an absolute path,
// "..", a symbolic link, a device or FIFO — is accepted.
//
// Files:
//   - bundle.go: Bundle, the limits, ReadZip, FromFolder, Zip.
//   - frontmatter.go: SKILL.md's front matter (name, description).
//   - mount.go: the mount path, the files a container's skill puts there,
//     and the model's context.
package skills
