// Package config is the YAML configuration of `extproc serve` and
// `extproc dev`: its Go types, documented defaults, environment overrides
// and validation.
//
// It is a leaf: it imports none of the project's packages. What a setting
// means to a package — its options, its rules — is that package's own;
// cmd/extproc's wire.go maps this configuration onto each package's
// options, and passes the packages' validators to Load as Checks, so that
// one validator decides each setting and every problem is still reported
// at once, at its YAML path. Validate here checks what no package owns: the
// YAML's shape and the relations between sections.
//
// # Loading
//
// Load(path, checks...) starts from Default(), decodes the YAML file over
// it, applies the environment, validates (Collect: Validate and the
// checks), and lowercases header names. Precedence:
// defaults < file < environment. A key that is absent (or null) keeps its
// default; a list or map given in the file replaces the default whole.
//
// Decoding is strict: an unknown field, a duplicate key or a wrong type is
// an error naming the field's dotted path (with a "did you mean" hint for
// near misses). Validation collects every problem, each a *FieldError with
// the path and the reason, joined with errors.Join; FieldErrors extracts
// them. Load wraps them in *Error, which names the source.
//
// # Values
//
// Durations are Go durations: "30s", "1m30s", "250ms" (a bare number is an
// error, since its unit would be a guess). Sizes (ByteSize) are a plain byte
// count or a number with a binary unit: KiB/MiB/GiB/TiB, Ki/Mi/Gi/Ti, or
// k/m/g/t as in Docker and the Responses API's memory_limit ("1g" = 1GiB).
// Decimal SI units (MB, GB) are rejected as ambiguous.
//
// # Environment
//
// Every leaf field can be overridden by one variable: CODEINTERP_ followed
// by the field's YAML path in upper case with dots replaced by underscores:
//
//	upstream.url                  CODEINTERP_UPSTREAM_URL
//	server.listen                 CODEINTERP_SERVER_LISTEN
//	sandbox.limits.run_timeout    CODEINTERP_SANDBOX_LIMITS_RUN_TIMEOUT
//
// EnvVars lists them all; ApplyEnv documents the value syntax (lists are
// comma-separated, maps are name=value pairs). Unrecognised CODEINTERP_*
// variables are ignored by Load and reported by UnknownEnv (validate-config
// prints them), except CODEINTERP_RUNTIME_DIR, which the runtime build
// script and cmd/extproc's resolvePaths share, and CODEINTERP_FIXTURES, used by tests.
//
// # Pairing with Envoy
//
// server.override_message_timeout must not exceed the ext_proc filter's
// max_message_timeout (deploy/envoy/envoy.yaml sets 900s; the default here
// is 600s), or Envoy ignores the override and the 10s message_timeout ends
// long runs with a 504. server.max_body_bytes should equal Envoy's buffer
// limit (16MiB in deploy/envoy). Validate cannot see the Envoy config; the
// deploy/envoy tests check the pairing against Default().
//
// # Containers and files
//
// api configures the HTTP server of OpenAI's Containers and Files APIs
// (its listener, the credential headers that own objects, the upload bound
// and container expiry), store the store it and the interceptor share
// (memory, or redis for several replicas, and its bounds), files where file
// ids come from (local, upstream or off). api.max_upload_bytes must not
// exceed store.limits.file_bytes; expiries are whole minutes, as OpenAI's
// expires_after. deploy/envoy routes /v1/containers and /v1/files to
// api.listen; its tests check the pairing.
//
// # Sandbox paths
//
// sandbox.runtime_dir and sandbox.cache_dir may be left empty; cmd/extproc (resolvePaths)
// then finds the build script's output (see its documentation). Validate
// does not touch the file system, so a file can be checked on any machine.
package config
