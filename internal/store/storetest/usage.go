package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/codeinterp/codeinterp/internal/store"
)

// UsageFactory makes an empty store.Usage whose clock is now.
type UsageFactory func(t *testing.T, now func() time.Time) store.Usage

// RunUsage runs the store.Usage conformance suite: sums per minute, hour
// and day, owners kept apart, the operator's view of all owners.
func RunUsage(t *testing.T, newStore UsageFactory) {
	ctx := context.Background()
	// Times within the kept ranges: an hour ago, on a minute boundary.
	base := time.Now().UTC().Add(-time.Hour).Truncate(time.Hour)
	u := newStore(t, time.Now)
	add := func(owner string, at time.Time, d store.UsageDelta) {
		t.Helper()
		if err := u.Add(ctx, owner, at, d); err != nil {
			t.Fatal(err)
		}
	}
	session := func(mem string) store.UsageDelta {
		return store.UsageDelta{Sessions: 1, SessionsByMemory: map[string]int64{mem: 1}}
	}
	add("alice", base.Add(10*time.Second), session("1g"))
	add("alice", base.Add(20*time.Second), store.UsageDelta{Runs: 2, RunMillis: 1500, EgressBytes: 4096})
	add("alice", base.Add(3*time.Minute), session("4g"))
	add("alice", base.Add(61*time.Minute), session("1g"))
	add("bob", base.Add(30*time.Second), session("1g"))

	minutes, err := u.Buckets(ctx, "alice", base, base.Add(2*time.Hour), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		at                     time.Duration
		sessions, runs, millis int64
	}{{0, 1, 2, 1500}, {3 * time.Minute, 1, 0, 0}, {61 * time.Minute, 1, 0, 0}}
	if len(minutes) != len(want) {
		t.Fatalf("minute buckets %+v, want %d", minutes, len(want))
	}
	for i, w := range want {
		b := minutes[i]
		if !b.Start.Equal(base.Add(w.at)) || b.Sessions != w.sessions || b.Runs != w.runs || b.RunMillis != w.millis {
			t.Errorf("minute bucket %d = %+v, want start %s sessions %d runs %d ms %d", i, b, base.Add(w.at), w.sessions, w.runs, w.millis)
		}
	}
	hours, err := u.Buckets(ctx, "alice", base, base.Add(2*time.Hour), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(hours) != 2 || hours[0].Sessions != 2 || hours[0].SessionsByMemory["1g"] != 1 || hours[0].SessionsByMemory["4g"] != 1 || hours[1].Sessions != 1 {
		t.Fatalf("hour buckets %+v", hours)
	}
	day := base.Truncate(24 * time.Hour)
	days, err := u.Buckets(ctx, "alice", day, day.Add(48*time.Hour), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, d := range days {
		total += d.Sessions
	}
	if total != 3 {
		t.Fatalf("day buckets %+v: %d sessions, want 3", days, total)
	}
	if got, _ := u.Buckets(ctx, "mallory", base, base.Add(2*time.Hour), time.Minute); len(got) != 0 {
		t.Fatalf("another owner sees %+v", got)
	}
	all, err := u.Owners(ctx, base, base.Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if all["alice"].Sessions != 3 || all["alice"].Runs != 2 || all["alice"].EgressBytes != 4096 || all["bob"].Sessions != 1 || len(all) != 2 {
		t.Fatalf("the operator's view: %+v", all)
	}
}
