// Package netpolicy reads OpenAI's container network_policy — on a
// code_interpreter tool's {"type": "auto"} container and on POST
// /v1/containers — checks it against OpenAI's contract
// (/v1/containers and the tool take the same union: {"type": "disabled"}
// or {"type": "allowlist", "allowed_domains": [...] (at least one),
// "domain_secrets": [{"domain", "name", "value"}] (optional, at least one
// when given; value at most 10 MiB)}) and against what this server offers
// (a Gate: the sandbox provider, and the operator's bound in package
// egress), and writes the only forms of a policy that may leave the server:
//
//   - the Container object's network_policy: {"type", "allowed_domains"},
//     never domain_secrets (OpenAI's Container type has no such field);
//   - a Response object's tools[]: the client's tools with every
//     domain_secrets[].value replaced by Mask (OpenAI's types require a
//     string there, so the entry stays and only its value is hidden).
//
// Refusals are OpenAI-shaped 400s (apierror.Error) whose param is the
// exact path, e.g. tools[0].container.network_policy.allowed_domains[1].
package netpolicy
