package memory

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/internal/storeutil"
)

// Skills is the in-process store.Skills: right for one replica (another
// replica does not see its skills; use store/redis for several). One
// mutex guards maps keyed by owner; stored bytes are never changed in
// place, so reads hand them out without copying.
type Skills struct {
	limits store.SkillLimits
	now    func() time.Time

	mu     sync.Mutex
	owners map[string]*skillOwner
}

var _ store.Skills = (*Skills)(nil)

type skillOwner struct {
	skills map[string]*skillEntry
	bytes  int64
}

type skillEntry struct {
	rec  storeutil.SkillRecord
	data map[int][]byte // version → zip
}

// NewSkills returns an empty store bounded by l; now gives CreatedAt
// when a skill or version has none (nil: time.Now).
func NewSkills(l store.SkillLimits, now func() time.Time) *Skills {
	if now == nil {
		now = time.Now
	}
	return &Skills{limits: l, now: now, owners: map[string]*skillOwner{}}
}

// Close releases nothing (the store holds no outside resources).
func (s *Skills) Close() error { return nil }

func (s *Skills) owner(o string) *skillOwner {
	ow := s.owners[o]
	if ow == nil {
		ow = &skillOwner{skills: map[string]*skillEntry{}}
		s.owners[o] = ow
	}
	return ow
}

// get is the owner's skill id; the caller holds mu.
func (s *Skills) get(owner, id string) (*skillOwner, *skillEntry, error) {
	ow := s.owners[owner]
	if ow == nil || ow.skills[id] == nil {
		return nil, nil, store.ErrNotFound
	}
	return ow, ow.skills[id], nil
}

func (s *Skills) CreateSkill(_ context.Context, sk store.Skill, v store.SkillVersion, zip []byte) (store.Skill, store.SkillVersion, error) {
	rec, v, err := storeutil.NewSkill(sk, v, int64(len(zip)), s.now().Unix())
	if err != nil {
		return sk, v, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ow := s.owner(sk.Owner)
	switch {
	case ow.skills[sk.ID] != nil:
		return sk, v, store.ErrExists
	case s.limits.Skills > 0 && len(ow.skills) >= s.limits.Skills:
		return sk, v, &store.QuotaError{Limit: "owner_skills", Max: int64(s.limits.Skills)}
	case s.limits.OwnerBytes > 0 && ow.bytes+int64(len(zip)) > s.limits.OwnerBytes:
		return sk, v, &store.QuotaError{Limit: "owner_skill_bytes", Max: s.limits.OwnerBytes}
	}
	ow.skills[sk.ID] = &skillEntry{rec: rec, data: map[int][]byte{1: slices.Clone(zip)}}
	ow.bytes += int64(len(zip))
	return rec.Skill, v, nil
}

func (s *Skills) GetSkill(_ context.Context, owner, id string) (store.Skill, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, e, err := s.get(owner, id)
	if err != nil {
		return store.Skill{}, err
	}
	return e.rec.Skill, nil
}

func (s *Skills) ListSkills(_ context.Context, owner string, o store.ListOptions) ([]store.Skill, bool, error) {
	o, err := o.Normalize()
	if err != nil {
		return nil, false, err
	}
	s.mu.Lock()
	var all []store.Skill
	if ow := s.owners[owner]; ow != nil {
		for _, e := range ow.skills {
			if e.rec.Skill.Container == "" {
				all = append(all, e.rec.Skill)
			}
		}
	}
	s.mu.Unlock()
	page, more := storeutil.Page(all, storeutil.SkillLess, func(k store.Skill) string { return k.ID }, o)
	return page, more, nil
}

func (s *Skills) SetDefaultVersion(_ context.Context, owner, id string, version int) (store.Skill, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, e, err := s.get(owner, id)
	if err != nil {
		return store.Skill{}, err
	}
	rec := e.rec
	rec.Versions = slices.Clone(rec.Versions)
	if err := rec.SetDefault(version); err != nil {
		return store.Skill{}, err
	}
	e.rec = rec
	return rec.Skill, nil
}

func (s *Skills) DeleteSkill(_ context.Context, owner, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ow, e, err := s.get(owner, id)
	if err != nil {
		return err
	}
	ow.bytes -= e.rec.Bytes()
	delete(ow.skills, id)
	return nil
}

func (s *Skills) AddVersion(_ context.Context, owner, id string, v store.SkillVersion, zip []byte, makeDefault bool) (store.SkillVersion, store.Skill, error) {
	if v.CreatedAt == 0 {
		v.CreatedAt = s.now().Unix()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ow, e, err := s.get(owner, id)
	if err != nil {
		return v, store.Skill{}, err
	}
	if s.limits.OwnerBytes > 0 && ow.bytes+int64(len(zip)) > s.limits.OwnerBytes {
		return v, store.Skill{}, &store.QuotaError{Limit: "owner_skill_bytes", Max: s.limits.OwnerBytes}
	}
	rec := e.rec
	rec.Versions = slices.Clone(rec.Versions)
	v, err = rec.AddVersion(v, int64(len(zip)), makeDefault, s.limits)
	if err != nil {
		return v, store.Skill{}, err
	}
	e.rec = rec
	e.data[v.Version] = slices.Clone(zip)
	ow.bytes += int64(len(zip))
	return v, rec.Skill, nil
}

func (s *Skills) GetVersion(_ context.Context, owner, id string, version int) (store.SkillVersion, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, e, err := s.get(owner, id)
	if err != nil {
		return store.SkillVersion{}, err
	}
	return e.rec.Version(version)
}

func (s *Skills) ListVersions(_ context.Context, owner, id string, o store.ListOptions) ([]store.SkillVersion, bool, error) {
	o, err := o.Normalize()
	if err != nil {
		return nil, false, err
	}
	s.mu.Lock()
	_, e, err := s.get(owner, id)
	var all []store.SkillVersion
	if err == nil {
		all = e.rec.Versions
	}
	s.mu.Unlock()
	if err != nil {
		return nil, false, err
	}
	page, more := storeutil.Page(all, storeutil.VersionLess, func(v store.SkillVersion) string { return v.ID }, o)
	return page, more, nil
}

func (s *Skills) DeleteVersion(_ context.Context, owner, id string, version int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ow, e, err := s.get(owner, id)
	if err != nil {
		return err
	}
	rec := e.rec
	rec.Versions = slices.Clone(rec.Versions)
	v, err := rec.DeleteVersion(version)
	if err != nil {
		return err
	}
	e.rec = rec
	delete(e.data, version)
	ow.bytes -= v.Bytes
	return nil
}

func (s *Skills) VersionContent(_ context.Context, owner, id string, version int) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, e, err := s.get(owner, id)
	if err != nil {
		return nil, err
	}
	data, ok := e.data[version]
	if !ok {
		return nil, store.ErrNoVersion
	}
	return data, nil
}
