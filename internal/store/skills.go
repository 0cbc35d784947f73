package store

import (
	"context"
	"errors"
)

// Skill is one skill of OpenAI's Skills API: a name and description (its
// default version's SKILL.md front matter) and numbered versions. Like
// containers it belongs to an owner.
type Skill struct {
	ID          string `json:"id"` // "skill_…"
	Owner       string `json:"owner"`
	Name        string `json:"name"`
	Description string `json:"description"`
	CreatedAt   int64  `json:"created_at"` // Unix seconds
	// DefaultVersion is what a reference without a version mounts;
	// LatestVersion the highest version number it has.
	DefaultVersion int `json:"default_version"`
	LatestVersion  int `json:"latest_version"`
	// Container is set for an inline skill (a container's "inline" entry):
	// it belongs to that container, is never listed, and the Skills API
	// does not show it.
	Container string `json:"container,omitempty"`
}

// SkillVersion is one version of a skill; its bytes are the canonical zip
// (package skills).
type SkillVersion struct {
	ID          string `json:"id"` // "skillver_…"
	SkillID     string `json:"skill_id"`
	Version     int    `json:"version"` // 1, 2, … in creation order
	Name        string `json:"name"`
	Description string `json:"description"`
	CreatedAt   int64  `json:"created_at"`
	Bytes       int64  `json:"bytes"` // the zip's
}

// SkillLimits bound what a Skills store holds; a zero bound is none.
type SkillLimits struct {
	Skills     int   // skills of one owner (inline ones too)
	Versions   int   // versions of one skill
	OwnerBytes int64 // all version zips of one owner
}

// DefaultSkillLimits are the documented defaults.
func DefaultSkillLimits() SkillLimits {
	return SkillLimits{Skills: 200, Versions: 100, OwnerBytes: 1 << 30}
}

// Skills keeps skills, their versions and the versions' bytes, so that
// every replica sharing the store serves and mounts them.
// Implementations are safe for concurrent use; each method is atomic.
// Another owner's skill does not exist (ErrNotFound); a version a skill
// does not have is ErrNoVersion.
type Skills interface {
	// CreateSkill stores a new skill with its first version (v.Version
	// is set to 1, the skill's default and latest). Past a SkillLimits
	// bound it is a *QuotaError and nothing is stored.
	CreateSkill(ctx context.Context, s Skill, v SkillVersion, zip []byte) (Skill, SkillVersion, error)
	// GetSkill returns a skill.
	GetSkill(ctx context.Context, owner, id string) (Skill, error)
	// ListSkills lists the owner's skills that belong to no container
	// (ListOptions: Limit, Order by creation, After a skill id; an unknown
	// After is an empty page).
	ListSkills(ctx context.Context, owner string, o ListOptions) (page []Skill, hasMore bool, err error)
	// SetDefaultVersion makes version the skill's default; its name and
	// description become that version's.
	SetDefaultVersion(ctx context.Context, owner, id string, version int) (Skill, error)
	// DeleteSkill removes a skill, every version and their bytes.
	DeleteSkill(ctx context.Context, owner, id string) error
	// AddVersion stores the next version (latest + 1; v.Version is set),
	// the default too when makeDefault.
	AddVersion(ctx context.Context, owner, id string, v SkillVersion, zip []byte, makeDefault bool) (SkillVersion, Skill, error)
	// GetVersion returns one version.
	GetVersion(ctx context.Context, owner, id string, version int) (SkillVersion, error)
	// ListVersions lists a skill's versions (by version number; After a
	// version's ID).
	ListVersions(ctx context.Context, owner, id string, o ListOptions) (page []SkillVersion, hasMore bool, err error)
	// DeleteVersion removes one version and its bytes. The default
	// version is ErrDefaultVersion (make another the default first, or
	// delete the skill); deleting the latest makes the highest left the
	// latest.
	DeleteVersion(ctx context.Context, owner, id string, version int) error
	// VersionContent returns a version's zip.
	VersionContent(ctx context.Context, owner, id string, version int) ([]byte, error)
}

// Errors of Skills (errors.Is).
var (
	ErrNoVersion      = errors.New("store: no such skill version")
	ErrDefaultVersion = errors.New("store: the default version of a skill cannot be deleted")
)
