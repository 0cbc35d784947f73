package idgen

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
)

// Digits is how many hex digits New puts after the prefix (192 bits), the
// length of OpenAI's container ids.
const Digits = 48

// Random returns prefix followed by digits random hex digits.
func Random(prefix string, digits int) string {
	b := make([]byte, (digits+1)/2)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go ≥ 1.24): it crashes the program instead
	return prefix + hex.EncodeToString(b)[:digits]
}

// New returns prefix followed by Digits random hex digits.
func New(prefix string) string { return Random(prefix, Digits) }

// tag starts the digits of the ids this server makes for what only it
// knows — responses (resp_), code calls (ci_), conversations (conv_) — so
// that one it no longer has (expired, deleted, another owner's) is told
// from a model server's own id of the same shape: the former gets this
// server's "not found", never a trip to a model server that may ignore
// what it does not know and answer without the history. A model server's
// random id starts so once in 65 536.
const tag = "c0de"

// NewTagged returns prefix followed by digits hex digits, the first of
// them the tag and the rest random (OpenAI's lengths: 50 for resp_ and
// ci_, 48 for conv_).
func NewTagged(prefix string, digits int) string {
	return Random(prefix+tag, digits-len(tag))
}

// Tagged reports whether id is one NewTagged made with prefix.
func Tagged(id, prefix string) bool {
	rest, ok := strings.CutPrefix(id, prefix+tag)
	if !ok || rest == "" {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if c := rest[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// NewItem is an id like OpenAI's for a response or conversation item of
// type typ that came without one: msg_… for a message, ci_ for a
// code_interpreter_call, fc_ for a function_call, rs_ for reasoning, else
// the type's first word; then 50 random hex digits.
func NewItem(typ string) string {
	prefix := strings.SplitN(typ, "_", 2)[0]
	switch typ {
	case "message", "":
		prefix = "msg"
	case "code_interpreter_call":
		prefix = "ci"
	case "function_call":
		prefix = "fc"
	case "reasoning":
		prefix = "rs"
	}
	return Random(prefix+"_", 50)
}
