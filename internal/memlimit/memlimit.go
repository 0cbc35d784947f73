package memlimit

import (
	"strconv"
	"strings"
)

// Default is what a container gets when its request names no
// memory_limit (OpenAI's default, and the smallest choice it offers);
// DefaultBytes is its size.
const (
	Default      = "1g"
	DefaultBytes = 1 << 30
)

// Choice is one of OpenAI's memory_limit values and its size.
type Choice struct {
	Name  string
	Bytes int64
}

// Choices are OpenAI's memory_limit values, smallest first. A fresh slice
// each call.
func Choices() []Choice {
	return []Choice{{"1g", 1 << 30}, {"4g", 4 << 30}, {"16g", 16 << 30}, {"64g", 64 << 30}}
}

// Parse reads a memory_limit: a positive integer with an optional binary
// unit k/m/g (OpenAI's values are "1g", "4g", "16g", "64g").
func Parse(s string) (int64, bool) {
	s = strings.ToLower(strings.TrimSpace(s))
	s = strings.TrimSuffix(s, "b")
	s = strings.TrimSuffix(s, "i")
	mult := int64(1)
	if s != "" {
		switch s[len(s)-1] {
		case 'k':
			mult = 1 << 10
		case 'm':
			mult = 1 << 20
		case 'g':
			mult = 1 << 30
		}
		if mult != 1 {
			s = s[:len(s)-1]
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, false
	}
	return n * mult, true
}

// Format spells n bytes as OpenAI spells memory_limit ("4g").
func Format(n int64) string {
	switch {
	case n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + "g"
	case n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + "m"
	}
	return strconv.FormatInt(n, 10)
}
