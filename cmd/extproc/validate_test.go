package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/internal/config"
)

func TestValidateConfig(t *testing.T) {
	tests := []struct {
		name       string
		args, env  []string
		wantOut    []string // substrings of stdout, in order
		wantErr    []string // paths that must be named by *config.FieldError
		wantUsage  bool
		wantStderr string
	}{
		{name: "example file", args: []string{"../../deploy/codeinterp.yaml"},
			wantOut: []string{"ok: ../../deploy/codeinterp.yaml", "grpc listen:", "127.0.0.1:50051", "routes:", "POST /v1/responses",
				"message timeout override:", "10m0s", "upstream:", "http://127.0.0.1:10001/v1/responses", "api listen:", "127.0.0.1:8081", "store:", "memory", "files source:", "local", "environment overrides:", "none"}},
		{name: "env applied and reported", args: []string{"../../testdata/config/minimal.yaml"},
			env:        []string{"CODEINTERP_SANDBOX_MAX_SESSIONS=5", "CODEINTERP_UPSTRAEM_URL=x"},
			wantOut:    []string{"ok:", "5 sessions, 4 warm", "environment overrides:", "CODEINTERP_SANDBOX_MAX_SESSIONS"},
			wantStderr: "warning: CODEINTERP_UPSTRAEM_URL matches no configuration field"},
		{name: "no-env ignores environment", args: []string{"--no-env", "../../testdata/config/minimal.yaml"},
			env:     []string{"CODEINTERP_SANDBOX_MAX_SESSIONS=oops"},
			wantOut: []string{"ok:", "16 sessions", "environment overrides:", "none"}},
		{name: "bad env value", args: []string{"../../testdata/config/minimal.yaml"},
			env: []string{"CODEINTERP_SANDBOX_MAX_SESSIONS=oops"}, wantErr: []string{"sandbox.max_sessions"}},
		{name: "invalid file", args: []string{"../../testdata/config/invalid.yaml"},
			wantErr: []string{"server.listen", "server.override_message_timeout", "routes.paths[0]", "upstream.url",
				"upstream.forward_headers[1]", "sandbox.warm_workers", "sandbox.isolation.cgroup", "logging.level"}},
		{name: "unknown fields", args: []string{"../../testdata/config/unknown-field.yaml"},
			wantErr: []string{"sandbox.limits.run_timout", "uptream"}},
		{name: "no file", args: nil, wantUsage: true},
		{name: "two files", args: []string{"a", "b"}, wantUsage: true},
		{name: "unknown flag", args: []string{"--strict", "a"}, wantUsage: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := validateConfig(tt.args, tt.env, &out, &errOut)
			var ue *usageError
			if tt.wantUsage {
				if !errors.As(err, &ue) {
					t.Fatalf("err = %v, want a usage error", err)
				}
				return
			}
			if len(tt.wantErr) > 0 {
				if err == nil || errors.As(err, &ue) {
					t.Fatalf("err = %v, want a configuration error", err)
				}
				var got []string
				for _, fe := range config.FieldErrors(err) {
					got = append(got, fe.Path)
				}
				if strings.Join(got, " ") != strings.Join(tt.wantErr, " ") {
					t.Errorf("errors name %v, want %v\n%v", got, tt.wantErr, err)
				}
				for _, p := range tt.wantErr {
					if !strings.Contains(err.Error(), "\n  "+p+": ") {
						t.Errorf("message does not list %s on its own line:\n%v", p, err)
					}
				}
				if out.Len() != 0 {
					t.Errorf("printed to stdout on failure: %q", out.String())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			rest := out.String()
			for _, w := range tt.wantOut {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("stdout lacks %q (in order):\n%s", w, out.String())
				}
				rest = rest[i+len(w):]
			}
			if !strings.Contains(errOut.String(), tt.wantStderr) {
				t.Errorf("stderr %q lacks %q", errOut.String(), tt.wantStderr)
			}
		})
	}
}
