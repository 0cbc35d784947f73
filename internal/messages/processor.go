package messages

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/tidwall/gjson"
	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/codeexec"
	"github.com/codeinterp/codeinterp/internal/containerapi"
	"github.com/codeinterp/codeinterp/internal/hostedtool"
	"github.com/codeinterp/codeinterp/internal/processor"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/skills"
	"github.com/codeinterp/codeinterp/internal/store"
)

// Config is the Messages processor's part of the operator configuration.
type Config struct {
	// MaxRounds bounds the follow-up inferences of one request; past it
	// the message ends with stop_reason "pause_turn", as Anthropic's does
	// when its server tools' loop stops. Default 16.
	MaxRounds int
	// Limits bound each call (the sandbox's run timeout and stdout bound).
	Limits codeexec.Limits
	// MaxBodyBytes bounds a follow-up's answer. Default 16 MiB.
	MaxBodyBytes int
	// ContainerExpiry is how long after its last use a container expires
	// (api: expires_after's default), for the message's container.expires_at.
	// Default 20 minutes.
	ContainerExpiry time.Duration
	// PingEvery is how often a live stream gets a ping while a call runs.
	// Default 2 s.
	PingEvery time.Duration
	// Environment is the sandbox's, for the tools' descriptions.
	Environment sandbox.Environment
	// Key binds the ids of the calls this server makes (history replays
	// are checked against it); replicas must share it. Empty: a random key
	// of this process (history from before a restart is then refused).
	Key []byte
}

func (c Config) withDefaults() Config {
	if c.MaxRounds <= 0 {
		c.MaxRounds = 16
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 16 << 20
	}
	if c.ContainerExpiry <= 0 {
		c.ContainerExpiry = 20 * time.Minute
	}
	if c.PingEvery <= 0 {
		c.PingEvery = 2 * time.Second
	}
	return c
}

// Containers is where a request's calls run (package containers implements
// it, as for the Responses API: the same containers, scoped to the owner).
type Containers interface {
	Open(ctx context.Context, spec containerapi.Spec) (containerapi.Container, error)
}

// Processor is the /v1/messages endpoint's processor.Processor.
type Processor struct {
	cfg      Config
	ctrs     Containers
	hasShell bool
	key      []byte
	// tools are the hosted tools by function name (hostedtool's seam).
	tools map[string]hostedtool.Tool
	log   *zap.Logger
	now   func() time.Time
}

var _ processor.Processor = (*Processor)(nil)

// New is the Messages processor over ctrs. hasShell says the sandbox
// provider runs bash (gVisor); without it a request declaring code
// execution gets Anthropic's 400.
func New(cfg Config, ctrs Containers, hasShell bool, log *zap.Logger) (*Processor, error) {
	if ctrs == nil {
		return nil, errors.New("messages: containers are required")
	}
	if log == nil {
		log = zap.NewNop()
	}
	p := &Processor{cfg: cfg.withDefaults(), ctrs: ctrs, hasShell: hasShell, key: cfg.Key, log: log, now: time.Now, tools: map[string]hostedtool.Tool{}}
	for _, t := range codeexec.Tools(cfg.Limits) {
		p.tools[t.FunctionName()] = t
	}
	if len(p.key) == 0 {
		p.key = make([]byte, 32)
		_, _ = rand.Read(p.key)
	}
	return p, nil
}

// PassesThrough implements processor.Processor: a body without the tool's
// letters (and none of its blocks) needs nothing of this server.
func (p *Processor) PassesThrough(body []byte) bool { return !mayUse(body) }

// NewExchange implements processor.Processor. A refusal is an
// *apierror.Error the filter renders with ErrorBody.
func (p *Processor) NewExchange(ctx context.Context, caller processor.Caller, body []byte) (processor.Exchange, error) {
	req, apiErr := p.rewrite(caller.Owner, body)
	if apiErr != nil {
		return nil, apiErr
	}
	x := &Exchange{p: p, req: req, owner: caller.Owner}
	if !req.intercepted {
		return x, nil
	}
	if caller.Owner == "" {
		return nil, &apierror.Error{Status: http.StatusUnauthorized, Type: errorType(http.StatusUnauthorized), Message: NoCredentialMessage}
	}
	spec := containerapi.Spec{Owner: caller.Owner, Header: caller.Header, ID: req.containerID, Skills: req.skills, SkillsParam: skillsParam}
	for _, id := range req.uploads {
		spec.Inputs = append(spec.Inputs, containerapi.InputFile{FileID: id})
	}
	ctr, err := p.ctrs.Open(ctx, spec)
	if err != nil {
		return nil, p.openError(req, err)
	}
	x.ctr = ctr
	if req.containerID != "" && len(req.skills) > 0 {
		// A container's skills are fixed when it is made: naming one
		// with skills asks for those it mounts.
		if missing := missingSkill(req.skills, ctr.Skills()); missing != "" {
			_ = ctr.Close()
			return nil, invalid(fmt.Sprintf("%s: the container %s does not mount the skill %s; a container's skills are fixed when it is made (omit container.id for a new container with these skills)", skillsParam, req.containerID, missing))
		}
	}
	if sk := ctr.Skills(); len(sk) > 0 {
		// As the Responses API's model is: each skill's name,
		// description and path, in the user's context.
		m := make([]skills.Mounted, len(sk))
		for i, s := range sk {
			m[i] = skills.Mounted{Name: s.Name, Description: s.Description}
		}
		req.upstream = withNote(req.upstream, skills.Context(m))
	}
	if pol := ctr.Network(); pol != nil {
		// A container made with a network policy keeps it: the model
		// is told what its commands may reach.
		req.upstream = req.withNetwork(p, pol)
	}
	files, err := ctr.Files(ctx)
	if err != nil {
		_ = ctr.Close()
		p.log.Error("listing a container's files failed", zap.Error(err))
		return nil, &apierror.Error{Status: http.StatusServiceUnavailable, Type: errorType(http.StatusServiceUnavailable), Message: "The container's files could not be listed; retry the request."}
	}
	if len(files) > 0 {
		// As the code_interpreter side does: the model knows what the
		// container holds before its first command.
		req.upstream = withNote(req.upstream, "[Files in /mnt/data of the code execution container ("+ctr.ID()+"):\n"+containerapi.FileList(files)+"]")
	}
	return x, nil
}

// openError is the client's answer to a container that could not be
// opened.
func (p *Processor) openError(req *request, err error) *apierror.Error {
	switch {
	case errors.Is(err, containerapi.ErrNotFound):
		return &apierror.Error{Status: http.StatusNotFound, Type: errorType(http.StatusNotFound), Message: fmt.Sprintf("container: %s not found", req.containerID)}
	case errors.Is(err, containerapi.ErrExpired):
		return invalid(fmt.Sprintf("container: %s is expired", req.containerID))
	case errors.Is(err, containerapi.ErrFileNotFound):
		return &apierror.Error{Status: http.StatusNotFound, Type: errorType(http.StatusNotFound), Message: "container_upload: file not found: " + err.Error()}
	case errors.Is(err, containerapi.ErrUnavailable):
		return &apierror.Error{Status: http.StatusServiceUnavailable, Type: errorType(http.StatusServiceUnavailable), Message: "The container is temporarily unavailable; retry the request."}
	}
	var ae *apierror.Error
	if errors.As(err, &ae) {
		return ae
	}
	p.log.Error("opening a container failed", zap.Error(err))
	return &apierror.Error{Status: http.StatusInternalServerError, Type: errorType(http.StatusInternalServerError), Message: "The container could not be opened."}
}

// missingSkill is the first skill_id of refs that mounted lacks, or "".
func missingSkill(refs []json.RawMessage, mounted []store.ContainerSkill) string {
	have := map[string]bool{}
	for _, s := range mounted {
		have[s.SkillID] = true
	}
	for _, r := range refs {
		if id := gjson.GetBytes(r, "skill_id").Str; !have[id] {
			return id
		}
	}
	return ""
}
