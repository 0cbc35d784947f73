package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/idgen"
	"github.com/codeinterp/codeinterp/internal/memlimit"
	"github.com/codeinterp/codeinterp/internal/netpolicy"
	"github.com/codeinterp/codeinterp/internal/skills"
	"github.com/codeinterp/codeinterp/internal/store"
)

// createContainer is POST /v1/containers.
func (s *Server) createContainer(w http.ResponseWriter, r *http.Request, owner string) {
	body, e := readJSONObject(w, r)
	if e != nil {
		writeError(w, e)
		return
	}
	c := store.Container{
		ID: idgen.New("cntr_"), Owner: owner,
		ExpiresAfterMinutes: s.cfg.DefaultExpiryMinutes, MemoryLimit: memlimit.Default, Origin: store.OriginAPI,
	}
	var fileIDs []string
	var network *egress.Policy // its secrets stay out of the store (Config.Secrets)
	var skillEntries []json.RawMessage
	hasName := false
	for _, k := range sortedKeys(body) {
		v := body[k]
		if string(v) == "null" {
			continue
		}
		switch k {
		case "name":
			if err := json.Unmarshal(v, &c.Name); err != nil {
				writeError(w, invalidType(k, "a string", v))
				return
			}
			hasName = c.Name != ""
		case "file_ids":
			if err := json.Unmarshal(v, &fileIDs); err != nil {
				writeError(w, invalidType(k, "an array of file ids", v))
				return
			}
			if len(fileIDs) > maxFileIDs {
				writeError(w, apierror.Invalid(k, "array_above_max_length", "Invalid '%s': expected at most %d file ids, but got %d.", k, maxFileIDs, len(fileIDs)))
				return
			}
		case "expires_after":
			m, e := s.parseExpiresAfter(v)
			if e != nil {
				writeError(w, e)
				return
			}
			c.ExpiresAfterMinutes = m
		case "memory_limit":
			var ml string
			if err := json.Unmarshal(v, &ml); err != nil {
				writeError(w, invalidType(k, "a string", v))
				return
			}
			if e := s.checkMemoryLimit(ml); e != nil {
				writeError(w, e)
				return
			}
			c.MemoryLimit = ml
		case "network_policy":
			// The container's for life: no endpoint changes it.
			pol, e := s.cfg.Network.Parse(gjson.ParseBytes(v), k)
			if e != nil {
				writeError(w, e)
				return
			}
			if pol != nil && len(pol.Secrets) > 0 && s.cfg.Secrets == nil {
				writeError(w, apierror.Invalid(k+".domain_secrets", "unsupported_parameter", "Invalid '%s.domain_secrets': this server cannot hold domain secrets for containers made through this API.", k))
				return
			}
			network = pol
			c.Network = netpolicy.Stored(pol)
		case "skills":
			if err := json.Unmarshal(v, &skillEntries); err != nil {
				writeError(w, invalidType(k, "an array of skills", v))
				return
			}
			if len(skillEntries) > 0 && s.cfg.Skills == nil {
				writeError(w, apierror.Invalid(k, "unsupported_parameter", "Skills are not available on this server: '%s' must be empty.", k))
				return
			}
		default:
			writeError(w, apierror.Invalid(k, "unknown_parameter", "Unknown parameter: '%s'.", k))
			return
		}
	}
	if !hasName {
		writeError(w, apierror.Invalid("name", "missing_required_parameter", "Missing required parameter: 'name'."))
		return
	}
	// Fetch every file before anything is stored, so a bad id leaves no
	// container behind.
	files, e := s.fetchFiles(r, "file_ids", fileIDs)
	if e != nil {
		writeError(w, e)
		return
	}
	now := s.now().Unix()
	c.CreatedAt, c.LastActiveAt = now, now
	if len(skillEntries) > 0 {
		// Resolved (inline ones stored) before the container exists, so a
		// bad entry leaves no container behind.
		sk, err := skills.Resolve(r.Context(), s.cfg.Skills, owner, c.ID, skillEntries, "skills")
		if err != nil {
			s.storeError(w, r, err, "skills", "skill", "")
			return
		}
		c.Skills = sk
	}
	create := s.st.PutContainer
	if s.cfg.Create != nil {
		create = s.cfg.Create
	}
	if err := create(r.Context(), c); err != nil {
		s.forgetSkills(r, c)
		s.storeError(w, r, err, "", "container", c.ID)
		return
	}
	for _, f := range files {
		_, err := s.st.PutFile(r.Context(), store.File{
			ID: idgen.New("cfile_"), Owner: owner, ContainerID: c.ID, Path: "/mnt/data/" + f.name,
			Filename: f.name, CreatedAt: now, Source: "user",
		}, f.data)
		if err != nil {
			// The request failed: the container must not stay half-filled.
			_ = s.st.DeleteContainer(r.Context(), owner, c.ID)
			s.forgetSkills(r, c)
			s.storeError(w, r, err, "file_ids", "file", f.id)
			return
		}
	}
	if network != nil && len(network.Secrets) > 0 {
		s.cfg.Secrets.KeepSecrets(owner, c.ID, network.Secrets)
	}
	writeJSON(w, http.StatusOK, containerJSON(c, s.now()))
}

// forgetSkills deletes the inline skills of a container that was not
// made or was deleted.
func (s *Server) forgetSkills(r *http.Request, c store.Container) {
	if s.cfg.Skills != nil && len(c.Skills) > 0 {
		ctx := context.WithoutCancel(r.Context())
		skills.Forget(ctx, s.cfg.Skills, c.Owner, skills.Inline(ctx, s.cfg.Skills, c))
	}
}

// fetched is a file named by id, ready to be copied into a container.
type fetched struct {
	id, name string // name: <file_id>-<filename>, as OpenAI mounts them
	data     []byte
}

// fetchFiles resolves file ids through the configured source.
func (s *Server) fetchFiles(r *http.Request, param string, ids []string) ([]fetched, *apierror.Error) {
	if len(ids) == 0 {
		return nil, nil
	}
	if s.fetcher == nil {
		return nil, apierror.Invalid(param, "unsupported_parameter", "Files API files are not available on this server (files.source: off): '%s' cannot be used.", param)
	}
	out := make([]fetched, 0, len(ids))
	for _, id := range ids {
		if !store.ValidID(id) {
			return nil, apierror.NotFound(param, "", "No file found with id '%s'.", id)
		}
		name, data, err := s.fetcher.FetchFile(r.Context(), r, id)
		if err != nil {
			return nil, fetchError(err, param, id)
		}
		out = append(out, fetched{id: id, name: store.AttachedName(id, name), data: data})
	}
	return out, nil
}

func fetchError(err error, param, id string) *apierror.Error {
	var q *store.QuotaError
	var fe *FetchError
	switch {
	case errors.Is(err, store.ErrNotFound):
		return apierror.NotFound(param, "", "No file found with id '%s'.", id)
	case errors.As(err, &q):
		e := quotaError(q)
		e.Param = param
		return e
	case errors.As(err, &fe):
		return &apierror.Error{Status: http.StatusBadGateway, Type: apierror.TypeServer, Param: param,
			Message: fmt.Sprintf("The upstream Files API answered HTTP %d for file '%s'.", fe.Status, id)}
	}
	return &apierror.Error{Status: http.StatusBadGateway, Type: apierror.TypeServer, Param: param,
		Message: fmt.Sprintf("File '%s' could not be fetched from the Files API.", id)}
}

func (s *Server) parseExpiresAfter(v json.RawMessage) (int, *apierror.Error) {
	var ea map[string]json.RawMessage
	if err := json.Unmarshal(v, &ea); err != nil {
		return 0, invalidType("expires_after", "an object", v)
	}
	for _, k := range sortedKeys(ea) {
		if k != "anchor" && k != "minutes" {
			return 0, apierror.Invalid("expires_after."+k, "unknown_parameter", "Unknown parameter: 'expires_after.%s'.", k)
		}
	}
	var anchor string
	if a, ok := ea["anchor"]; !ok {
		return 0, apierror.Invalid("expires_after.anchor", "missing_required_parameter", "Missing required parameter: 'expires_after.anchor'.")
	} else if err := json.Unmarshal(a, &anchor); err != nil || anchor != "last_active_at" {
		return 0, apierror.Invalid("expires_after.anchor", "invalid_value", "Invalid value for 'expires_after.anchor': expected 'last_active_at'.")
	}
	m, ok := ea["minutes"]
	if !ok {
		return 0, apierror.Invalid("expires_after.minutes", "missing_required_parameter", "Missing required parameter: 'expires_after.minutes'.")
	}
	n, err := strconv.Atoi(string(m))
	if err != nil {
		return 0, invalidType("expires_after.minutes", "an integer", m)
	}
	if n < 1 || n > s.cfg.MaxExpiryMinutes {
		return 0, apierror.Invalid("expires_after.minutes", "invalid_value",
			"Invalid value for 'expires_after.minutes': expected an integer between 1 and %d, but got %d.", s.cfg.MaxExpiryMinutes, n)
	}
	return n, nil
}

// checkMemoryLimit accepts OpenAI's values up to the operator's maximum.
// The default ("1g") is always accepted: it is what an omitted value
// means, and the smallest choice OpenAI offers.
func (s *Server) checkMemoryLimit(ml string) *apierror.Error {
	var allowed []string
	for _, m := range memlimit.Choices() {
		if m.Bytes <= s.cfg.MaxMemoryLimit || m.Name == memlimit.Default {
			allowed = append(allowed, m.Name)
			if m.Name == ml {
				return nil
			}
		}
	}
	return apierror.Invalid("memory_limit", "invalid_value", "Invalid value for 'memory_limit': %q is not one of %s (this server's maximum).",
		ml, strings.Join(allowed, ", "))
}

// listContainers is GET /v1/containers.
func (s *Server) listContainers(w http.ResponseWriter, r *http.Request, owner string) {
	o, e := listOptions(r, 20, 100)
	if e != nil {
		writeError(w, e)
		return
	}
	o.Name = r.URL.Query().Get("name")
	page, more, err := s.st.ListContainers(r.Context(), owner, o)
	if err != nil {
		s.storeError(w, r, err, "after", "container", o.After)
		return
	}
	now := s.now()
	data := make([]containerObject, len(page))
	for i, c := range page {
		data[i] = containerJSON(c, now)
	}
	writeJSON(w, http.StatusOK, newList(data, func(c containerObject) string { return c.ID }, more))
}

// getContainer is GET /v1/containers/{id}. Retrieving is a use: it
// refreshes last_active_at. An expired container the store still
// remembers is shown with status "expired".
func (s *Server) getContainer(w http.ResponseWriter, r *http.Request, owner string) {
	id := r.PathValue("id")
	if !store.ValidID(id) {
		s.storeError(w, r, store.ErrNotFound, "container_id", "container", id)
		return
	}
	c, err := s.st.TouchContainer(r.Context(), owner, id, s.now())
	if errors.Is(err, store.ErrExpired) {
		c, err = s.st.GetContainer(r.Context(), owner, id)
	}
	if err != nil {
		s.storeError(w, r, err, "container_id", "container", id)
		return
	}
	writeJSON(w, http.StatusOK, containerJSON(c, s.now()))
}

// deleteContainer is DELETE /v1/containers/{id}; expired containers can
// be deleted too.
func (s *Server) deleteContainer(w http.ResponseWriter, r *http.Request, owner string) {
	id := r.PathValue("id")
	if !store.ValidID(id) {
		s.storeError(w, r, store.ErrNotFound, "container_id", "container", id)
		return
	}
	c, _ := s.st.GetContainer(r.Context(), owner, id) // for its inline skills
	if err := s.st.DeleteContainer(r.Context(), owner, id); err != nil {
		s.storeError(w, r, err, "container_id", "container", id)
		return
	}
	s.forgetSkills(r, c)
	if s.cfg.Secrets != nil {
		s.cfg.Secrets.Deleted(context.WithoutCancel(r.Context()), owner, id)
	}
	writeJSON(w, http.StatusOK, deletedObject{ID: id, Object: "container.deleted", Deleted: true})
}

// useContainer touches a container before one of its files is used: 404
// if unknown, 400 "Container is expired." if expired.
func (s *Server) useContainer(w http.ResponseWriter, r *http.Request, owner, id string) bool {
	if !store.ValidID(id) {
		s.storeError(w, r, store.ErrNotFound, "container_id", "container", id)
		return false
	}
	if _, err := s.st.TouchContainer(r.Context(), owner, id, s.now()); err != nil {
		s.storeError(w, r, err, "container_id", "container", id)
		return false
	}
	return true
}

// listOptions reads limit, order and after.
func listOptions(r *http.Request, defLimit, maxLimit int) (store.ListOptions, *apierror.Error) {
	q := r.URL.Query()
	o := store.ListOptions{Limit: defLimit, Order: "desc", After: q.Get("after")}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > maxLimit {
			return o, apierror.Invalid("limit", "invalid_value", "Invalid 'limit': expected an integer between 1 and %d, but got %q.", maxLimit, l)
		}
		o.Limit = n
	}
	if v := q.Get("order"); v != "" {
		if v != "asc" && v != "desc" {
			return o, apierror.Invalid("order", "invalid_value", "Invalid value for 'order': expected 'asc' or 'desc', but got %q.", v)
		}
		o.Order = v
	}
	return o, nil
}

// readJSONObject reads a bounded JSON object body.
func readJSONObject(w http.ResponseWriter, r *http.Request) (map[string]json.RawMessage, *apierror.Error) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBytes))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, apierror.TooLarge("", "request_too_large", "The request body exceeds %d bytes.", mbe.Limit)
	case err != nil:
		return nil, apierror.Invalid("", "invalid_body", "The request body could not be read.")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil || m == nil {
		return nil, apierror.Invalid("", "invalid_json", "We could not parse the JSON body of your request. (HINT: the body must be a JSON object, sent with Content-Type: application/json.)")
	}
	return m, nil
}

func invalidType(param, want string, got json.RawMessage) *apierror.Error {
	return apierror.Invalid(param, "invalid_type", "Invalid type for '%s': expected %s, but got %s instead.", param, want, jsonKind(got))
}

func jsonKind(v json.RawMessage) string {
	s := strings.TrimSpace(string(v))
	if s == "" {
		return "nothing"
	}
	switch s[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
