package containers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/egress"
	"github.com/codeinterp/codeinterp/internal/store"
)

// keptSecrets are one container's domain secrets and its owner (whose
// store record says whether the container still exists).
type keptSecrets struct {
	owner string
	list  []egress.Secret
}

// KeepSecrets holds the domain secrets of owner's container cid in memory
// for its life (the Containers API's create, and auto containers).
func (m *Manager) KeepSecrets(owner, cid string, secrets []egress.Secret) {
	if len(secrets) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.secrets[cid] = keptSecrets{owner: owner, list: append([]egress.Secret(nil), secrets...)}
}

// ForgetSecrets drops a container's domain secrets (it could not be made).
func (m *Manager) ForgetSecrets(cid string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.secrets, cid)
}

// policy is the egress policy a container's interpreter gets: its stored
// domains with the secrets held here, or ErrSecretsLost.
func (m *Manager) policy(c store.Container) (*egress.Policy, error) {
	if c.Network == nil {
		return nil, nil
	}
	pol := &egress.Policy{AllowedDomains: append([]string(nil), c.Network.AllowedDomains...)}
	if len(c.Network.Secrets) == 0 {
		return pol, nil
	}
	m.mu.Lock()
	kept := m.secrets[c.ID].list
	m.mu.Unlock()
	if len(kept) != len(c.Network.Secrets) {
		return nil, fmt.Errorf("%w: %s", ErrSecretsLost, c.ID)
	}
	pol.Secrets = kept
	return pol, nil
}

func secretsOf(pol *egress.Policy) []egress.Secret {
	if pol == nil {
		return nil
	}
	return pol.Secrets
}

// samePolicy reports whether container c has pol (nil: none): the same
// domains and secrets. A container whose secrets this server lost (a
// restart) takes them again from a spec that names the same ones: the
// request resupplied them.
func (m *Manager) samePolicy(c store.Container, pol *egress.Policy) bool {
	if c.Network == nil || pol == nil {
		return c.Network == nil && pol == nil
	}
	if !sameSet(c.Network.AllowedDomains, pol.AllowedDomains) {
		return false
	}
	refs := make([]string, 0, len(c.Network.Secrets))
	for _, r := range c.Network.Secrets {
		refs = append(refs, r.Domain+"\x00"+r.Name)
	}
	want := make([]string, 0, len(pol.Secrets))
	for _, s := range pol.Secrets {
		want = append(want, s.Domain+"\x00"+s.Name)
	}
	if !sameSet(refs, want) {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	kept := m.secrets[c.ID].list
	if len(kept) == 0 && len(pol.Secrets) > 0 {
		m.secrets[c.ID] = keptSecrets{owner: c.Owner, list: append([]egress.Secret(nil), pol.Secrets...)}
		return true
	}
	values := map[string]string{}
	for _, s := range kept {
		values[s.Domain+"\x00"+s.Name] = s.Value
	}
	for _, s := range pol.Secrets {
		if values[s.Domain+"\x00"+s.Name] != s.Value {
			return false
		}
	}
	return true
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]int{}
	for _, x := range a {
		seen[x]++
	}
	for _, x := range b {
		if seen[x]--; seen[x] < 0 {
			return false
		}
	}
	return true
}

// SecretsHeld is how many containers' secrets this manager holds.
func (m *Manager) SecretsHeld() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.secrets)
}

// ForgetDeleted drops the secrets of every container the store no
// longer has: one another replica deleted (a DELETE reaches its holder
// and the replica serving it at once, and every other replica here, at
// its next check: Config.SecretsCheck). A container that cannot be asked
// about keeps them until the next check.
func (m *Manager) ForgetDeleted(ctx context.Context) {
	m.mu.Lock()
	kept := make(map[string]keptSecrets, len(m.secrets))
	for cid, k := range m.secrets {
		kept[cid] = k
	}
	m.mu.Unlock()
	for cid, k := range kept {
		_, err := m.st.GetContainer(ctx, k.owner, cid)
		if !errors.Is(err, store.ErrNotFound) {
			continue
		}
		m.mu.Lock()
		if cur, ok := m.secrets[cid]; ok && cur.owner == k.owner {
			delete(m.secrets, cid)
		}
		m.mu.Unlock()
		m.log.Info("forgot the domain secrets of a container deleted on another replica", zap.String("container_id", cid))
	}
}

// checkSecrets calls ForgetDeleted every interval until ctx ends.
func (m *Manager) checkSecrets(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if m.SecretsHeld() > 0 {
			cctx, cancel := context.WithTimeout(ctx, every)
			m.ForgetDeleted(cctx)
			cancel()
		}
	}
}
