package api_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.uber.org/zap/zaptest"

	"github.com/codeinterp/codeinterp/internal/api"
	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/memory"
)

// clock is a settable time shared by the API and the store.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Unix(1783564998, 0)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// env is one API server over a real store, reached over real HTTP.
type env struct {
	t     *testing.T
	url   string // http://127.0.0.1:port
	clock *clock
	store store.Store
}

// newEnv starts the API over store/memory; edit adjusts the config.
func newEnv(t *testing.T, edit func(*api.Config)) *env {
	t.Helper()
	ck := newClock()
	st := memory.New(store.DefaultLimits(), ck.Now)
	t.Cleanup(func() { _ = st.Close() })
	return newEnvStore(t, st, ck, edit)
}

func newEnvStore(t *testing.T, st store.Store, ck *clock, edit func(*api.Config)) *env {
	t.Helper()
	cfg := api.Config{MaxExpiryMinutes: 60, MaxMemoryLimit: 4 << 30, MaxUploadBytes: 1 << 20, Now: ck.Now}
	if edit != nil {
		edit(&cfg)
	}
	srv, err := api.New(cfg, st, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return &env{t: t, url: ts.URL, clock: ck, store: st}
}

// client is the official SDK pointed at the server with one credential.
func (e *env) client(key string) *openai.Client {
	c := openai.NewClient(option.WithBaseURL(e.url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
	return &c
}

// do sends a raw request with a bearer credential ("" for none) and
// returns the status, headers and body.
func (e *env) do(method, path, key, contentType string, body io.Reader) (int, http.Header, []byte) {
	e.t.Helper()
	h := http.Header{}
	if key != "" {
		h.Set("Authorization", "Bearer "+key)
	}
	return e.rawDo(method, path, h, contentType, body)
}

// rawDo sends a request with exactly the headers given.
func (e *env) rawDo(method, path string, h http.Header, contentType string, body io.Reader) (int, http.Header, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, data
}

// apiError is the decoded OpenAI error body.
type apiError = apierror.Envelope

// checkError asserts an OpenAI-shaped error with status and param (""
// means null) and a message containing msg.
func checkError(t *testing.T, status int, body []byte, wantStatus int, wantParam, msg string) {
	t.Helper()
	if status != wantStatus {
		t.Fatalf("status %d, want %d: %s", status, wantStatus, body)
	}
	var raw map[string]map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatalf("error body is not JSON: %v: %s", err, body)
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := raw["error"][k]; !ok {
			t.Errorf("error body lacks error.%s: %s", k, body)
		}
	}
	var e apiError
	_ = json.Unmarshal(body, &e)
	got := ""
	if e.Error.Param != nil {
		got = *e.Error.Param
	}
	if got != wantParam {
		t.Errorf("param %q, want %q: %s", got, wantParam, body)
	}
	if !strings.Contains(e.Error.Message, msg) {
		t.Errorf("message %q does not contain %q", e.Error.Message, msg)
	}
	if e.Error.Type == "" {
		t.Errorf("no error type: %s", body)
	}
}

// sdkStatus is the HTTP status of an SDK error (0 if none).
func sdkStatus(err error) int {
	var ae *openai.Error
	if errors.As(err, &ae) {
		return ae.StatusCode
	}
	return 0
}

// multipartBody builds a multipart body from fields and an optional file.
func multipartBody(t *testing.T, fields map[string]string, fileName string, data []byte) (string, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for k, v := range fields {
		if err := mw.WriteField(k, v); err != nil {
			t.Fatal(err)
		}
	}
	if fileName != "" {
		w, err := mw.CreateFormFile("file", fileName)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write(data)
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return mw.FormDataContentType(), &buf
}

// sdkMessage is the error.message of an SDK error.
func sdkMessage(err error) string {
	var ae *openai.Error
	if errors.As(err, &ae) {
		return ae.Message
	}
	return ""
}
