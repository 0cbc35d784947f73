package skills

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/store"
)

// MaxPerContainer is how many skills one container mounts (OpenAI's
// bound for container_auto.skills).
const MaxPerContainer = 200

// Resolve turns a request's skills entries — {"type":"skill_reference",
// "skill_id","version"} and {"type":"inline","name","description",
// "source":{"type":"base64","media_type":"application/zip","data"}} —
// into the versions container cid mounts. An inline skill is checked as
// an upload and stored as a skill of the container (store.Skill.Container),
// so every replica can mount it. A client's mistake is an *apierror.Error
// naming param[i]; a store failure is returned as it is. On any error the
// inline skills stored so far are deleted again.
func Resolve(ctx context.Context, st store.Skills, owner, cid string, entries []json.RawMessage, param string) (out []store.ContainerSkill, err error) {
	if len(entries) > MaxPerContainer {
		return nil, apierror.Invalid(param, "array_above_max_length", "Invalid '%s': expected at most %d skills, but got %d.", param, MaxPerContainer, len(entries))
	}
	var inline []string
	defer func() {
		if err != nil {
			Forget(context.WithoutCancel(ctx), st, owner, inline)
		}
	}()
	names := map[string]string{}
	for i, raw := range entries {
		p := param + "[" + strconv.Itoa(i) + "]"
		var head struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(raw, &head) != nil {
			return nil, apierror.Invalid(p, "invalid_type", "Invalid type for '%s': expected an object.", p)
		}
		var cs store.ContainerSkill
		switch head.Type {
		case "skill_reference":
			cs, err = reference(ctx, st, owner, raw, p)
		case "inline":
			cs, err = storeInline(ctx, st, owner, cid, raw, p)
			if err == nil {
				inline = append(inline, cs.SkillID)
			}
		default:
			return nil, apierror.Invalid(p+".type", "invalid_value", "Invalid value for '%s.type': expected 'skill_reference' or 'inline'.", p)
		}
		if err != nil {
			return nil, err
		}
		if prev, dup := names[cs.Name]; dup {
			return nil, apierror.Invalid(p, "invalid_value", "Invalid '%s': a container mounts one skill named '%s' (at %s), and %s names it too.", p, cs.Name, MountPath(cs.Name), prev)
		}
		names[cs.Name] = p
		out = append(out, cs)
	}
	return out, nil
}

// Forget deletes a container's inline skills (ContainerSkill ids of
// skills with Container set), best effort.
func Forget(ctx context.Context, st store.Skills, owner string, ids []string) {
	for _, id := range ids {
		_ = st.DeleteSkill(ctx, owner, id)
	}
}

// Inline are the ids of a container's inline skills.
func Inline(ctx context.Context, st store.Skills, c store.Container) []string {
	var ids []string
	for _, s := range c.Skills {
		if k, err := st.GetSkill(ctx, c.Owner, s.SkillID); err == nil && k.Container == c.ID {
			ids = append(ids, s.SkillID)
		}
	}
	return ids
}

func reference(ctx context.Context, st store.Skills, owner string, raw json.RawMessage, p string) (store.ContainerSkill, error) {
	var ref struct {
		Type    string          `json:"type"`
		SkillID string          `json:"skill_id"`
		Version json.RawMessage `json:"version"`
	}
	if err := strictDecode(raw, &ref); err != nil {
		return store.ContainerSkill{}, apierror.Invalid(p, "invalid_value", "Invalid '%s': %v.", p, err)
	}
	if ref.SkillID == "" {
		return store.ContainerSkill{}, apierror.Invalid(p+".skill_id", "missing_required_parameter", "Missing required parameter: '%s.skill_id'.", p)
	}
	k, err := st.GetSkill(ctx, owner, ref.SkillID)
	if err == nil && k.Container != "" {
		err = store.ErrNotFound // another container's inline skill is no skill of the API's
	}
	if errors.Is(err, store.ErrNotFound) {
		return store.ContainerSkill{}, apierror.NotFound(p+".skill_id", "", "No skill found with id '%s'.", ref.SkillID)
	}
	if err != nil {
		return store.ContainerSkill{}, err
	}
	n := k.DefaultVersion
	switch v := string(ref.Version); {
	case v == "" || v == "null":
	case v == `"latest"`:
		n = k.LatestVersion
	default:
		var s string
		if json.Unmarshal(ref.Version, &s) != nil {
			s = v
		}
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			return store.ContainerSkill{}, apierror.Invalid(p+".version", "invalid_value", "Invalid value for '%s.version': expected a positive integer or 'latest'.", p)
		}
	}
	ver, err := st.GetVersion(ctx, owner, k.ID, n)
	if errors.Is(err, store.ErrNoVersion) {
		return store.ContainerSkill{}, apierror.NotFound(p+".version", "", "Skill '%s' has no version %d.", k.ID, n)
	}
	if err != nil {
		return store.ContainerSkill{}, err
	}
	return store.ContainerSkill{SkillID: k.ID, Version: ver.Version, Name: ver.Name, Description: ver.Description}, nil
}

func storeInline(ctx context.Context, st store.Skills, owner, cid string, raw json.RawMessage, p string) (store.ContainerSkill, error) {
	var in struct {
		Type        string `json:"type"`
		Name        string `json:"name"`
		Description string `json:"description"`
		Source      struct {
			Type      string `json:"type"`
			MediaType string `json:"media_type"`
			Data      string `json:"data"`
		} `json:"source"`
	}
	if err := strictDecode(raw, &in); err != nil {
		return store.ContainerSkill{}, apierror.Invalid(p, "invalid_value", "Invalid '%s': %v.", p, err)
	}
	switch {
	case in.Source.Type != "base64":
		return store.ContainerSkill{}, apierror.Invalid(p+".source.type", "invalid_value", "Invalid value for '%s.source.type': expected 'base64'.", p)
	case in.Source.MediaType != "application/zip":
		return store.ContainerSkill{}, apierror.Invalid(p+".source.media_type", "invalid_value", "Invalid value for '%s.source.media_type': expected 'application/zip'.", p)
	case base64.StdEncoding.DecodedLen(len(in.Source.Data)) > MaxZipBytes+3:
		return store.ContainerSkill{}, apierror.Invalid(p+".source.data", "file_too_large", "The skill's zip is larger than %d bytes.", MaxZipBytes)
	}
	data, err := base64.StdEncoding.DecodeString(in.Source.Data)
	if err != nil {
		return store.ContainerSkill{}, apierror.Invalid(p+".source.data", "invalid_value", "Invalid value for '%s.source.data': the base64 data does not decode.", p)
	}
	b, apiErr := ReadZip(data, p+".source.data")
	if apiErr != nil {
		return store.ContainerSkill{}, apiErr
	}
	// The request's name and description are what the model is told; the
	// folder is the SKILL.md's name, which was checked as a path.
	if in.Name != "" && in.Name != b.Name {
		return store.ContainerSkill{}, apierror.Invalid(p+".name", "invalid_value", "Invalid value for '%s.name': the zip's SKILL.md names the skill '%s'.", p, b.Name)
	}
	desc := b.Description
	if in.Description != "" {
		desc = in.Description
	}
	z, err := Zip(b)
	if err != nil {
		return store.ContainerSkill{}, err
	}
	k, v, err := st.CreateSkill(ctx, store.Skill{ID: idgen.New("skill_"), Owner: owner, Container: cid},
		store.SkillVersion{ID: idgen.New("skillver_"), Name: b.Name, Description: desc}, z)
	if err != nil {
		var q *store.QuotaError
		if errors.As(err, &q) {
			return store.ContainerSkill{}, apierror.Invalid(p, "quota_exceeded", "The inline skill would exceed the server's %s limit of %d.", q.Limit, q.Max)
		}
		return store.ContainerSkill{}, err
	}
	return store.ContainerSkill{SkillID: k.ID, Version: v.Version, Name: v.Name, Description: v.Description}, nil
}

// strictDecode decodes an entry, refusing fields it does not know.
func strictDecode(raw json.RawMessage, v any) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	return d.Decode(v)
}
