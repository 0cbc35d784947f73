package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/codeinterp/codeinterp/internal/api"
	"github.com/codeinterp/codeinterp/internal/config"
	"github.com/codeinterp/codeinterp/internal/devproxy"
	"github.com/codeinterp/codeinterp/internal/store"
	"github.com/codeinterp/codeinterp/internal/store/memory"
)

// failingProc fails every ext_proc stream: a request that reaches the
// filter gets a 500, so a 200 proves the route skipped it.
type failingProc struct {
	extprocv3.UnimplementedExternalProcessorServer
}

func (failingProc) Process(extprocv3.ExternalProcessor_ProcessServer) error {
	return status.Error(codes.Internal, "the API routes must not reach ext_proc")
}

// `extproc dev`'s route table sends /v1/containers and /v1/files to the
// API server, past the ext_proc filter; the SDK works through the proxy.
func TestDevRoutesReachTheAPI(t *testing.T) {
	cfg, err := config.LoadEnv("", nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := newStore(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ac := apiConfig(cfg)
	rs := memory.NewResponses(responseLimits(cfg), nil)
	ac.Responses = rs
	owner, _ := store.Owner(http.Header{"Authorization": {"Bearer sk-dev"}}, cfg.API.AuthHeaders)
	if err := rs.PutResponse(context.Background(), store.Response{ID: "resp_dev", Owner: owner,
		Object: json.RawMessage(`{"id":"resp_dev","object":"response","created_at":1,"status":"completed","model":"m","output":[]}`)}); err != nil {
		t.Fatal(err)
	}
	h, err := api.New(ac, st, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	apiSrv := httptest.NewServer(h)
	defer apiSrv.Close()
	apiURL, _ := url.Parse(apiSrv.URL)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(gs, failingProc{})
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	model := httptest.NewServer(nil) // never reached by the API routes
	defer model.Close()
	modelURL, _ := url.Parse(model.URL)

	px, err := devproxy.New(devproxy.Config{Upstream: modelURL, Processor: extprocv3.NewExternalProcessorClient(cc),
		Routes: devRoutes(cfg, apiURL.Host), MessageTimeout: 5 * time.Second, AllowModeOverride: true})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(px)
	defer front.Close()
	c := openai.NewClient(option.WithBaseURL(front.URL+"/v1/"), option.WithAPIKey("sk-dev"), option.WithMaxRetries(0))
	ctx := context.Background()

	f, err := c.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader("a,b\n1,2\n"), "data.csv", "text/csv"), Purpose: "user_data"})
	if err != nil {
		t.Fatal(err)
	}
	cn, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: "dev", FileIDs: []string{f.ID}})
	if err != nil {
		t.Fatal(err)
	}
	up, err := c.Containers.Files.New(ctx, cn.ID, openai.ContainerFileNewParams{File: openai.File(strings.NewReader("hello"), "hello.txt", "text/plain")})
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.Containers.Files.List(ctx, cn.ID, openai.ContainerFileListParams{})
	if err != nil || len(list.Data) != 2 {
		t.Fatalf("list: %v %v", err, list)
	}
	resp, err := c.Containers.Files.Content.Get(ctx, cn.ID, up.ID)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(data) != "hello" || resp.Header.Get("Content-Disposition") != `attachment; filename="file.txt"; filename*=UTF-8''hello.txt` {
		t.Fatalf("content %q %q", data, resp.Header.Get("Content-Disposition"))
	}
	// A stored response is the API's; creating one goes through the filter.
	if r, err := c.Responses.Get(ctx, "resp_dev", responses.ResponseGetParams{}); err != nil || r.ID != "resp_dev" {
		t.Fatalf("stored response through the proxy: %v %v", r, err)
	}
	if _, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "m"}); err == nil {
		t.Fatal("POST /v1/responses skipped the filter")
	}
	// Any other path takes the default route, through the (failing) filter.
	if _, err := c.Models.List(ctx); err == nil {
		t.Fatal("a model route skipped the filter")
	}

	// files.source: upstream leaves /v1/files to the upstream.
	cfg.Files.Source = config.FilesUpstream
	if r := devRoutes(cfg, apiURL.Host); len(r) != 5 || r[0].PathSeparatedPrefix != "/v1/containers" || r[1].Prefix != "/v1/responses/" || r[2].PathSeparatedPrefix != "/v1/conversations" ||
		r[3].PathSeparatedPrefix != "/v1/skills" || r[4].Path != "/v1/organization/usage/code_interpreter_sessions" {
		t.Fatalf("upstream files routes: %+v", r)
	}
	if r := devRoutes(cfg, ""); r != nil {
		t.Fatalf("routes without an API: %+v", r)
	}
}

func TestAPIConfigFromConfig(t *testing.T) {
	cfg := config.Default()
	got := apiConfig(cfg)
	// Unset, the upload bound is what a session holds: 32MiB of scratch
	// space less a page for each of 256 files.
	if got.DefaultExpiryMinutes != 20 || got.MaxExpiryMinutes != 60 || got.MaxUploadBytes != 31<<20 || got.Anonymous != api.AnonymousReject ||
		got.MaxMemoryLimit != int64(cfg.Interceptor.MaxMemoryLimit) || got.FilesSource != api.FilesLocal ||
		len(got.AuthHeaders) != 2 || got.FileLifetime != 24*time.Hour {
		t.Fatalf("%+v", got)
	}
	if l := storeLimits(cfg); l.FileBytes != 31<<20 || l.ContainerBytes != 31<<20 || l.OwnerContainers != 64 || l.ExpiredMemory != 24*time.Hour {
		t.Fatalf("%+v", l)
	}
}
