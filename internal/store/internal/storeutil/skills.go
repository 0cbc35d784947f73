package storeutil

import (
	"fmt"
	"slices"

	"github.com/codeinterp/codeinterp/internal/store"
)

// SkillRecord is one skill with its versions' metadata, sorted by
// version: what both stores keep of a skill besides the versions' bytes,
// changed by the functions below so that both change it alike.
type SkillRecord struct {
	Skill    store.Skill          `json:"skill"`
	Versions []store.SkillVersion `json:"versions"`
}

// Version returns version n.
func (r *SkillRecord) Version(n int) (store.SkillVersion, error) {
	i, ok := slices.BinarySearchFunc(r.Versions, n, func(v store.SkillVersion, n int) int { return v.Version - n })
	if !ok {
		return store.SkillVersion{}, store.ErrNoVersion
	}
	return r.Versions[i], nil
}

// NewSkill is the record of a new skill whose first version is v. A
// skill or version without a creation time is created now (Unix seconds),
// the version when its skill is.
func NewSkill(s store.Skill, v store.SkillVersion, size, now int64) (SkillRecord, store.SkillVersion, error) {
	if !store.ValidID(s.ID) || !store.ValidID(v.ID) || s.Owner == "" {
		return SkillRecord{}, v, fmt.Errorf("store: invalid skill %q or version id %q", s.ID, v.ID)
	}
	if s.CreatedAt == 0 {
		s.CreatedAt = now
	}
	if v.CreatedAt == 0 {
		v.CreatedAt = s.CreatedAt
	}
	v.SkillID, v.Version, v.Bytes = s.ID, 1, size
	s.DefaultVersion, s.LatestVersion = 1, 1
	s.Name, s.Description = v.Name, v.Description
	return SkillRecord{Skill: s, Versions: []store.SkillVersion{v}}, v, nil
}

// AddVersion appends the next version, the default too when makeDefault.
func (r *SkillRecord) AddVersion(v store.SkillVersion, size int64, makeDefault bool, l store.SkillLimits) (store.SkillVersion, error) {
	if !store.ValidID(v.ID) {
		return v, fmt.Errorf("store: invalid skill version id %q", v.ID)
	}
	if l.Versions > 0 && len(r.Versions) >= l.Versions {
		return v, &store.QuotaError{Limit: "skill_versions", Max: int64(l.Versions)}
	}
	v.SkillID, v.Version, v.Bytes = r.Skill.ID, r.Skill.LatestVersion+1, size
	r.Versions = append(r.Versions, v)
	r.Skill.LatestVersion = v.Version
	if makeDefault {
		r.setDefault(v)
	}
	return v, nil
}

// SetDefault makes version n the default.
func (r *SkillRecord) SetDefault(n int) error {
	v, err := r.Version(n)
	if err != nil {
		return err
	}
	r.setDefault(v)
	return nil
}

func (r *SkillRecord) setDefault(v store.SkillVersion) {
	r.Skill.DefaultVersion, r.Skill.Name, r.Skill.Description = v.Version, v.Name, v.Description
}

// DeleteVersion removes version n and returns it.
func (r *SkillRecord) DeleteVersion(n int) (store.SkillVersion, error) {
	v, err := r.Version(n)
	if err != nil {
		return v, err
	}
	if n == r.Skill.DefaultVersion {
		return v, store.ErrDefaultVersion
	}
	r.Versions = slices.DeleteFunc(r.Versions, func(x store.SkillVersion) bool { return x.Version == n })
	r.Skill.LatestVersion = r.Versions[len(r.Versions)-1].Version
	return v, nil
}

// Bytes is the size of all the record's versions.
func (r *SkillRecord) Bytes() int64 {
	var n int64
	for _, v := range r.Versions {
		n += v.Bytes
	}
	return n
}

// Page is one page of items sorted ascending by less, in o's order (o
// normalised), starting after the item whose id is o.After (unknown: an
// empty page).
func Page[T any](items []T, less func(a, b T) bool, id func(T) string, o store.ListOptions) ([]T, bool) {
	items = slices.Clone(items)
	slices.SortFunc(items, func(a, b T) int {
		switch {
		case less(a, b):
			return -1
		case less(b, a):
			return 1
		}
		return 0
	})
	if o.Order == "desc" {
		slices.Reverse(items)
	}
	if o.After != "" {
		i := slices.IndexFunc(items, func(t T) bool { return id(t) == o.After })
		if i < 0 {
			return nil, false
		}
		items = items[i+1:]
	}
	if len(items) > o.Limit {
		return items[:o.Limit], true
	}
	return items, false
}

// SkillLess orders skills by creation, then id; VersionLess versions by
// number.
func SkillLess(a, b store.Skill) bool { return Less(a.CreatedAt, a.ID, b.CreatedAt, b.ID) }

// VersionLess orders versions by number.
func VersionLess(a, b store.SkillVersion) bool { return a.Version < b.Version }
