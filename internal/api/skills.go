package api

import (
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/skills"
	"github.com/codeinterp/codeinterp/internal/store"
)

// This file is OpenAI's Skills API (/v1/skills…) over Config.Skills:
// uploads checked by package skills and kept as its canonical zip.

// skillObject is OpenAI's skill; versions are strings, as OpenAI's are.
type skillObject struct {
	ID             string `json:"id"`
	Object         string `json:"object"`
	Name           string `json:"name"`
	Description    string `json:"description"`
	CreatedAt      int64  `json:"created_at"`
	DefaultVersion string `json:"default_version"`
	LatestVersion  string `json:"latest_version"`
}

// skillVersionObject is OpenAI's skill.version.
type skillVersionObject struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	SkillID     string `json:"skill_id"`
	Version     string `json:"version"`
	Name        string `json:"name"`
	Description string `json:"description"`
	CreatedAt   int64  `json:"created_at"`
}

type deletedSkillVersion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Deleted bool   `json:"deleted"`
	Version string `json:"version"`
}

func skillJSON(k store.Skill) skillObject {
	return skillObject{ID: k.ID, Object: "skill", Name: k.Name, Description: k.Description, CreatedAt: k.CreatedAt,
		DefaultVersion: strconv.Itoa(k.DefaultVersion), LatestVersion: strconv.Itoa(k.LatestVersion)}
}

func skillVersionJSON(v store.SkillVersion) skillVersionObject {
	return skillVersionObject{ID: v.ID, Object: "skill.version", SkillID: v.SkillID, Version: strconv.Itoa(v.Version),
		Name: v.Name, Description: v.Description, CreatedAt: v.CreatedAt}
}

// skillUploadSlack covers the part headers of a folder's files.
const skillUploadSlack = skills.MaxFiles*1024 + multipartSlack

// readSkillUpload reads a multipart body of "files" parts (or "files[]",
// as openai-go names an array) and the named fields, and checks the
// upload (skills.FromUpload).
func readSkillUpload(w http.ResponseWriter, r *http.Request, fields ...string) (skills.Bundle, map[string]string, *apierror.Error) {
	if mediaType(r) != "multipart/form-data" {
		return skills.Bundle{}, nil, apierror.Invalid("files", "invalid_content_type", "Unsupported Content-Type %q: send multipart/form-data with 'files' (one zip, or a folder's files).", r.Header.Get("Content-Type"))
	}
	limit := int64(max(skills.MaxZipBytes, skills.MaxTotalBytes)) + skillUploadSlack
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	mr, err := r.MultipartReader()
	if err != nil {
		return skills.Bundle{}, nil, apierror.Invalid("files", "invalid_multipart", "The multipart/form-data body could not be parsed: %v.", err)
	}
	readErr := func(param string, err error) *apierror.Error {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return apierror.TooLarge("files", "file_too_large", "The upload exceeds the skills' limit of %d bytes.", limit)
		}
		return apierror.Invalid(param, "invalid_multipart", "The multipart/form-data body is malformed: %v.", err)
	}
	var parts []skills.Part
	vals := map[string]string{}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return skills.Bundle{}, nil, readErr("files", err)
		}
		name := part.FormName()
		switch {
		case name == "files" || name == "files[]":
			if len(parts) == skills.MaxFiles {
				return skills.Bundle{}, nil, apierror.Invalid("files", "too_many_files", "A skill holds at most %d files.", skills.MaxFiles)
			}
			data, err := io.ReadAll(io.LimitReader(part, skills.MaxZipBytes+1))
			if err != nil {
				return skills.Bundle{}, nil, readErr("files", err)
			}
			if len(data) > skills.MaxZipBytes {
				return skills.Bundle{}, nil, apierror.Invalid("files", "file_too_large", "An uploaded file is larger than %d bytes.", skills.MaxZipBytes)
			}
			parts = append(parts, skills.Part{Filename: rawFilename(part.Header.Get("Content-Disposition")), Data: data})
		case contains(fields, name):
			v, err := io.ReadAll(io.LimitReader(part, maxFieldBytes+1))
			if err != nil {
				return skills.Bundle{}, nil, readErr(name, err)
			}
			vals[name] = string(v)
		default:
			return skills.Bundle{}, nil, apierror.Invalid(name, "unknown_parameter", "Unknown parameter: '%s'.", name)
		}
	}
	b, e := skills.FromUpload(parts, "files")
	return b, vals, e
}

// versionNumber is a version given as a JSON string ("2") or integer
// (2); 0 when it is neither.
func versionNumber(raw json.RawMessage) int {
	var str string
	if json.Unmarshal(raw, &str) == nil {
		n, err := strconv.Atoi(str)
		if err != nil {
			return 0
		}
		return n
	}
	var n int
	if json.Unmarshal(raw, &n) != nil {
		return 0
	}
	return n
}

// rawFilename is a part's filename as the client sent it: with its
// folders, which mime/multipart's FileName drops (a folder's files are
// told apart by them). Its checks are package skills'.
func rawFilename(cd string) string {
	_, params, err := mime.ParseMediaType(cd)
	if err != nil {
		return ""
	}
	return params["filename"]
}

// createSkill is POST /v1/skills.
func (s *Server) createSkill(w http.ResponseWriter, r *http.Request, owner string) {
	b, _, e := readSkillUpload(w, r)
	if e != nil {
		writeError(w, e)
		return
	}
	z, err := skills.Zip(b)
	if err != nil {
		s.storeError(w, r, err, "files", "skill", "")
		return
	}
	now := s.now().Unix()
	k, _, err := s.cfg.Skills.CreateSkill(r.Context(), store.Skill{ID: idgen.New("skill_"), Owner: owner, CreatedAt: now},
		store.SkillVersion{ID: idgen.New("skillver_"), Name: b.Name, Description: b.Description, CreatedAt: now}, z)
	if err != nil {
		s.storeError(w, r, err, "files", "skill", "")
		return
	}
	writeJSON(w, http.StatusOK, skillJSON(k))
}

// skill is the caller's skill named by the path; an inline skill (a
// container's) is not the Skills API's and does not exist there.
func (s *Server) skill(w http.ResponseWriter, r *http.Request, owner string) (store.Skill, bool) {
	id := r.PathValue("id")
	k, err := s.cfg.Skills.GetSkill(r.Context(), owner, id)
	if err == nil && k.Container != "" {
		err = store.ErrNotFound
	}
	if err != nil {
		s.storeError(w, r, err, "skill_id", "skill", id)
		return k, false
	}
	return k, true
}

// version parses the path's version: a positive integer, or "latest".
func (s *Server) version(w http.ResponseWriter, r *http.Request, k store.Skill) (int, bool) {
	v := r.PathValue("version")
	if v == "latest" {
		return k.LatestVersion, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		writeError(w, apierror.Invalid("version", "invalid_value", "Invalid value for 'version': expected a positive integer or 'latest', got %q.", v))
		return 0, false
	}
	return n, true
}

func (s *Server) versionError(w http.ResponseWriter, r *http.Request, err error, k store.Skill, n int) {
	switch {
	case errors.Is(err, store.ErrNoVersion):
		writeError(w, apierror.NotFound("version", "", "Skill '%s' has no version %d.", k.ID, n))
	case errors.Is(err, store.ErrDefaultVersion):
		writeError(w, apierror.Invalid("version", "invalid_value", "Version %d is the skill's default_version and cannot be deleted: make another version the default first, or delete the skill.", n))
	default:
		s.storeError(w, r, err, "skill_id", "skill", k.ID)
	}
}

func (s *Server) getSkill(w http.ResponseWriter, r *http.Request, owner string) {
	if k, ok := s.skill(w, r, owner); ok {
		writeJSON(w, http.StatusOK, skillJSON(k))
	}
}

func (s *Server) listSkills(w http.ResponseWriter, r *http.Request, owner string) {
	o, e := listOptions(r, store.DefaultListLimit, store.MaxListLimit)
	if e != nil {
		writeError(w, e)
		return
	}
	page, more, err := s.cfg.Skills.ListSkills(r.Context(), owner, o)
	if err != nil {
		s.storeError(w, r, err, "after", "skill", o.After)
		return
	}
	data := make([]skillObject, len(page))
	for i, k := range page {
		data[i] = skillJSON(k)
	}
	writeJSON(w, http.StatusOK, newList(data, func(o skillObject) string { return o.ID }, more))
}

// updateSkill is POST /v1/skills/{id}: {"default_version": "2"} (a
// number is accepted too).
func (s *Server) updateSkill(w http.ResponseWriter, r *http.Request, owner string) {
	body, e := readJSONObject(w, r)
	if e != nil {
		writeError(w, e)
		return
	}
	var n int
	for _, k := range sortedKeys(body) {
		if k != "default_version" {
			writeError(w, apierror.Invalid(k, "unknown_parameter", "Unknown parameter: '%s'.", k))
			return
		}
		n = versionNumber(body[k])
		if n < 1 {
			writeError(w, apierror.Invalid(k, "invalid_value", "Invalid value for 'default_version': expected a version number, got %s.", body[k]))
			return
		}
	}
	if n == 0 {
		writeError(w, apierror.Invalid("default_version", "missing_required_parameter", "Missing required parameter: 'default_version'."))
		return
	}
	k, ok := s.skill(w, r, owner)
	if !ok {
		return
	}
	k, err := s.cfg.Skills.SetDefaultVersion(r.Context(), owner, k.ID, n)
	if err != nil {
		s.versionError(w, r, err, k, n)
		return
	}
	writeJSON(w, http.StatusOK, skillJSON(k))
}

func (s *Server) deleteSkill(w http.ResponseWriter, r *http.Request, owner string) {
	k, ok := s.skill(w, r, owner)
	if !ok {
		return
	}
	if err := s.cfg.Skills.DeleteSkill(r.Context(), owner, k.ID); err != nil {
		s.storeError(w, r, err, "skill_id", "skill", k.ID)
		return
	}
	writeJSON(w, http.StatusOK, deletedObject{ID: k.ID, Object: "skill.deleted", Deleted: true})
}

// skillContent is GET /v1/skills/{id}/content: the default version's zip.
func (s *Server) skillContent(w http.ResponseWriter, r *http.Request, owner string) {
	if k, ok := s.skill(w, r, owner); ok {
		s.sendVersion(w, r, owner, k, k.DefaultVersion)
	}
}

func (s *Server) sendVersion(w http.ResponseWriter, r *http.Request, owner string, k store.Skill, n int) {
	data, err := s.cfg.Skills.VersionContent(r.Context(), owner, k.ID, n)
	if err != nil {
		s.versionError(w, r, err, k, n)
		return
	}
	w.Header().Set("Content-Type", "application/zip")
	w.Header().Set("Content-Disposition", ContentDisposition(k.Name+".zip"))
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}

// createSkillVersion is POST /v1/skills/{id}/versions (files, default).
func (s *Server) createSkillVersion(w http.ResponseWriter, r *http.Request, owner string) {
	k, ok := s.skill(w, r, owner)
	if !ok {
		return
	}
	b, vals, e := readSkillUpload(w, r, "default")
	if e != nil {
		writeError(w, e)
		return
	}
	makeDefault := false
	if d, ok := vals["default"]; ok {
		switch d {
		case "true":
			makeDefault = true
		case "false":
		default:
			writeError(w, apierror.Invalid("default", "invalid_value", "Invalid value for 'default': expected true or false, got %q.", d))
			return
		}
	}
	z, err := skills.Zip(b)
	if err != nil {
		s.storeError(w, r, err, "files", "skill", k.ID)
		return
	}
	v, _, err := s.cfg.Skills.AddVersion(r.Context(), owner, k.ID,
		store.SkillVersion{ID: idgen.New("skillver_"), Name: b.Name, Description: b.Description, CreatedAt: s.now().Unix()}, z, makeDefault)
	if err != nil {
		s.storeError(w, r, err, "skill_id", "skill", k.ID)
		return
	}
	writeJSON(w, http.StatusOK, skillVersionJSON(v))
}

func (s *Server) listSkillVersions(w http.ResponseWriter, r *http.Request, owner string) {
	k, ok := s.skill(w, r, owner)
	if !ok {
		return
	}
	o, e := listOptions(r, store.DefaultListLimit, store.MaxListLimit)
	if e != nil {
		writeError(w, e)
		return
	}
	page, more, err := s.cfg.Skills.ListVersions(r.Context(), owner, k.ID, o)
	if err != nil {
		s.storeError(w, r, err, "skill_id", "skill", k.ID)
		return
	}
	data := make([]skillVersionObject, len(page))
	for i, v := range page {
		data[i] = skillVersionJSON(v)
	}
	writeJSON(w, http.StatusOK, newList(data, func(o skillVersionObject) string { return o.ID }, more))
}

func (s *Server) getSkillVersion(w http.ResponseWriter, r *http.Request, owner string) {
	k, ok := s.skill(w, r, owner)
	if !ok {
		return
	}
	n, ok := s.version(w, r, k)
	if !ok {
		return
	}
	v, err := s.cfg.Skills.GetVersion(r.Context(), owner, k.ID, n)
	if err != nil {
		s.versionError(w, r, err, k, n)
		return
	}
	writeJSON(w, http.StatusOK, skillVersionJSON(v))
}

func (s *Server) deleteSkillVersion(w http.ResponseWriter, r *http.Request, owner string) {
	k, ok := s.skill(w, r, owner)
	if !ok {
		return
	}
	n, ok := s.version(w, r, k)
	if !ok {
		return
	}
	v, err := s.cfg.Skills.GetVersion(r.Context(), owner, k.ID, n)
	if err == nil {
		err = s.cfg.Skills.DeleteVersion(r.Context(), owner, k.ID, n)
	}
	if err != nil {
		s.versionError(w, r, err, k, n)
		return
	}
	writeJSON(w, http.StatusOK, deletedSkillVersion{ID: v.ID, Object: "skill.version.deleted", Deleted: true, Version: strconv.Itoa(n)})
}

func (s *Server) skillVersionContent(w http.ResponseWriter, r *http.Request, owner string) {
	k, ok := s.skill(w, r, owner)
	if !ok {
		return
	}
	if n, ok := s.version(w, r, k); ok {
		s.sendVersion(w, r, owner, k, n)
	}
}
