package codeexec

import "strings"

// StatePath is where a container's bash session keeps its state between
// commands: in the sandbox's /tmp, which a gVisor checkpoint carries and
// the container's files (/mnt/data) do not list.
const StatePath = "/tmp/.codeinterp_bash_session"

// sessionPrologue runs before a command: the state the last command of
// this container left (its cwd, exported variables and functions) is
// sourced, and an EXIT trap saves the state again however the command
// ends, keeping its exit status. Only builtins run: each fork costs a
// trap into gVisor's sentry. A missing working directory (removed since)
// leaves the command in /mnt/data.
const sessionPrologue = `__ci_state=` + StatePath + `
if [ -r "$__ci_state" ]; then . "$__ci_state" >/dev/null 2>&1; fi
__ci_save() {
  { printf 'cd -- %q 2>/dev/null\n' "$PWD"; declare -px; declare -f; } >"$__ci_state" 2>/dev/null
}
trap '__ci_rc=$?; __ci_save; exit $__ci_rc' EXIT
`

// SessionCommand is command wrapped as one command of the container's bash
// session. The command is evaluated by the same shell (so `cd` and
// `export` last), quoted so that nothing in it is read before eval does.
func SessionCommand(command string) string {
	return sessionPrologue + "eval " + shellQuote(command) + "\n"
}

// shellQuote is s as one single-quoted bash word.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
