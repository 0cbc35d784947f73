package skills

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Bounds of SKILL.md's front matter, as the Agent Skills format (which
// OpenAI's and Anthropic's skills share) has them. The name is also the
// skill's folder in a container (MountPath), so it must be a plain path
// component.
const (
	MaxNameLen        = 64
	MaxDescriptionLen = 1024
)

// FrontMatter reads the name and description of a SKILL.md: YAML front
// matter between two "---" lines at its very start, of which this reads
// "key: value" lines (a value plain, or quoted with ' or "); other keys are
// allowed and ignored. Both are required.
func FrontMatter(data []byte) (name, description string, err error) {
	if !utf8.Valid(data) {
		return "", "", errors.New("it is not UTF-8 text")
	}
	text := strings.ReplaceAll(string(bytes.TrimPrefix(data, []byte("\uFEFF"))), "\r\n", "\n")
	rest, ok := strings.CutPrefix(text, "---\n")
	if !ok {
		return "", "", errors.New("it must start with front matter between two '---' lines, holding name and description")
	}
	block, _, ok := strings.Cut(rest, "\n---")
	if !ok {
		return "", "", errors.New("its front matter has no closing '---' line")
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(block, "\n") {
		if strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "#") || line[0] == ' ' || line[0] == '\t' {
			continue // blank, comment, or a nested value of another key
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			return "", "", fmt.Errorf("front matter line %q is not 'key: value'", line)
		}
		k = strings.TrimSpace(k)
		if k != "name" && k != "description" {
			continue
		}
		if seen[k] {
			return "", "", fmt.Errorf("its front matter has '%s' twice", k)
		}
		seen[k] = true
		v, err := scalar(strings.TrimSpace(v))
		if err != nil {
			return "", "", fmt.Errorf("front matter '%s': %w", k, err)
		}
		if k == "name" {
			name = v
		} else {
			description = v
		}
	}
	if err := CheckName(name); err != nil {
		return "", "", err
	}
	switch {
	case description == "":
		return "", "", errors.New("its front matter needs a non-empty 'description'")
	case utf8.RuneCountInString(description) > MaxDescriptionLen:
		return "", "", fmt.Errorf("its description is longer than %d characters", MaxDescriptionLen)
	}
	for _, r := range description {
		if unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp) {
			return "", "", fmt.Errorf("its description holds a control or format character (%U)", r)
		}
	}
	return name, description, nil
}

// CheckName reports why name cannot be a skill's name: 1 to 64 of a-z,
// 0-9 and '-', not starting or ending with '-', no "--".
func CheckName(name string) error {
	switch {
	case name == "":
		return errors.New("its front matter needs a non-empty 'name'")
	case len(name) > MaxNameLen:
		return fmt.Errorf("its name is longer than %d characters", MaxNameLen)
	case strings.HasPrefix(name, "-") || strings.HasSuffix(name, "-") || strings.Contains(name, "--"):
		return fmt.Errorf("its name %q must not start or end with '-' or hold '--'", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return fmt.Errorf("its name %q may hold only lowercase letters, digits and '-'", name)
		}
	}
	return nil
}

// scalar is one YAML value on one line: plain, 'single' (” is ') or
// "double" (\" \\ \n \t) quoted.
func scalar(v string) (string, error) {
	switch {
	case v == "":
		return "", nil
	case v[0] == '\'' || v[0] == '"':
		end := closingQuote(v)
		if end < 0 {
			return "", errors.New("unterminated quoted value")
		}
		if rest := strings.TrimSpace(v[end+1:]); rest != "" && !strings.HasPrefix(rest, "#") {
			return "", errors.New("text after the quoted value")
		}
		if v[0] == '\'' {
			return strings.ReplaceAll(v[1:end], "''", "'"), nil
		}
		r := strings.NewReplacer(`\"`, `"`, `\\`, `\`, `\n`, "\n", `\t`, "\t")
		return r.Replace(v[1:end]), nil
	case v[0] == '|' || v[0] == '>':
		return "", errors.New("block values are not supported: write it on one line")
	}
	if i := strings.Index(v, " #"); i >= 0 {
		v = strings.TrimSpace(v[:i])
	}
	return v, nil
}

// closingQuote is the index of the quote that closes v's opening one, or
// -1: in '…' a quote is doubled to escape it, in "…" backslashed.
func closingQuote(v string) int {
	q := v[0]
	for i := 1; i < len(v); i++ {
		switch {
		case q == '"' && v[i] == '\\':
			i++
		case v[i] == q && q == '\'' && i+1 < len(v) && v[i+1] == '\'':
			i++
		case v[i] == q:
			return i
		}
	}
	return -1
}
