package devproxy

import (
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// The route table: /v1/containers and /v1/files (path_separated_prefix)
// go to the API cluster with no ext_proc stream; everything else takes
// the default route through the filter to the model.
func TestRouteTable(t *testing.T) {
	model, modelRec := startUpstream(t, okUpstream(`{"from":"model"}`))
	apiURL, apiRec := startUpstream(t, okUpstream(`{"from":"api"}`))
	var streams atomic.Int64
	proc := startProc(t, func(s extprocv3.ExternalProcessor_ProcessServer) error {
		streams.Add(1)
		return passAll(s)
	})
	routes := []Route{
		{Name: "containers", PathSeparatedPrefix: "/v1/containers", Cluster: apiURL, ExtProcDisabled: true},
		{Name: "files", PathSeparatedPrefix: "/v1/files", Cluster: apiURL, ExtProcDisabled: true},
	}
	srv, _, _ := startProxy(t, Config{Upstream: model, Processor: proc, AllowModeOverride: true, Routes: routes})

	for _, tc := range []struct {
		method, path, body string
		api                bool
	}{
		{"GET", "/v1/containers", "", true},
		{"POST", "/v1/containers", `{"name":"a"}`, true},
		{"GET", "/v1/containers/cntr_1/files/cfile_2/content?x=1", "", true},
		{"POST", "/v1/files", "multipart", true},
		{"GET", "/v1/files/file-1", "", true},
		{"GET", "/v1/filesystem", "", false}, // a separated prefix, not a string prefix
		{"GET", "/v1/containersx", "", false},
		{"POST", "/v1/responses", `{"model":"m"}`, false},
		{"GET", "/v1/models", "", false},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			beforeAPI, beforeModel, beforeStreams := len(apiRec.all()), len(modelRec.all()), streams.Load()
			resp, body := doRequest(t, tc.method, srv.URL+tc.path, tc.body, nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d %s", resp.StatusCode, body)
			}
			gotAPI := len(apiRec.all()) - beforeAPI
			gotModel := len(modelRec.all()) - beforeModel
			opened := streams.Load() - beforeStreams
			if tc.api {
				if gotAPI != 1 || gotModel != 0 || body != `{"from":"api"}` {
					t.Fatalf("api %d model %d body %s", gotAPI, gotModel, body)
				}
				if opened != 0 {
					t.Fatalf("%d ext_proc streams opened for an API route", opened)
				}
				last := apiRec.all()[len(apiRec.all())-1]
				if last.path != tc.path || last.method != tc.method || string(last.body) != tc.body {
					t.Fatalf("the API saw %+v", last)
				}
				return
			}
			if gotAPI != 0 || gotModel != 1 || opened != 1 {
				t.Fatalf("api %d model %d streams %d", gotAPI, gotModel, opened)
			}
		})
	}
}

func TestRouteTableRejected(t *testing.T) {
	up, _ := startUpstream(t, okUpstream(`{}`))
	for name, rt := range map[string]Route{
		"no match":       {Cluster: up},
		"two matches":    {Path: "/a", Prefix: "/a", Cluster: up},
		"relative":       {Prefix: "a", Cluster: up},
		"trailing slash": {PathSeparatedPrefix: "/v1/files/", Cluster: up},
		"no cluster":     {Prefix: "/a"},
		"bad cluster":    {Prefix: "/a", Cluster: &url.URL{Path: "/x"}},
	} {
		if _, err := New(Config{Upstream: up, Routes: []Route{rt}}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
