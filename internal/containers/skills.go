package containers

import (
	"context"
	"errors"
	"fmt"
	"path"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/skills"
	"github.com/codeinterp/codeinterp/internal/store"
)

// A container's skills (store.Container.Skills) are fixed when it is
// made — POST /v1/containers' skills, or a container_auto's — and kept in
// its record, their zips in the Skills store: so whichever replica holds
// the container's interpreter mounts them, after a restart, an eviction
// or a checkpoint's restore alike.
//
// They are written into each interpreter once per generation (a fresh
// one has none; a restored one has them from its checkpoint's /tmp, and
// gets the store's copy again), at skills.MountPath(name), before the
// container's files. The sandbox user owns its scratch space, so the
// folder cannot be made read-only inside it: what code changes there is
// never stored and the store's copy comes back with the next interpreter.

// resolveSkills resolves a new auto container's skills entries.
func (m *Manager) resolveSkills(ctx context.Context, c store.Container, spec Spec) ([]store.ContainerSkill, error) {
	if len(spec.Skills) == 0 {
		return nil, nil
	}
	if m.cfg.Skills == nil {
		return nil, apierror.Invalid(spec.SkillsParam, "unsupported_parameter", "Skills are not available on this server: '%s' must be empty.", spec.SkillsParam)
	}
	return skills.Resolve(ctx, m.cfg.Skills, c.Owner, c.ID, spec.Skills, spec.SkillsParam)
}

// forgetSkills deletes a container's inline skills (a container that was
// not made, or was deleted).
func (m *Manager) forgetSkills(ctx context.Context, c store.Container) {
	if m.cfg.Skills == nil || len(c.Skills) == 0 {
		return
	}
	skills.Forget(context.WithoutCancel(ctx), m.cfg.Skills, c.Owner, skills.Inline(ctx, m.cfg.Skills, c))
}

// Skills implements Container.
func (c *container) Skills() []store.ContainerSkill { return c.meta.Skills }

// mountSkills writes the container's skills into h's interpreter unless
// its generation has them already.
func (c *container) mountSkills(ctx context.Context, h *held) error {
	if len(c.meta.Skills) == 0 {
		return nil
	}
	if h.skillsGen != 0 && h.skillsGen == h.sess.Generation() {
		return nil
	}
	if c.m.cfg.Skills == nil {
		return errors.New("containers: the container has skills and this server keeps none (no skills store)")
	}
	for _, s := range c.meta.Skills {
		data, err := c.m.cfg.Skills.VersionContent(ctx, c.meta.Owner, s.SkillID, s.Version)
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrNoVersion) {
			// Deleted since the container was made: it is not mounted,
			// and the model is not told of it (Skills lists it still).
			c.m.log.Info("a container's skill is gone", zap.String("container_id", c.meta.ID), zap.String("skill_id", s.SkillID), zap.Int("version", s.Version))
			continue
		}
		if err != nil {
			return fmt.Errorf("containers: read skill %s version %d: %w", s.SkillID, s.Version, err)
		}
		b, apiErr := skills.ReadZip(data, "skills")
		if apiErr != nil {
			return fmt.Errorf("containers: skill %s version %d: %s", s.SkillID, s.Version, apiErr.Message)
		}
		dir := skills.MountPath(s.Name)
		for _, f := range b.Files {
			if err := h.sess.WriteFile(ctx, path.Join(dir, f.Path), f.Data); err != nil {
				return fmt.Errorf("containers: mount skill %s at %s: %w", s.Name, dir, err)
			}
		}
	}
	h.skillsGen = h.sess.Generation()
	return nil
}
