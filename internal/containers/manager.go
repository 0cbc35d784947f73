package containers

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/memlimit"
	"github.com/codeinterp/codeinterp/internal/netpolicy"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/store"
)

// DataDir is where a container's files are, for the code.
const DataDir = "/mnt/data"

// Config tunes the manager.
type Config struct {
	// ExpiryMinutes is a new container's expires_after (default 20).
	ExpiryMinutes int
	// AutoName is the name of containers made by {"type": "auto"}.
	AutoName string
	// MaxFileBytes bounds one file read back from an interpreter.
	MaxFileBytes int64
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time
	// Files resolves file_ids (and input_file file ids) as the caller may
	// see them, from the caller's request headers: api.NewFetcher's
	// fetcher for the operator's files.source, so /v1/responses and the
	// Containers API agree. Nil means file ids are disabled.
	Files FileFetcher
	// Checkpoints keeps interpreters' state beyond this process
	// (checkpoint.Keeper); nil: none is kept.
	Checkpoints Checkpoints
	// CheckpointAfter is how long an interpreter that ran code stays idle
	// before its state is checkpointed in the background (turns that come
	// faster are coalesced into one); 0: only before an eviction and at
	// Close.
	CheckpointAfter time.Duration
	// RestoreExpired revives a container used after its expiry, with its
	// files and its checkpoint (kept store.Limits.ExpiredKeep), instead of
	// ErrExpired (OpenAI's "Container is expired."): opt-in.
	RestoreExpired bool
	// Placement gives each container one holder among the replicas
	// sharing the store (cluster.Node), and forwards runs to it; nil:
	// this server runs every container's code itself.
	Placement Placement
	// Usage accounts each container made as a code interpreter session of
	// its owner (by memory_limit); nil: not accounted.
	Usage store.Usage
	// SecretsCheck is how often, with Placement, the domain secrets held
	// here are checked against the store (ForgetDeleted): a container
	// another replica deleted loses them here within that time. Default
	// DefaultSecretsCheck.
	SecretsCheck time.Duration
	// Skills keeps the skills containers mount (skills.go); nil: a
	// container_auto with skills is refused.
	Skills store.Skills
}

// FileFetcher reads a Files API file for the caller of r (api.FileFetcher).
// A missing or foreign file is an error matching store.ErrNotFound.
type FileFetcher interface {
	FetchFile(ctx context.Context, r *http.Request, id string) (name string, data []byte, err error)
}

// Manager implements interceptor.Containers.
type Manager struct {
	cfg      Config
	st       store.Store
	provider sandbox.Provider
	log      *zap.Logger

	mu   sync.Mutex
	held map[string]*held // container id → its interpreter
	idle *list.List       // of *held not in use, least recently used first
	// claims counts the responses that have a container open, from before
	// it is looked up or created until the response closes it: such a
	// container is in use even before its first run, and never deleted to
	// make room (Create).
	claims map[string]int
	// secrets are the domain secrets of containers with a network policy,
	// by container id: only here, in this process's memory, for the
	// container's life (never in the store, which keeps their domains and
	// names). A server restart loses them; policy then refuses to open an
	// interpreter for such a container (ErrSecretsLost) until a request
	// resupplies them (samePolicy).
	// A container deleted on another replica loses them here at the
	// next ForgetDeleted.
	secrets map[string]keptSecrets
	// saving marks containers whose interpreter is being checkpointed
	// before it closes: their next interpreter waits for that checkpoint.
	saving map[string]chan struct{}
	// bgCheckpoint admits one background checkpoint at a time.
	bgCheckpoint chan struct{}
	// stopChecks ends the secrets' checks (Close); nil without them.
	stopChecks context.CancelFunc
	// trim is closed when the trim in flight (headroom.go) has closed its
	// interpreter; nil: none in flight. trims counts the trims not done.
	trim  chan struct{}
	trims sync.WaitGroup
}

// New returns a manager over st and provider.
func New(cfg Config, st store.Store, provider sandbox.Provider, log *zap.Logger) *Manager {
	if cfg.ExpiryMinutes <= 0 {
		cfg.ExpiryMinutes = 20
	}
	if cfg.AutoName == "" {
		cfg.AutoName = "code-interpreter"
	}
	if cfg.MaxFileBytes <= 0 {
		cfg.MaxFileBytes = 64 << 20
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if log == nil {
		log = zap.NewNop()
	}
	m := &Manager{cfg: cfg, st: st, provider: provider, log: log, held: map[string]*held{}, idle: list.New(), claims: map[string]int{},
		secrets: map[string]keptSecrets{}, saving: map[string]chan struct{}{},
		bgCheckpoint: make(chan struct{}, 1)}
	if cfg.Placement != nil {
		every := cfg.SecretsCheck
		if every <= 0 {
			every = DefaultSecretsCheck
		}
		ctx, stop := context.WithCancel(context.Background())
		m.stopChecks = stop
		go m.checkSecrets(ctx, every)
	}
	return m
}

// DefaultSecretsCheck is Config.SecretsCheck's default.
const DefaultSecretsCheck = 10 * time.Second

// Open implements interceptor.Containers. The container it returns stays
// claimed (in use) until its Close.
func (m *Manager) Open(ctx context.Context, spec Spec) (Container, error) {
	var claimed []string
	claim := func(id string) {
		m.claim(id)
		claimed = append(claimed, id)
	}
	c, err := m.open(ctx, spec, claim)
	for _, id := range claimed {
		if c == nil || id != c.meta.ID {
			m.unclaim(id)
		}
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// claim marks id in use by a response until unclaim: it is not deleted
// to make room meanwhile (Create).
func (m *Manager) claim(id string) {
	m.mu.Lock()
	m.claims[id]++
	m.mu.Unlock()
}

func (m *Manager) unclaim(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.claims[id]--; m.claims[id] <= 0 {
		delete(m.claims, id)
	}
}

// open looks up or makes the container; claim is called with each id
// before it is looked up or stored, so no other response can delete it
// meanwhile.
func (m *Manager) open(ctx context.Context, spec Spec, claim func(string)) (*container, error) {
	now := m.cfg.Now()
	var c store.Container
	fresh := false
	switch {
	case spec.ID != "":
		claim(spec.ID)
		got, err := m.use(ctx, spec.Owner, spec.ID, now)
		if err != nil {
			return nil, err
		}
		c = got
	default:
		// A container keeps its network policy for life: only one with
		// the same policy as the spec's (none, or the same domains and
		// secrets) is reused.
		for _, id := range spec.Reuse {
			claim(id)
			if got, err := m.use(ctx, spec.Owner, id, now); err == nil && m.samePolicy(got, spec.Network) {
				c = got
				break
			}
		}
		if c.ID == "" {
			c = store.Container{
				ID: idgen.New("cntr_"), Owner: spec.Owner, Name: m.cfg.AutoName, Origin: store.OriginAuto,
				CreatedAt: now.Unix(), LastActiveAt: now.Unix(), ExpiresAfterMinutes: m.cfg.ExpiryMinutes,
				MemoryLimit: memoryString(spec.MemoryBytes), Network: netpolicy.Stored(spec.Network),
			}
			claim(c.ID)
			sk, err := m.resolveSkills(ctx, c, spec)
			if err != nil {
				return nil, err
			}
			c.Skills = sk
			m.KeepSecrets(c.Owner, c.ID, secretsOf(spec.Network))
			if err := m.Create(ctx, c); err != nil {
				m.ForgetSecrets(c.ID)
				m.forgetSkills(ctx, c)
				return nil, fmt.Errorf("containers: create: %w", err)
			}
			fresh = true
			for _, fid := range spec.FileIDs {
				if err := m.copyFile(ctx, c, spec.Header, fid); err != nil {
					_ = m.st.DeleteContainer(ctx, c.Owner, c.ID) // nothing half-made stays
					m.forgetSkills(ctx, c)
					return nil, err
				}
			}
		}
	}
	for _, in := range spec.Inputs {
		if err := m.addInput(ctx, c, spec.Header, in); err != nil {
			if fresh {
				_ = m.st.DeleteContainer(ctx, c.Owner, c.ID)
				m.forgetSkills(ctx, c)
			}
			return nil, err
		}
	}
	// OpenAI's default size ("1g") is the operator's default session
	// memory; a container made with a larger memory_limit gets that.
	mem := spec.MemoryBytes
	if mem == 0 && c.MemoryLimit != memlimit.Default {
		mem, _ = memlimit.Parse(c.MemoryLimit)
	}
	return &container{m: m, meta: c, fresh: fresh, memory: mem}, nil
}

// Create stores a new container — an auto one, or one made through the
// Containers API (api.Config.Create) — making room at the caller's
// owner_containers quota by deleting its least recently used auto container
// that no response has in use, as an expiry would have done later.
// Containers the caller made through the Containers API are never deleted
// this way: when only those fill the quota, the QuotaError stands. Every
// response of an auto tool makes a container, so a busy caller (one API
// key behind a whole application) reaches the quota long before the first
// ones expire.
func (m *Manager) Create(ctx context.Context, c store.Container) error {
	err := m.create(ctx, c)
	if err == nil && m.cfg.Usage != nil {
		mem := c.MemoryLimit
		if mem == "" {
			mem = "1g" // OpenAI's default memory_limit
		}
		d := store.UsageDelta{Sessions: 1, SessionsByMemory: map[string]int64{mem: 1}}
		if uerr := m.cfg.Usage.Add(context.WithoutCancel(ctx), c.Owner, time.Now(), d); uerr != nil {
			m.log.Warn("a session not accounted in the usage", zap.String("container_id", c.ID), zap.Error(uerr))
		}
	}
	return err
}

// create is Create without the accounting.
func (m *Manager) create(ctx context.Context, c store.Container) error {
	// Responses of one caller create at once: two can pick the same
	// container to delete, and only one of them then finds room. Whoever
	// finds none picks again, a bounded number of times.
	const attempts = 8
	for range attempts {
		err := m.st.PutContainer(ctx, c)
		var qe *store.QuotaError
		if !errors.As(err, &qe) || qe.Limit != store.LimitOwnerContainers {
			return err
		}
		oldest, lerr := m.leastRecentlyUsedAuto(ctx, c.Owner)
		if lerr != nil {
			return errors.Join(err, lerr)
		}
		if oldest.ID == "" {
			return err
		}
		m.log.Info("deleting the caller's least recently used auto container to make room", zap.String("container_id", oldest.ID))
		if derr := m.st.DeleteContainer(ctx, c.Owner, oldest.ID); derr != nil && !errors.Is(derr, store.ErrNotFound) {
			return errors.Join(err, derr)
		}
		m.drop(c.Owner, oldest.ID)
		m.forgetSkills(ctx, oldest)
	}
	return m.st.PutContainer(ctx, c)
}

// leastRecentlyUsedAuto is owner's auto container (one a response made:
// store.Container.Recyclable, never one that is only named like one) that
// was used least recently and that no response has in use; none has an
// empty ID.
func (m *Manager) leastRecentlyUsedAuto(ctx context.Context, owner string) (store.Container, error) {
	var oldest store.Container
	after := ""
	for {
		page, more, err := m.st.ListContainers(ctx, owner, store.ListOptions{Limit: 100, Order: "asc", After: after})
		if err != nil {
			return store.Container{}, err
		}
		for _, o := range page {
			if o.Recyclable() && (oldest.ID == "" || o.LastActiveAt < oldest.LastActiveAt) && !m.inUse(o.ID) {
				oldest = o
			}
		}
		if !more || len(page) == 0 {
			return oldest, nil
		}
		after = page[len(page)-1].ID
	}
}

// inUse reports whether a response has the container open or is using
// its interpreter.
func (m *Manager) inUse(cid string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, ok := m.held[cid]
	return m.claims[cid] > 0 || ok && h.users > 0
}

// use looks a container up for owner and refreshes its expiry.
func (m *Manager) use(ctx context.Context, owner, id string, now time.Time) (store.Container, error) {
	c, err := m.touch(ctx, owner, id, now)
	switch {
	case errors.Is(err, store.ErrNotFound):
		// Not this owner's (or gone): nothing of what this server holds
		// for the id is touched — it may be another owner's container,
		// whose secrets a guess of its id must not drop.
		return c, fmt.Errorf("%w: %s", ErrNotFound, id)
	case errors.Is(err, store.ErrExpired):
		m.drop(owner, id)
		return c, fmt.Errorf("%w: %s", ErrExpired, id)
	case err != nil:
		return c, fmt.Errorf("containers: %w", err)
	}
	return c, nil
}

// touch refreshes a container's expiry; with RestoreExpired an expired
// one whose files are kept is revived.
func (m *Manager) touch(ctx context.Context, owner, id string, now time.Time) (store.Container, error) {
	c, err := m.st.TouchContainer(ctx, owner, id, now)
	if !m.cfg.RestoreExpired || !errors.Is(err, store.ErrExpired) {
		return c, err
	}
	if c, err = m.st.ReviveContainer(ctx, owner, id, now); err == nil {
		m.log.Info("an expired container was used again: restored with its files and checkpoint", zap.String("container_id", id))
	}
	return c, err
}

// copyFile copies a Files API file into c as /mnt/data/<file_id>-<filename>.
func (m *Manager) copyFile(ctx context.Context, c store.Container, header http.Header, fileID string) error {
	filename, data, err := m.fetch(ctx, header, fileID)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: %s", ErrFileNotFound, fileID)
	}
	if err != nil {
		return fmt.Errorf("containers: file %s: %w", fileID, err)
	}
	name := store.AttachedName(fileID, safeName(filename))
	_, err = m.st.PutFile(ctx, store.File{
		ID: idgen.New("cfile_"), Owner: c.Owner, ContainerID: c.ID, Path: path.Join(DataDir, name),
		Filename: name, CreatedAt: m.cfg.Now().Unix(), Source: "user",
	}, data)
	if err != nil {
		return fmt.Errorf("containers: copy %s: %w", fileID, err)
	}
	return nil
}

// fetch reads a Files API file with the caller's credential.
func (m *Manager) fetch(ctx context.Context, header http.Header, fileID string) (string, []byte, error) {
	if m.cfg.Files == nil {
		return "", nil, fmt.Errorf("file ids are disabled on this server (files.source: off): %w", store.ErrNotFound)
	}
	return m.cfg.Files.FetchFile(ctx, &http.Request{Header: header}, fileID)
}

func (m *Manager) addInput(ctx context.Context, c store.Container, header http.Header, in InputFile) error {
	if in.FileID != "" {
		return m.copyFile(ctx, c, header, in.FileID)
	}
	name := safeName(in.Filename)
	_, err := m.st.PutFile(ctx, store.File{
		ID: idgen.New("cfile_"), Owner: c.Owner, ContainerID: c.ID, Path: path.Join(DataDir, name),
		Filename: name, CreatedAt: m.cfg.Now().Unix(), Source: "user",
	}, in.Data)
	if err != nil {
		return fmt.Errorf("containers: input file %s: %w", name, err)
	}
	return nil
}

// safeName is a file name's base without NUL ("file" when none is left):
// names are checked where they arrive, this is the last guard.
func safeName(name string) string {
	name = strings.ReplaceAll(store.BaseName(name), "\x00", "")
	if name == "" || name == "." || name == ".." {
		name = "file"
	}
	return name
}

// memoryString is OpenAI's memory_limit spelling of b ("4g"); the default
// for 0.
func memoryString(b int64) string {
	if b <= 0 {
		return memlimit.Default
	}
	return memlimit.Format(b)
}
