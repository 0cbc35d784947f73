package containers_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/codeinterp/codeinterp/internal/containers"
	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/store/redis/redistest"
)

// forge sends payload to the holder of cid as another key-holding
// replica (from) would, through the cluster channel, and returns the
// holder's answer's error kind ("" for none).
func forge(t *testing.T, from *replica, cid string, payload map[string]any) string {
	t.Helper()
	ctx := context.Background()
	l, held, err := from.node.Holder(ctx, cid)
	if err != nil || !held {
		t.Fatalf("the container's holder: %v %v", held, err)
	}
	b, _ := json.Marshal(payload)
	out, err := from.node.Forward(ctx, cid, l, b, nil)
	if err != nil {
		t.Fatalf("forwarding: %v", err)
	}
	var a struct {
		Error *struct {
			Kind, Message string
		} `json:"error"`
	}
	if err := json.Unmarshal(out, &a); err != nil {
		t.Fatal(err)
	}
	if a.Error == nil {
		return ""
	}
	return a.Error.Kind
}

// TestForwardedOwnerIsBound is issue 38's "a forwarded run naming another
// owner": a replica (holding the cluster key) that forwards a run, or a
// delete, of owner o's container under another owner's name is refused
// by the holder, which checks the owner against the store's record and
// the interpreter it holds: the victim's interpreter, its variables and
// its checkpoint stay.
func TestForwardedOwnerIsBound(t *testing.T) {
	_, _, a, b, ca := heldByA(t)
	cid := ca.ID()
	if kind := forge(t, b, cid, map[string]any{"owner": "intruder", "container": cid, "code": "x = 666"}); kind != "not_found" {
		t.Fatalf("a forwarded run naming another owner: error %q, want not_found", kind)
	}
	if kind := forge(t, b, cid, map[string]any{"owner": "intruder", "container": cid, "deleted": true}); kind == "" {
		t.Fatal("a forwarded delete naming another owner was obeyed")
	}
	if a.m.Held() != 1 {
		t.Fatalf("the victim's holder holds %d interpreters after the forged delete, want 1", a.m.Held())
	}
	if r, err := runErr(t, a.m, cid, "print(x)"); err != nil || strings.TrimSpace(r.Stdout) != "1" {
		t.Fatalf("the victim's container after the forged run and delete: %q %v, want x = 1", r.Stdout, err)
	}
}

// TestDeleteForgetsSecretsEverywhere is issue 38's "a DELETE … gone
// everywhere" for a replica that neither holds the container nor served
// the DELETE: the replica that made it keeps its domain secrets, another
// serves the DELETE (no holder to tell), and the secrets go from the
// first one's memory at its next check of the store — while another
// container's secrets, still in the store, stay.
func TestDeleteForgetsSecretsEverywhere(t *testing.T) {
	f := newFixture(t)
	url := redistest.Start(t)
	a, b := startReplica(t, f, url, nil, 0), startReplica(t, f, url, nil, 0)
	ctx := context.Background()
	pol := func(v string) *egress.Policy {
		return &egress.Policy{AllowedDomains: []string{"api.example.com"},
			Secrets: []egress.Secret{{Domain: "api.example.com", Name: "API_KEY", Value: v}}}
	}
	gone := open(t, a.m, containers.Spec{Owner: "o", Network: pol("deleted-value")})
	kept := open(t, a.m, containers.Spec{Owner: "o", Network: pol("kept-value")})
	gone.Close()
	kept.Close()
	if n := a.m.SecretsHeld(); n != 2 {
		t.Fatalf("A holds the secrets of %d containers, want 2", n)
	}
	if err := f.st.DeleteContainer(ctx, "o", gone.ID()); err != nil {
		t.Fatal(err)
	}
	b.m.Deleted(ctx, "o", gone.ID())
	a.m.ForgetDeleted(ctx)
	if n := a.m.SecretsHeld(); n != 1 {
		t.Fatalf("A holds the secrets of %d containers after one was deleted on B, want 1 (the live one's)", n)
	}
	c2 := open(t, a.m, containers.Spec{Owner: "o", ID: kept.ID()})
	if _, err := c2.Run(ctx, "print(1)"); err != nil && strings.Contains(err.Error(), "secrets") {
		t.Fatalf("the live container's secrets were dropped with the deleted one's: %v", err)
	}
}
