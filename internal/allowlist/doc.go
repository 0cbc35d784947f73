// Package allowlist is a session's network_policy of type allowlist as
// every package meets it: the sandbox interface carries it
// (sandbox.SessionOptions.Network), the egress proxy enforces it, the
// containers keep it for a container's life, the interceptor and the API
// read it from requests. A leaf: it imports nothing of the project, so
// the core sandbox interface does not pull in the proxy.
package allowlist
