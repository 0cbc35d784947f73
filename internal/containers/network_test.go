package containers_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/internal/containers"
	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/sandbox"
)

// TestNetworkPolicyLife: an auto container made with a network policy
// keeps it for life, its store record holds no secret's value, it is
// never reused for a response with another policy (nor is one without a
// policy reused for it), and after a restart (a new manager over the same
// store) its lost secrets fail its next run clearly instead of letting the
// code run without them.
func TestNetworkPolicyLife(t *testing.T) {
	f := newFixture(t)
	owner, h := caller("sk-net")
	ctx := context.Background()
	pol := &egress.Policy{AllowedDomains: []string{"api.example.com"},
		Secrets: []egress.Secret{{Domain: "api.example.com", Name: "API_KEY", Value: "the-value-9d2e"}}}
	c, err := f.m.Open(ctx, containers.Spec{Owner: owner, Header: h, Network: pol})
	if err != nil {
		t.Fatal(err)
	}
	id := c.ID()
	if got := c.Network(); got == nil || got.AllowedDomains[0] != "api.example.com" || got.Secrets[0].Name != "API_KEY" || got.Secrets[0].Value != "" {
		t.Errorf("Network() = %+v, want the domains and names without values", got)
	}
	_ = c.Close()
	rec, err := f.st.GetContainer(ctx, owner, id)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(rec)
	if strings.Contains(string(raw), "the-value-9d2e") || !strings.Contains(string(raw), "API_KEY") {
		t.Errorf("the store's record %s: want the secret's name, never its value", raw)
	}
	// A response replaying this container without a policy gets a new one.
	c2, err := f.m.Open(ctx, containers.Spec{Owner: owner, Header: h, Reuse: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	if c2.ID() == id || c2.Network() != nil {
		t.Errorf("a response without a policy reused the container with one (%s)", c2.ID())
	}
	sealed := c2.ID()
	_ = c2.Close()
	// And one with a policy never reuses a sealed container.
	c3, err := f.m.Open(ctx, containers.Spec{Owner: owner, Header: h, Reuse: []string{sealed}, Network: pol})
	if err != nil {
		t.Fatal(err)
	}
	if c3.ID() == sealed {
		t.Error("a response with a policy reused a sealed container")
	}
	_ = c3.Close()

	// The same policy reuses it (a conversation's next turn); another
	// domain list, or another value for the secret, does not.
	same, err := f.m.Open(ctx, containers.Spec{Owner: owner, Header: h, Reuse: []string{id}, Network: pol})
	if err != nil {
		t.Fatal(err)
	}
	if same.ID() != id {
		t.Error("the same policy did not reuse the container")
	}
	_ = same.Close()
	for _, other := range []*egress.Policy{
		{AllowedDomains: []string{"api.example.com", "pypi.org"}, Secrets: pol.Secrets},
		{AllowedDomains: pol.AllowedDomains, Secrets: []egress.Secret{{Domain: "api.example.com", Name: "API_KEY", Value: "another"}}},
	} {
		o, err := f.m.Open(ctx, containers.Spec{Owner: owner, Header: h, Reuse: []string{id}, Network: other})
		if err != nil {
			t.Fatal(err)
		}
		if o.ID() == id {
			t.Errorf("policy %+v reused the container made with another", other.AllowedDomains)
		}
		_ = o.Close()
	}

	// The restart: the store keeps the record, the secrets are gone.
	m2 := containers.New(containers.Config{}, f.st, f.prov, nil)
	t.Cleanup(func() { m2.Close() })
	c4, err := m2.Open(ctx, containers.Spec{Owner: owner, Header: h, ID: id})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c4.Run(ctx, "print(1)")
	if !errors.Is(err, containers.ErrSecretsLost) {
		t.Fatalf("run after the secrets were lost: %v, want ErrSecretsLost", err)
	}
	_ = c4.Close()
	// A request that resupplies the same policy gives them back: the run
	// now reaches the provider with the policy (this fixture's wasm
	// provider has no network, and says so).
	c5, err := m2.Open(ctx, containers.Spec{Owner: owner, Header: h, Reuse: []string{id}, Network: pol})
	if err != nil {
		t.Fatal(err)
	}
	defer c5.Close()
	if c5.ID() != id {
		t.Fatal("the resupplied policy did not reuse the container")
	}
	if _, err = c5.Run(ctx, "print(1)"); !errors.Is(err, sandbox.ErrNoNetwork) {
		t.Fatalf("run after the secrets were resupplied: %v, want the wasm provider's ErrNoNetwork", err)
	}
}
