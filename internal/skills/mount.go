package skills

import (
	"path"
	"strings"
)

// MountDir is where a container's skills are, each in its folder
// MountDir/<name>/. OpenAI does not document its path (one observed is
// /home/oai/skills/<name>-<hash>/: below the sandbox user's home); this
// server's sandbox user's home is /tmp, which is also the one place besides
// /mnt/data that every sandbox provider (gVisor and WASM alike) lets the
// server write. Not below /mnt/data: those are the user's container files,
// which the Containers API lists and a run's changes are collected from.
const MountDir = "/tmp/skills"

// MountPath is the folder of the skill named name in a container.
func MountPath(name string) string { return MountDir + "/" + name }

// Mounted is one skill as a container has it: what the model is told.
type Mounted struct {
	Name        string
	Description string
}

// Paths are where a bundle's files go in a container, in its order.
func Paths(b Bundle) []string {
	out := make([]string, len(b.Files))
	for i, f := range b.Files {
		out[i] = path.Join(MountPath(b.Name), f.Path)
	}
	return out
}

// Context is what the model is told of a container's skills, in the
// user's part of the prompt as OpenAI does: each skill's name,
// description and path, and that its SKILL.md says how to use it. ""
// when there are none.
func Context(skills []Mounted) string {
	if len(skills) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("Skills are available in the container. Each is a folder holding a SKILL.md with its instructions, " +
		"and scripts or resources it refers to. When a task matches a skill's description, read its SKILL.md with the shell " +
		"(cat) before you do the task, and follow it. The folders are read-only.\n")
	for _, s := range skills {
		b.WriteString("- ")
		b.WriteString(s.Name)
		b.WriteString(": ")
		b.WriteString(s.Description)
		b.WriteString(" (path: ")
		b.WriteString(path.Join(MountPath(s.Name), ManifestName))
		b.WriteString(")\n")
	}
	return b.String()
}
