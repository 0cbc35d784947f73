// Package e2e holds codeinterp's end-to-end tests and benchmarks: the
// official openai-go client talks to the devproxy front proxy (an Envoy
// stand-in that follows Envoy's ext_proc rules), which drives the real
// filter over real gRPC, which runs code in the real sandbox pool and sends
// follow-ups to a scripted model server. The model server replays the
// project's own responses in the shapes of recorded OpenAI traffic
// (internal/fixtures, testdata/openai) and checks every request it
// receives; with $CODEINTERP_FIXTURES the output is also compared with the
// recordings themselves.
//
// The tests need what the sandbox needs (root, cgroups, the CPython-WASI
// runtime); without it they fail and say what is missing.
//
//	go test ./e2e/                      the cases
//	go test ./e2e/ -run '^$' -bench .   pass-through and code-interpreter overhead
package e2e
