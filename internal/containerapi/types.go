package containerapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/codeinterp/codeinterp/internal/allowlist"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/store"
)

// Spec is what a request declared about its container.
type Spec struct {
	// Owner is the caller (store.Owner of its credential): containers and
	// files of another owner do not exist for it.
	Owner string
	// Header is the caller's request headers (see interceptor.Caller).
	Header http.Header
	// ID is an explicit container id ("container": "cntr_…").
	ID string
	// Reuse lists the container ids of replayed code_interpreter_call
	// items, newest first: with "auto", the first one still alive is used.
	Reuse []string
	// FileIDs are Files API files copied into a new container as
	// /mnt/data/<file_id>-<filename>.
	FileIDs []string
	// MemoryBytes is the container's memory_limit (0: the default).
	MemoryBytes int64
	// Inputs are the request's input_file parts, copied into the container.
	Inputs []InputFile
	// Network is an auto container's network_policy allowlist (nil: none).
	// It is the new container's for life; a container named by ID keeps
	// its own, and a replayed one (Reuse) is reused only when its policy is
	// the same (none, or the same domains and secrets; a request naming
	// the same secrets gives a container whose secrets were lost them
	// again).
	Network *allowlist.Policy
	// Skills are a new auto container's skills entries (skill_reference,
	// inline) as the request has them, named SkillsParam in a refusal; a
	// container named by ID or reused keeps its own.
	Skills      []json.RawMessage
	SkillsParam string
}

// InputFile is one input_file part of a request: inline bytes with a name,
// or a Files API file id.
type InputFile struct {
	Filename string
	Data     []byte
	FileID   string
}

// Container is one container as a response uses it.
type Container interface {
	// ID is the container's id, "cntr_…", as the Containers API lists it.
	ID() string
	// Files lists the files in /mnt/data, for the model.
	Files(ctx context.Context) ([]File, error)
	// Run runs code in the container's interpreter (starting one with the
	// container's files if none is held), then stores the files the run
	// created or changed and its images as container files.
	Run(ctx context.Context, code string) (RunResult, error)
	// Shell runs the hosted shell's commands in the container's sandbox
	// (as Run: its files before and after, the same interpreter's
	// processes, limits and network; never its Python state). The result's
	// Commands has one entry per command. A provider without a shell
	// fails with sandbox.ErrNoShell.
	Shell(ctx context.Context, req sandbox.ShellRequest) (RunResult, error)
	// Skills are the skills mounted in the container (at
	// skills.MountPath(name)), for telling the model.
	Skills() []store.ContainerSkill
	// Network is the container's network_policy allowlist, for telling
	// the model what its code may reach: the domains and each secret's
	// domain and name, never a value (nil: no network).
	Network() *allowlist.Policy
	// Close ends this response's use; the container and its files stay.
	Close() error
}

// File is a file of a container.
type File struct {
	ID       string // "cfile_…"
	Path     string // /mnt/data/…
	Filename string // the base name
	Bytes    int64
}

// RunResult is one run in a container.
type RunResult struct {
	sandbox.Result
	// Reset is set when the run started a fresh interpreter in a container
	// that existed before this response: its files are there, its
	// variables are not.
	Reset bool
	// Behind is set when the run's interpreter was restored from a
	// checkpoint taken before the container's last runs (the server that
	// held it died before it checkpointed them): its variables are those
	// of that checkpoint, and what the last runs set may be missing.
	Behind bool
	// Changed are the files the run created or changed, as stored.
	Changed []File
	// Images are the run's images as stored container files, in the order
	// of Result.Images.
	Images []File
}

// Errors Manager.Open returns for what the client named (errors.Is).
var (
	ErrNotFound     = errors.New("container not found")
	ErrExpired      = errors.New("container expired")
	ErrFileNotFound = errors.New("file not found")
)

// ErrSecretsLost is matched by a run's error when the container was made
// with domain secrets that this server does not hold: they live only in
// the memory of the server that made the container, which has restarted
// since (or another replica made it). Such a container runs no code until
// a request resupplies the same policy (an auto container replaying it,
// as a conversation's next turn does: samePolicy); one named by id cannot
// carry a policy, so its caller makes a new container. It never runs
// without its secrets.
var ErrSecretsLost = errors.New("containers: the container's domain secrets are not held by this server (they live only in the memory of the server that created it, and are lost when it restarts)")

// ErrUnavailable is matched by a run's error when the container cannot run
// now and nothing of the run was kept: the store that decides which
// replica holds it could not be asked or refused, its holder could not be
// reached before its lease expired, its checkpoint could not be read, or
// its holder lost the lease during the run (the run's effects were
// discarded with the interpreter). Nothing ran, or what ran is gone: the
// client may retry the request (a 503 in OpenAI's error shape).
var ErrUnavailable = errors.New("the container is temporarily unavailable")
