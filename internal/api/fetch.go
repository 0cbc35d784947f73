package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/codeinterp/codeinterp/internal/store"
)

// FileFetcher resolves a Files API id (container file_ids, uploads by
// file_id) to its filename and bytes, as the caller of r may see it: r
// carries the credential. A missing or foreign file is an error wrapping
// store.ErrNotFound; one over the bound a *store.QuotaError.
type FileFetcher interface {
	FetchFile(ctx context.Context, r *http.Request, id string) (name string, data []byte, err error)
}

// StoreFetcher reads Files API files from the store (files.source: local).
type StoreFetcher struct {
	Store       store.Store
	AuthHeaders []string
	Now         func() time.Time
}

// FetchFile implements FileFetcher.
func (f StoreFetcher) FetchFile(ctx context.Context, r *http.Request, id string) (string, []byte, error) {
	owner, _ := store.Owner(r.Header, f.AuthHeaders) // the interceptor refused the anonymous unless they share one
	meta, err := f.Store.GetFile(ctx, owner, "", id)
	if err != nil {
		return "", nil, fmt.Errorf("file %s: %w", id, err)
	}
	if meta.ExpiresAt != 0 && f.Now != nil && meta.ExpiresAt <= f.Now().Unix() {
		return "", nil, fmt.Errorf("file %s expired: %w", id, store.ErrNotFound)
	}
	data, err := f.Store.FileContent(ctx, owner, "", id)
	if err != nil {
		return "", nil, fmt.Errorf("file %s: %w", id, err)
	}
	return meta.Filename, data, nil
}

// FetchError is an upstream Files API answer other than 200 or 404.
type FetchError struct {
	Status int
}

func (e *FetchError) Error() string { return fmt.Sprintf("upstream files API: HTTP %d", e.Status) }

// HTTPFetcher reads files from the upstream's Files API (files.source:
// upstream): GET {base}/files/{id} for the name, then
// GET {base}/files/{id}/content, with the caller's credential headers.
type HTTPFetcher struct {
	base     *url.URL
	headers  []string
	maxBytes int64
	client   *http.Client
}

// NewHTTPFetcher returns a fetcher for the API at baseURL (such as
// https://api.openai.com/v1), forwarding the named credential headers
// (plus OpenAI's organization and project headers) and refusing files over
// maxBytes. A nil client means one with a 60s timeout.
func NewHTTPFetcher(baseURL string, headers []string, maxBytes int64, client *http.Client) (*HTTPFetcher, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("api: the upstream Files API URL %q is not an absolute http(s) URL", baseURL)
	}
	if client == nil {
		client = &http.Client{Timeout: 60 * time.Second}
	}
	h := append(append([]string(nil), headers...), "openai-organization", "openai-project")
	return &HTTPFetcher{base: u, headers: h, maxBytes: maxBytes, client: client}, nil
}

// FetchFile implements FileFetcher.
func (f *HTTPFetcher) FetchFile(ctx context.Context, r *http.Request, id string) (string, []byte, error) {
	meta, err := f.get(ctx, r, id, "")
	if err != nil {
		return "", nil, err
	}
	var obj struct {
		Filename string `json:"filename"`
	}
	if err := json.Unmarshal(meta, &obj); err != nil || obj.Filename == "" {
		return "", nil, fmt.Errorf("file %s: the upstream Files API sent no filename: %w", id, &FetchError{Status: http.StatusOK})
	}
	name, e := uploadName(obj.Filename, store.MaxNameBytes)
	if e != nil {
		return "", nil, fmt.Errorf("file %s: unusable filename %q: %w", id, obj.Filename, &FetchError{Status: http.StatusOK})
	}
	data, err := f.get(ctx, r, id, "/content")
	if err != nil {
		return "", nil, err
	}
	return name, data, nil
}

func (f *HTTPFetcher) get(ctx context.Context, r *http.Request, id, suffix string) ([]byte, error) {
	u := *f.base
	u.Path = strings.TrimSuffix(u.Path, "/") + "/files/" + url.PathEscape(id) + suffix
	u.RawPath = ""
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("file %s: %w", id, err)
	}
	for _, h := range f.headers {
		for _, v := range r.Header.Values(h) {
			req.Header.Add(h, v)
		}
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("file %s: upstream files API: %w", id, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, fmt.Errorf("file %s upstream: %w", id, store.ErrNotFound)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("file %s: %w", id, &FetchError{Status: resp.StatusCode})
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, f.maxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("file %s: reading the upstream answer: %w", id, err)
	}
	if int64(len(data)) > f.maxBytes {
		return nil, fmt.Errorf("file %s: %w", id, &store.QuotaError{Limit: store.LimitFileBytes, Max: f.maxBytes})
	}
	return data, nil
}
