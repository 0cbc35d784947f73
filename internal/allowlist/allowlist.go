package allowlist

// Secret is one of a policy's domain_secrets: Value replaces the
// placeholder "$"+Name in request headers sent to Domain, and nowhere else.
type Secret struct{ Domain, Name, Value string }

// Policy is one session's network_policy of type allowlist.
type Policy struct {
	AllowedDomains []string
	Secrets        []Secret
}
