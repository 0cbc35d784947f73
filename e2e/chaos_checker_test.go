package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
)

// TestChaosChecker proves TestChaos's checker on small histories written
// by hand: it accepts what the server may do and catches a lost
// acknowledged bump, two interpreters of one container, a refused bump
// that ran, and a loss no fault explains or no answer admitted.
func TestChaosChecker(t *testing.T) {
	w := chaosWindows{Durable: 1200 * time.Millisecond, Grace: 500 * time.Millisecond}
	lim := chaosLimits{PerContainer: 10 * time.Second, Total: time.Minute, MaxHeap: 1 << 30}
	s := func(sec float64) time.Duration { return time.Duration(sec * float64(time.Second)) }
	// bump and read build ops of container "c" (times in seconds).
	bump := func(client int, id string, start, end float64, outcome chaosOutcome, prior ...string) chaosOp {
		op := chaosOp{Client: client, Container: "c", Kind: chaosBump, ID: id, Replica: "r0#0", Start: s(start), End: s(end), Outcome: outcome}
		if outcome == chaosOK {
			l := append(append([]string{}, prior...), id)
			op.N, op.Last, op.Digest = len(l), id, chaosDigest(l)
		}
		return op
	}
	read := func(client int, start, end float64, list ...string) chaosOp {
		return chaosOp{Client: client, Container: "c", Kind: chaosRead, Replica: "r1#0", Start: s(start), End: s(end), Outcome: chaosOK, List: list}
	}
	noted := func(op chaosOp) chaosOp { op.Noted = true; return op }
	kill := chaosFault{Kind: "kill", Replica: 0, Start: s(10), End: s(10.1), Loses: true}
	shortPause := chaosFault{Kind: "pause", Replica: 0, Start: s(10), End: s(11), Loses: false}

	cases := []struct {
		name   string
		ops    []chaosOp
		faults []chaosFault
		final  []string            // the final list, the same on every replica unless views is set
		views  map[string][]string // per replica
		lin    bool                // linearizable
		// problem is a substring of a final-state problem ("" for none).
		problem string
		// saved: the checkpoint writes the test saw (nil: not watched).
		saved []chaosWrite
	}{
		{
			name: "linearizable: concurrent bumps, reads, a refused and an indeterminate bump",
			ops: []chaosOp{
				bump(0, "a", 1, 2, chaosOK),
				bump(1, "b", 1.5, 3, chaosOK, "a"),
				read(2, 1.8, 2.5, "a"),
				bump(2, "x", 3.5, 4, chaosFailed),
				bump(0, "u", 4, 9, chaosUnknown),
				bump(1, "c", 5, 6, chaosOK, "a", "b"),
				read(2, 6.5, 7, "a", "b", "c"),
				read(2, 12, 13, "a", "b", "c", "u"), // u took effect late
			},
			final: []string{"a", "b", "c", "u"},
			lin:   true,
		},
		{
			name: "a lost acknowledged bump",
			ops: []chaosOp{
				bump(0, "a", 1, 2, chaosOK),
				bump(1, "b", 3, 4, chaosOK, "a"),
				read(2, 5, 6, "a"),
			},
			final:   []string{"a"},
			problem: "acknowledged bump b",
		},
		{
			name: "two interpreters of one container diverging",
			ops: []chaosOp{
				bump(0, "a", 1, 2, chaosOK),
				bump(1, "b", 3, 4, chaosOK, "a"), // on one replica's interpreter
				bump(2, "c", 3, 4, chaosOK, "a"), // on another's
				read(0, 5, 6, "a", "b"),
				read(1, 5, 6, "a", "c"),
			},
			views:   map[string][]string{"r0#0": {"a", "b"}, "r1#0": {"a", "c"}},
			problem: "replicas disagree",
		},
		{
			name: "two interpreters: the same length told twice",
			ops: []chaosOp{
				bump(0, "a", 1, 2, chaosOK),
				bump(1, "b", 3, 4, chaosOK, "a"),
				bump(2, "c", 3.5, 5, chaosOK, "a"),
			},
			final:   []string{"a", "c"},
			problem: "acknowledged bump b",
		},
		{
			name: "a refused bump that ran",
			ops: []chaosOp{
				bump(0, "a", 1, 2, chaosOK),
				bump(1, "x", 3, 4, chaosFailed),
				read(2, 5, 6, "a", "x"),
			},
			final:   []string{"a", "x"},
			problem: "was refused",
		},
		{
			name: "a bump ran twice",
			ops: []chaosOp{
				bump(0, "a", 1, 2, chaosOK),
				read(2, 5, 6, "a", "a"),
			},
			final:   []string{"a", "a"},
			problem: "2 times",
		},
		{
			name: "kill -9 right after a bump: lost, and the next answer says so",
			ops: []chaosOp{
				bump(0, "a", 1, 2, chaosOK),
				bump(1, "b", 9, 9.5, chaosOK, "a"),
				read(2, 9.6, 9.7, "a", "b"), // seen before the kill, lost after
				noted(read(2, 12, 13, "a")),
				bump(0, "c", 14, 15, chaosOK, "a"),
			},
			faults: []chaosFault{kill},
			final:  []string{"a", "c"},
			lin:    true,
		},
		{
			name: "kill -9 right after a bump: lost, the answer that found it restored unknown",
			ops: []chaosOp{
				bump(0, "a", 1, 2, chaosOK),
				bump(1, "b", 9, 9.5, chaosOK, "a"),
				// Timed out: it ran on the restored state, and was told.
				{Client: 3, Container: "c", Kind: chaosRead, Replica: "r1#0", Start: s(11), End: s(30), Outcome: chaosUnknown},
				read(2, 12, 13, "a"),
			},
			faults: []chaosFault{kill},
			final:  []string{"a"},
			lin:    true,
		},
		{
			name: "kill -9 after a bump: lost, nobody told",
			ops: []chaosOp{
				bump(0, "a", 1, 2, chaosOK),
				bump(1, "b", 9, 9.5, chaosOK, "a"),
				read(2, 12, 13, "a"),
			},
			faults: []chaosFault{kill},
			final:  []string{"a"},
		},
		{
			name: "kill -9 long after a bump: it should have been checkpointed",
			ops: []chaosOp{
				bump(0, "a", 1, 2, chaosOK),
				bump(1, "b", 5, 6, chaosOK, "a"),
				noted(read(2, 12, 13, "a")),
			},
			faults:  []chaosFault{kill},
			final:   []string{"a"},
			problem: "acknowledged bump b",
		},
		{
			name: "kill -9: a bump shown by a read long before is durable",
			ops: []chaosOp{
				bump(0, "a", 1, 2, chaosOK),
				{Client: 1, Container: "c", Kind: chaosBump, ID: "b", Replica: "r0#0", Start: s(3), End: s(20), Outcome: chaosUnknown},
				read(2, 4, 5, "a", "b"),
				noted(read(2, 12, 13, "a")),
			},
			faults: []chaosFault{kill},
			final:  []string{"a"},
		},
		{
			name: "kill -9 on a loaded server: a bump seen long before, with no checkpoint written since, may be lost",
			ops: []chaosOp{
				bump(0, "a", 1, 2, chaosOK),
				bump(1, "b", 3, 4, chaosOK, "a"),
				noted(read(2, 12, 13, "a")),
			},
			faults: []chaosFault{kill},
			final:  []string{"a"},
			saved:  []chaosWrite{{After: s(2.5), By: s(2.52)}},
			lin:    true,
		},
		{
			name: "kill -9: a bump a checkpoint written since holds is durable, whatever the window",
			ops: []chaosOp{
				bump(0, "a", 1, 2, chaosOK),
				bump(1, "b", 3, 4, chaosOK, "a"),
				noted(read(2, 12, 13, "a")),
			},
			faults:  []chaosFault{kill},
			final:   []string{"a"},
			saved:   []chaosWrite{{After: s(2.5), By: s(2.52)}, {After: s(4.1), By: s(4.12)}},
			problem: "acknowledged bump b",
		},
		{
			name: "a short pause loses nothing",
			ops: []chaosOp{
				bump(0, "a", 1, 2, chaosOK),
				bump(1, "b", 9, 9.5, chaosOK, "a"),
				noted(read(2, 12, 13, "a")),
			},
			faults:  []chaosFault{shortPause},
			final:   []string{"a"},
			problem: "acknowledged bump b",
		},
		{
			name: "a paused holder's late answer is not at risk",
			ops: []chaosOp{
				bump(0, "a", 1, 2, chaosOK),
				// Sent before the long pause, answered by the paused
				// holder after it (two interpreters: the other replica
				// restored a and went on).
				bump(1, "b", 9.9, 16, chaosOK, "a"),
				noted(read(2, 14, 15, "a")),
				bump(0, "c", 15.5, 15.8, chaosOK, "a"),
			},
			faults:  []chaosFault{{Kind: "pause", Replica: 0, Start: s(10), End: s(15.9), Loses: true}},
			final:   []string{"a", "c"},
			problem: "acknowledged bump b",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := w
			if c.saved != nil {
				w.Saved = map[string][]chaosWrite{"c": c.saved}
			}
			vs, _ := chaosCheck(c.ops, c.faults, w, lim)
			if want := map[bool]porcupine.CheckResult{true: porcupine.Ok, false: porcupine.Illegal}[c.lin]; chaosOverall(vs) != want {
				t.Errorf("linearizability %v, want %s", vs, want)
			}
			views := c.views
			if views == nil {
				views = map[string][]string{"r0#0": c.final, "r1#0": c.final, "r2#0": c.final}
			}
			problems := chaosFinalCheck("c", c.ops, c.faults, w, views)
			switch {
			case c.problem == "" && len(problems) > 0:
				t.Errorf("final state problems %q, want none", problems)
			case c.problem != "" && !strings.Contains(strings.Join(problems, "\n"), c.problem):
				t.Errorf("final state problems %q, want one about %q", problems, c.problem)
			}
		})
	}
	// The visualization of a failed check renders.
	vs, m := chaosCheck(cases[1].ops, nil, w, lim)
	if len(vs) != 1 || vs[0].Result != porcupine.Illegal || vs[0].Calls != 3 || vs[0].Linearized != 2 || !strings.HasPrefix(vs[0].Stuck, "read() → 1 ids") {
		t.Fatal(vs)
	}
	path := filepath.Join(t.TempDir(), "history.html")
	if err := porcupine.VisualizePath(m, vs[0].Info, path); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || !strings.Contains(string(b), "bump(b)") {
		t.Fatalf("visualization: %v", err)
	}
}

// TestChaosCheckerScale: a history the size of one container's in
// TestChaos, with indeterminate calls, a fault and a restore, is checked
// Ok (in milliseconds on an idle machine: logged); one that is not linearizable, with many indeterminate
// calls before the violation, is stopped at the check's limits and never
// passes.
func TestChaosCheckerScale(t *testing.T) {
	w := chaosWindows{Durable: 1200 * time.Millisecond, Grace: 500 * time.Millisecond}
	// history: three clients, overlapping (each op starts before the
	// previous one ended, and takes effect in order); one op in every
	// unknownEvery indeterminate; a kill -9 at op 250, after which the
	// last bump (just acknowledged) is lost, or the first (legal: false).
	history := func(unknownEvery int, legal bool) ([]chaosOp, chaosFault) {
		var ops []chaosOp
		var list []string
		at := time.Second
		kill := chaosFault{Kind: "kill", Replica: 0, Loses: true}
		for i := range 400 {
			op := chaosOp{Client: i % 3, Container: "c", Replica: "r0#0", Start: at - 150*time.Millisecond, End: at + 100*time.Millisecond, Outcome: chaosOK}
			at += 200 * time.Millisecond
			switch {
			case i == 250:
				kill.Start, kill.End = op.Start+time.Millisecond, op.Start+time.Second
				if legal {
					list = list[:len(list)-1]
				} else {
					list = list[1:]
				}
				op.Kind, op.Noted, op.List = chaosRead, true, append([]string{}, list...)
			case i%4 == 3:
				op.Kind, op.List = chaosRead, append([]string{}, list...)
			default:
				op.Kind, op.ID = chaosBump, fmt.Sprintf("op-%d", i)
				list = append(list, op.ID)
				op.N, op.Last, op.Digest = len(list), op.ID, chaosDigest(list)
			}
			if i%unknownEvery == 2 {
				op.Outcome, op.End = chaosUnknown, op.End+30*time.Second
			}
			ops = append(ops, op)
		}
		return ops, kill
	}
	ops, kill := history(25, true)
	start := time.Now()
	vs, _ := chaosCheck(ops, []chaosFault{kill}, w, chaosLimits{PerContainer: time.Minute, Total: time.Minute, MaxHeap: 1 << 30})
	if chaosOverall(vs) != porcupine.Ok {
		t.Fatalf("%v after %s, want Ok", vs, time.Since(start))
	}
	// How long it took is logged, not asserted (a loaded machine is slow;
	// the limits below are what bounds a check).
	t.Logf("%d calls checked in %s", len(ops), time.Since(start))

	ops, kill = history(5, false)
	for _, lim := range []chaosLimits{
		{PerContainer: time.Second, Total: time.Minute, MaxHeap: 1 << 30},
		{PerContainer: time.Minute, Total: time.Minute, MaxHeap: 64 << 20},
	} {
		start := time.Now()
		vs, _ := chaosCheck(ops, []chaosFault{kill}, w, lim)
		if chaosOverall(vs) == porcupine.Ok {
			t.Errorf("limits %+v: %v after %s, want Illegal or Unknown (stopped at the limits)", lim, vs, time.Since(start))
		}
		t.Logf("limits %+v: %v after %s", lim, vs, time.Since(start))
	}
}

// TestChaosClassifyError: only a refusal in OpenAI's error shape is a
// definite failure.
func TestChaosClassifyError(t *testing.T) {
	refused := &openai.Error{StatusCode: 503, Type: "server_error", Code: "container_unavailable", Message: "try again"}
	for _, c := range []struct {
		err  error
		evs  []responses.ResponseStreamEventUnion
		want chaosOutcome
	}{
		{refused, nil, chaosFailed},
		{fmt.Errorf("POST: %w", refused), nil, chaosFailed},
		{&openai.Error{StatusCode: 502, Type: "server_error", Code: "container_unavailable"}, nil, chaosUnknown},
		{&openai.Error{StatusCode: 500, Type: "server_error"}, nil, chaosUnknown},
		{&openai.Error{StatusCode: 503, Type: "server_error", Code: "upstream_unavailable"}, nil, chaosUnknown},
		{context.DeadlineExceeded, nil, chaosUnknown},
		{errors.New("stream of 3 events had no response.completed"),
			[]responses.ResponseStreamEventUnion{{Type: "response.created"}, {Type: "error", Code: "container_unavailable"}, {Type: "response.failed"}}, chaosFailed},
		{errors.New("stream of 3 events had no response.completed"),
			[]responses.ResponseStreamEventUnion{{Type: "response.created"}, {Type: "error", Code: "server_error"}, {Type: "response.failed"}}, chaosUnknown},
		{io.ErrUnexpectedEOF, []responses.ResponseStreamEventUnion{{Type: "response.created"}}, chaosUnknown},
	} {
		if got, detail := chaosClassifyError(c.err, c.evs); got != c.want {
			t.Errorf("%v %v: %s (%s), want %s", c.err, c.evs, got, detail, c.want)
		}
	}
}

// TestChaosParseOutput reads the tool outputs the server writes.
func TestChaosParseOutput(t *testing.T) {
	for _, c := range []struct {
		kind    chaosKind
		text    string
		outcome chaosOutcome
		check   func(op chaosOp) bool
	}{
		{chaosBump, "status: completed\nstdout:\nBUMP 3 op-1-2 0123456789abcdef\nstderr: (empty)\n", chaosOK,
			func(op chaosOp) bool {
				return op.N == 3 && op.Last == "op-1-2" && op.Digest == "0123456789abcdef" && !op.Noted
			}},
		{chaosRead, "status: completed\nnote: this ran in the interpreter restored from the container's last checkpoint, taken before the most recent calls: variables and imports they set may be missing; the container's files in /mnt/data are there.\nstdout:\nREAD a b\nstderr: (empty)\n", chaosOK,
			func(op chaosOp) bool { return op.Noted && strings.Join(op.List, ",") == "a,b" }},
		{chaosRead, "status: completed\nnote: this ran in a fresh Python interpreter: variables and imports from earlier calls are gone; the container's files in /mnt/data are there.\nstdout:\nREAD\nstderr: (empty)\n", chaosOK,
			func(op chaosOp) bool { return op.Noted && len(op.List) == 0 && op.List != nil }},
		{chaosBump, "status: failed: the interpreter crashed; variables from earlier calls are lost (the sandbox could not run the code)\nstdout: (empty)\n", chaosUnknown, nil},
		{chaosBump, "status: completed\nstdout: (empty)\n", chaosUnknown, nil},
	} {
		op := chaosOp{Kind: c.kind}
		chaosParseOutput(&op, c.text)
		if op.Outcome != c.outcome || c.check != nil && !c.check(op) {
			t.Errorf("%q: parsed %+v", c.text, op)
		}
	}
}

// TestChaosExplain: a failed check's excerpt lists the container's calls
// and the faults around the stuck call, in time order, and nothing of
// another container or from long before.
func TestChaosExplain(t *testing.T) {
	s := time.Second
	ops := []chaosOp{
		{Client: 1, Container: "c", Kind: chaosBump, ID: "a", Replica: "r0#0", Start: 1 * s, End: 2 * s, Outcome: chaosOK, N: 1, Digest: "d1"},
		{Client: 2, Container: "c", Kind: chaosBump, ID: "b", Replica: "r1#0", Start: 20 * s, End: 21 * s, Outcome: chaosOK, N: 1, Digest: "d2", Noted: true},
		{Client: 3, Container: "other", Kind: chaosRead, Replica: "r1#0", Start: 19 * s, End: 20 * s, Outcome: chaosOK},
		{Client: 4, Container: "c", Kind: chaosRead, Replica: "r2#0", Start: 18 * s, End: 19 * s, Outcome: chaosUnknown, Detail: "timeout"},
	}
	faults := []chaosFault{{Kind: "kill", Replica: 0, Start: 15 * s, End: 17 * s, Loses: true}}
	got := chaosExplain(ops, faults, "c", 20*s)
	lines := strings.Split(got, "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "fault kill") ||
		!strings.Contains(lines[1], "read indeterminate: timeout") ||
		!strings.Contains(lines[2], "bump(b) → 1 d2 (noted: restored/reset)") {
		t.Fatalf("chaosExplain:\n%s", got)
	}
}
