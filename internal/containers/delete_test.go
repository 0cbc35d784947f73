package containers_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/internal/checkpoint"
	"github.com/codeinterp/codeinterp/internal/containers"
	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/sandbox"
	"github.com/codeinterp/codeinterp/internal/store/redis/redistest"
)

// TestDeleteReachesTheHolder is issue 38's row 4: a DELETE served by one
// replica while another holds the container's interpreter drops it
// everywhere at once — the holder's live interpreter, and the checkpoint
// — not at the next sweep.
func TestDeleteReachesTheHolder(t *testing.T) {
	f, k, a, b, ca := heldByA(t)
	if a.m.Held() != 1 {
		t.Fatalf("A holds %d interpreters", a.m.Held())
	}
	// The Containers API on B: the store's record first, then the rest.
	if err := f.st.DeleteContainer(context.Background(), "o", ca.ID()); err != nil {
		t.Fatal(err)
	}
	b.m.Deleted(context.Background(), "o", ca.ID())
	if a.m.Held() != 0 {
		t.Fatalf("the holder still holds %d interpreters after the container was deleted on another replica", a.m.Held())
	}
	if _, _, err := k.Load(context.Background(), "o", ca.ID()); !errors.Is(err, checkpoint.ErrNone) {
		t.Fatalf("the deleted container's checkpoint: %v, want none", err)
	}
}

// TestDropOfALiveContainerRefused: a forwarded drop for a container its
// owner still has (forged, or a mistake) changes nothing at the holder.
func TestDropOfALiveContainerRefused(t *testing.T) {
	f := newFixture(t)
	url := redistest.Start(t)
	a := startReplica(t, f, url, nil, 0)
	b := startReplica(t, f, url, nil, 0)
	ca := open(t, a.m, containers.Spec{Owner: "o"})
	run(t, ca, "x = 1")
	ca.Close()
	b.m.Deleted(context.Background(), "o", ca.ID()) // the store still has it
	if r, err := runErr(t, a.m, ca.ID(), "print(x)"); err != nil || strings.TrimSpace(r.Stdout) != "1" {
		t.Fatalf("after a drop of a live container: %q %v, want x = 1 kept", r.Stdout, err)
	}
}

// TestForeignIDKeepsSecrets: an owner naming another owner's container id
// gets not-found, and the victim's domain secrets (kept only in memory)
// are untouched: its next run still has them.
func TestForeignIDKeepsSecrets(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	owner, h := caller("sk-victim")
	pol := &egress.Policy{AllowedDomains: []string{"api.example.com"},
		Secrets: []egress.Secret{{Domain: "api.example.com", Name: "API_KEY", Value: "the-victims-value"}}}
	c, err := f.m.Open(ctx, containers.Spec{Owner: owner, Header: h, Network: pol})
	if err != nil {
		t.Fatal(err)
	}
	id := c.ID()
	_ = c.Close()
	intruder, ih := caller("sk-intruder")
	if _, err := f.m.Open(ctx, containers.Spec{Owner: intruder, Header: ih, ID: id}); !errors.Is(err, containers.ErrNotFound) {
		t.Fatalf("another owner naming the container: %v, want ErrNotFound", err)
	}
	c2, err := f.m.Open(ctx, containers.Spec{Owner: owner, Header: h, ID: id})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	// (This sandbox has no network: the run stops there, after the
	// secrets were found — a lost secret is refused before that.)
	if _, err := c2.Run(ctx, "print(1)"); errors.Is(err, containers.ErrSecretsLost) || err != nil && !errors.Is(err, sandbox.ErrNoNetwork) {
		t.Fatalf("the victim's run after another owner named its container: %v, want its secrets kept", err)
	}
}
