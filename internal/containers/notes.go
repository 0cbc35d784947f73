package containers

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/codeinterp/codeinterp/internal/containerapi"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/store"
)

// notKept gathers the files a run wrote that the store did not take, for
// one bounded line to the model: code that writes 9 000 files past the
// container's quota gets one summary, not 9 000 lines.
type notKept struct {
	n         int
	first     string         // the first path, in listing order
	reasons   map[string]int // why → how many
	order     []string       // reasons in the order first seen
	truncated bool           // the listing did not show every file
}

func (k *notKept) add(p, why string) {
	if k.n == 0 {
		k.first = p
	}
	k.n++
	if k.reasons == nil {
		k.reasons = map[string]int{}
	}
	if k.reasons[why] == 0 {
		k.order = append(k.order, why)
	}
	k.reasons[why]++
}

// maxNoteReasons bounds the distinct reasons a note names.
const maxNoteReasons = 3

// note is the line the model gets, or "" when everything was kept.
func (k *notKept) note() string {
	var b strings.Builder
	if k.n > 0 {
		files := "files"
		if k.n == 1 {
			files = "file"
		}
		fmt.Fprintf(&b, "%d %s in %s not kept as container files (", k.n, files, DataDir)
		order := append([]string(nil), k.order...)
		sort.SliceStable(order, func(i, j int) bool { return k.reasons[order[i]] > k.reasons[order[j]] })
		for i, why := range order {
			if i == maxNoteReasons {
				fmt.Fprintf(&b, "; %d more reasons", len(order)-i)
				break
			}
			if i > 0 {
				b.WriteString("; ")
			}
			if len(order) > 1 {
				b.WriteString(strconv.Itoa(k.reasons[why]) + ": ")
			}
			b.WriteString(why)
		}
		b.WriteString("); first: " + containerapi.QuotePath(clip(k.first, 200)))
	}
	if k.truncated {
		if b.Len() > 0 {
			b.WriteString(". ")
		}
		fmt.Fprintf(&b, "%s held more files than one listing shows (%d): those not shown were not kept either", DataDir, sandbox.MaxListFiles)
	}
	if b.Len() == 0 {
		return ""
	}
	b.WriteString(". What was not kept is removed from " + DataDir + ".")
	return b.String()
}

// keepReason says briefly why a file could not be kept.
func keepReason(err error) string {
	var qe *store.QuotaError
	var pc *store.PathConflictError
	switch {
	case errors.As(err, &qe):
		switch qe.Limit {
		case store.LimitContainerFiles:
			return fmt.Sprintf("the container holds at most %d files", qe.Max)
		case store.LimitContainerBytes:
			return "the container holds at most " + containerapi.HumanBytes(qe.Max)
		case store.LimitFileBytes:
			return "a file is at most " + containerapi.HumanBytes(qe.Max)
		case store.LimitOwnerBytes:
			return "the caller's files hold at most " + containerapi.HumanBytes(qe.Max) + " in all"
		case store.LimitStoreMemory:
			return "the store is full"
		}
		return "over the " + qe.Limit + " limit"
	case errors.Is(err, sandbox.ErrTooLarge):
		return "a file is at most " + containerapi.HumanBytes(sandbox.MaxFileBytes)
	case errors.As(err, &pc):
		return "the container has " + containerapi.QuotePath(pc.Other) + " in its way"
	case errors.Is(err, sandbox.ErrNotExist):
		return "it was gone before it could be read"
	}
	return "it could not be stored: " + clip(err.Error(), 200)
}

// joinNotes puts two notes on one line.
func joinNotes(a, b string) string {
	if a == "" {
		return b
	}
	return a + " " + b
}

// clip cuts s to at most n bytes, at a character boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
