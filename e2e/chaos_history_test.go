package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"runtime"
	"runtime/metrics"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
)

// This file is TestChaos's checker, kept apart from the cluster it drives
// so that it can be tested on histories written by hand
// (chaos_checker_test.go): what a client recorded of each call (an op),
// what the test did to the cluster (a fault), the sequential model
// Porcupine checks each container's history against, and the checks of
// the containers' final state.
//
// Each container holds one Python list L of op ids. A bump appends its
// id and prints the new length, the id and a digest of the whole list;
// a read prints the list. The model's state is that list.
//
// What the server may legitimately lose: the bumps no answer showed
// before the durability window (checkpoints.after + 1 s) ahead of a
// kill -9 or a pause past the lease of the container's holder (the test
// does not know which replica held it: any replica's) — or before it,
// when the test, watching the checkpoint store, saw no checkpoint of
// the container written between the answer and the fault (a loaded
// machine writes later than an idle one promises): the state is
// restored from the last checkpoint, and the first call that runs in it
// says so (a note that the interpreter was restored from an older
// checkpoint, or is fresh). The model lets such a call (or a call whose
// answer is unknown) truncate the list, dropping only ids that were at
// risk; nothing else may ever be lost. (Rather than turning the at-risk
// bumps into indeterminate calls, which a read that saw one before the
// fault would contradict, the loss is a step of the model.)

// chaosInf is the end of an op whose outcome is unknown: it may take
// effect at any time after its start, or never (Jepsen's and Porcupine's
// usual treatment of indeterminate calls).
const chaosInf = int64(math.MaxInt64)

type chaosKind string

const (
	chaosBump chaosKind = "bump"
	chaosRead chaosKind = "read"
)

type chaosOutcome string

const (
	// chaosOK: the call ran; its output was parsed.
	chaosOK chaosOutcome = "ok"
	// chaosFailed: the server said the run was refused before it ran
	// (an error whose code is in chaosRefusedCodes): it never takes
	// effect.
	chaosFailed chaosOutcome = "failed"
	// chaosUnknown: timeouts, transport errors, other error answers, a
	// run reported as crashed, cancelled or cut short: it may or may not
	// have taken effect.
	chaosUnknown chaosOutcome = "indeterminate"
)

// chaosRefusedCodes are the OpenAI error codes (an HTTP error's
// error.code, or a stream's error event's code) that mean the run was
// refused before it ran. Any other error leaves the call indeterminate.
var chaosRefusedCodes = map[string]bool{"container_unavailable": true}

// chaosRefusedStatus are the HTTP statuses a refusal may come with.
var chaosRefusedStatus = map[int]bool{409: true, 429: true, 500: true, 503: true}

// chaosOp is one call as its client recorded it.
type chaosOp struct {
	Client    int           `json:"client"`
	Container string        `json:"container"`
	Kind      chaosKind     `json:"kind"`
	ID        string        `json:"id,omitempty"` // a bump's op id
	Replica   string        `json:"replica"`      // the replica it was sent to (slot#incarnation)
	Stream    bool          `json:"stream,omitempty"`
	Start     time.Duration `json:"start"` // since the test's start
	End       time.Duration `json:"end"`
	Outcome   chaosOutcome  `json:"outcome"`
	// An ok call's output: a read's list; a bump's new length, its id
	// and the list's digest. Noted: the output said the interpreter was
	// restored from an older checkpoint, or is fresh.
	List   []string `json:"list,omitempty"`
	N      int      `json:"n,omitempty"`
	Last   string   `json:"last,omitempty"`
	Digest string   `json:"digest,omitempty"`
	Noted  bool     `json:"noted,omitempty"`
	// Detail is the error, or what could not be parsed.
	Detail string `json:"detail,omitempty"`
}

// chaosFault is one thing the test did to the cluster.
type chaosFault struct {
	Kind    string        `json:"kind"`    // pause, kill, term, redis-full
	Replica int           `json:"replica"` // the replica's slot; -1 for Redis
	Start   time.Duration `json:"start"`
	End     time.Duration `json:"end"`
	// Loses: the fault may lose the state its replica's interpreters had
	// not yet checkpointed (a kill -9, a pause longer than the lease).
	Loses  bool   `json:"loses"`
	Detail string `json:"detail,omitempty"`
}

func (f chaosFault) String() string {
	who := "redis"
	if f.Replica >= 0 {
		who = "replica " + strconv.Itoa(f.Replica)
	}
	s := fmt.Sprintf("%-10s %-9s %8.3fs → %8.3fs (%.2fs)", f.Kind, who, f.Start.Seconds(), f.End.Seconds(), (f.End - f.Start).Seconds())
	if f.Loses {
		s += " [may lose unsaved state]"
	}
	if f.Detail != "" {
		s += " " + f.Detail
	}
	return s
}

// chaosWindows are the checker's time allowances.
type chaosWindows struct {
	// Durable: an acknowledged change is in the store this long after the
	// response (checkpoints.after + 1 s, the server's promise, plus a
	// tolerance for a loaded machine).
	Durable time.Duration
	// Grace: how long after a fault began an answer the server sent
	// before it may still reach the client.
	Grace time.Duration
	// Saved, when the test watched the checkpoint store, is each
	// container's checkpoint writes it saw, in order. A change older than
	// Durable before a fault is still at risk when no write is proven
	// to have come between the change and the fault: Durable is the
	// server's promise on an idle machine, and the writes say what a
	// loaded one did. (The promise itself is held by the containers
	// package's tests, not by a clock here.)
	Saved map[string][]chaosWrite
}

// chaosWrite is a new checkpoint the test saw in the store: written
// after After (the poll before saw the one before) and by By (the poll
// that saw it). Its state has every change an answer showed before
// After: the run lock is held from the snapshot to the write, so a run
// answered before After ended before the snapshot.
type chaosWrite struct{ After, By time.Duration }

// proven reports whether a checkpoint of container written between seen
// and tf is proven by the writes seen.
func (w chaosWindows) proven(container string, seen, tf int64) bool {
	for _, s := range w.Saved[container] {
		if int64(s.After) >= seen && int64(s.By) <= tf {
			return true
		}
	}
	return false
}

// chaosDigest is what a bump prints of the whole list:
// sha256(",".join(L)) in hex, cut to 16 characters.
func chaosDigest(ids []string) string {
	sum := sha256.Sum256([]byte(strings.Join(ids, ",")))
	return hex.EncodeToString(sum[:])[:16]
}

// chaosBumpCode and chaosReadCode are the Python the model is scripted to
// run. A bump may first sleep (a slow run, for a fault to land in).
func chaosBumpCode(id string, sleep time.Duration) string {
	code := "L = globals().get('L', [])\nL.append(" + strconv.Quote(id) + ")\nimport hashlib\n" +
		"print('BUMP', len(L), L[-1], hashlib.sha256(','.join(L).encode()).hexdigest()[:16])"
	if sleep > 0 {
		code = fmt.Sprintf("import time\ntime.sleep(%.3f)\n", sleep.Seconds()) + code
	}
	return code
}

const chaosReadCode = "print('READ', *globals().get('L', []))"

// chaosParseOutput reads a run's tool output (what the model echoes back
// as its message): ok with the parsed output, or indeterminate with why.
func chaosParseOutput(op *chaosOp, text string) {
	op.Outcome = chaosUnknown
	status, _, _ := strings.Cut(text, "\n")
	for _, l := range strings.Split(text, "\n") {
		ll := strings.ToLower(l)
		if strings.HasPrefix(ll, "note:") && (strings.Contains(ll, "restored") || strings.Contains(ll, "fresh") ||
			strings.Contains(ll, "reset") || strings.Contains(ll, "missing") || strings.Contains(ll, "lost")) {
			op.Noted = true
		}
	}
	if strings.TrimSpace(status) != "status: completed" {
		op.Detail = "run not completed: " + status
		return
	}
	var marker string
	if _, rest, ok := strings.Cut(text, "stdout:\n"); ok {
		for _, l := range strings.Split(rest, "\n") {
			if strings.HasPrefix(l, "BUMP ") || l == "READ" || strings.HasPrefix(l, "READ ") {
				marker = l
				break
			}
		}
	}
	f := strings.Fields(marker)
	switch {
	case op.Kind == chaosRead && len(f) >= 1 && f[0] == "READ":
		op.List = append([]string{}, f[1:]...)
	case op.Kind == chaosBump && len(f) == 4 && f[0] == "BUMP":
		n, err := strconv.Atoi(f[1])
		if err != nil {
			op.Detail = "unparsable output: " + marker
			return
		}
		op.N, op.Last, op.Digest = n, f[2], f[3]
	default:
		op.Detail = "no " + strings.ToUpper(string(op.Kind)) + " line in a completed run's output: " + strconv.Quote(text)
		return
	}
	op.Outcome = chaosOK
}

// chaosClassifyError is the outcome of a call that got an error instead
// of a response: failed when the server said, in OpenAI's error shape,
// that the run was refused before it ran (an HTTP error with a refusal
// status and code, or a stream's error event with a refusal code);
// indeterminate otherwise. evs are a streamed call's events.
func chaosClassifyError(err error, evs []responses.ResponseStreamEventUnion) (chaosOutcome, string) {
	for _, ev := range evs {
		if ev.Type != "error" {
			continue
		}
		detail := fmt.Sprintf("stream error event %s: %s", ev.Code, ev.Message)
		if chaosRefusedCodes[ev.Code] {
			return chaosFailed, detail
		}
		return chaosUnknown, detail
	}
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		detail := fmt.Sprintf("HTTP %d %s/%s: %s", apiErr.StatusCode, apiErr.Type, apiErr.Code, apiErr.Message)
		if chaosRefusedStatus[apiErr.StatusCode] && chaosRefusedCodes[apiErr.Code] {
			return chaosFailed, detail
		}
		return chaosUnknown, detail
	}
	if err == nil {
		return chaosUnknown, "no answer"
	}
	return chaosUnknown, err.Error()
}

// chaosLosingFaults are the faults that may lose unsaved state.
func chaosLosingFaults(faults []chaosFault) []chaosFault {
	var out []chaosFault
	for _, f := range faults {
		if f.Loses {
			out = append(out, f)
		}
	}
	return out
}

// chaosAtRisk reports whether an acknowledged bump may have been lost by
// a fault (chaosDroppable, with the time an answer first showed it).
func chaosAtRisk(op chaosOp, seen chaosSeen, faults []chaosFault, w chaosWindows) bool {
	if op.Kind != chaosBump || op.Outcome != chaosOK {
		return false
	}
	e := seen[op.ID]
	return chaosDroppable(e.container, e.call, e.seen, chaosInf, faults, w)
}

// chaosDroppable: may an element, appended by a bump sent at call and
// first seen acknowledged at seen (chaosInf: never), be lost by a
// restore that happened before before? Only by a fault that began after
// the bump was sent, when no acknowledged answer showed the element
// before the durability window ahead of the fault (it would be in the
// store by then), nor well after the fault began (an answer from the old
// interpreter after it lost the container is no excuse).
//
// With the store watched (w.Saved), an element seen before the window
// is at risk still when no checkpoint write of its container is proven
// between the answer and the fault.
func chaosDroppable(container string, call, seen, before int64, faults []chaosFault, w chaosWindows) bool {
	for _, f := range faults {
		tf := int64(f.Start)
		if !f.Loses || tf >= before || call > tf {
			continue
		}
		switch {
		case seen == chaosInf:
			return true
		case seen > tf+int64(w.Grace):
		case seen >= tf-int64(w.Durable):
			return true
		case w.Saved != nil && !w.proven(container, seen, tf):
			return true
		}
	}
	return false
}

// chaosSeen is, for each bump's id, when it was sent and when an
// acknowledged answer first showed it: the bump's own, or a read's that
// listed it. (A later bump's answer shows it too, through the length and
// digest; leaving those out changes nothing the model allows: a bump
// that showed it follows it in the list, and a truncation drops a
// suffix.)
type chaosSeen map[string]struct {
	container  string
	call, seen int64
}

func chaosSeenTimes(ops []chaosOp) chaosSeen {
	out := chaosSeen{}
	for _, op := range ops {
		if op.Kind == chaosBump {
			e := out[op.ID]
			e.container, e.call, e.seen = op.Container, int64(op.Start), chaosInf
			if op.Outcome == chaosOK {
				e.seen = int64(op.End)
			}
			out[op.ID] = e
		}
	}
	for _, op := range ops {
		if op.Kind != chaosRead || op.Outcome != chaosOK {
			continue
		}
		for _, id := range op.List {
			if e, ok := out[id]; ok && int64(op.End) < e.seen {
				e.seen = int64(op.End)
				out[id] = e
			}
		}
	}
	return out
}

// chaosState is the model's state, the container's list: a persistent
// list (each state shares its prefix with the states it came from), with
// the hash of the ids so far and the digest a bump prints, made once.
type chaosState struct {
	s *chaosNode
}

type chaosNode struct {
	id     string
	prev   *chaosNode
	n      int
	h      uint64
	digest string
}

func (s chaosState) len() int {
	if s.s == nil {
		return 0
	}
	return s.s.n
}

func (s chaosState) push(id string) chaosState {
	h := fnv.New64a()
	var prev uint64
	if s.s != nil {
		prev = s.s.h
	}
	fmt.Fprintf(h, "%d,%s", prev, id)
	return chaosState{&chaosNode{id: id, prev: s.s, n: s.len() + 1, h: h.Sum64()}}
}

func (s chaosState) ids() []string {
	out := make([]string, s.len())
	for n := s.s; n != nil; n = n.prev {
		out[n.n-1] = n.id
	}
	return out
}

func (s chaosState) digest() string {
	if s.s == nil {
		return chaosDigest(nil)
	}
	if s.s.digest == "" {
		s.s.digest = chaosDigest(s.ids())
	}
	return s.s.digest
}

func (s chaosState) equal(o chaosState) bool {
	a, b := s.s, o.s
	for a != b {
		if a == nil || b == nil || a.n != b.n || a.h != b.h || a.id != b.id {
			return false
		}
		a, b = a.prev, b.prev
	}
	return true
}

type chaosInput struct {
	container string
	kind      chaosKind
	id        string
	end       int64 // chaosInf for an indeterminate op
}

type chaosOutput struct {
	unknown bool
	noted   bool
	list    []string
	n       int
	last    string
	digest  string
}

// chaosModel is the sequential specification of a container (the
// history is partitioned by container): a list that bumps append to and
// reads show, which a call that found its interpreter restored from an
// older checkpoint (it says so), or a call whose answer is unknown, may
// find without a suffix of at-risk elements (chaosDroppable).
//
// abort, when set, fails every step: a check past its limits ends at once
// (its verdict is then Unknown, whatever Porcupine says).
func chaosModel(ops []chaosOp, faults []chaosFault, w chaosWindows, abort *atomic.Bool) porcupine.Model {
	losing := chaosLosingFaults(faults)
	seen := chaosSeenTimes(ops)
	// truncations are the states a call ending at end may find: s, and
	// s without a suffix of elements a restore before end may have lost.
	truncations := func(s chaosState, end int64) []chaosState {
		out := []chaosState{s}
		for n := s.s; n != nil; n = n.prev {
			e := seen[n.id]
			if !chaosDroppable(e.container, e.call, e.seen, end, losing, w) {
				break
			}
			out = append(out, chaosState{n.prev})
		}
		return out
	}
	step := func(state, input, output any) []any {
		if abort != nil && abort.Load() {
			return nil
		}
		s, in, out := state.(chaosState), input.(chaosInput), output.(chaosOutput)
		starts := []chaosState{s}
		if out.unknown || out.noted {
			starts = truncations(s, in.end)
		}
		var next []any
		for _, p := range starts {
			switch in.kind {
			case chaosBump:
				c := p.push(in.id)
				if out.unknown || c.len() == out.n && out.last == in.id && c.digest() == out.digest {
					next = append(next, c)
				}
			case chaosRead:
				if out.unknown || p.len() == len(out.list) && slices.Equal(p.ids(), out.list) {
					next = append(next, p)
				}
			}
		}
		return next
	}
	nm := porcupine.NondeterministicModel{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			by := map[string][]porcupine.Operation{}
			var keys []string
			for _, op := range history {
				c := op.Input.(chaosInput).container
				if _, ok := by[c]; !ok {
					keys = append(keys, c)
				}
				by[c] = append(by[c], op)
			}
			sort.Strings(keys)
			var out [][]porcupine.Operation
			for _, k := range keys {
				out = append(out, by[k])
			}
			return out
		},
		Init:  func() []any { return []any{chaosState{}} },
		Step:  step,
		Equal: func(a, b any) bool { return a.(chaosState).equal(b.(chaosState)) },
		Hash: func(a any) uint64 {
			if s := a.(chaosState); s.s != nil {
				return s.s.h
			}
			return 0
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(chaosInput), output.(chaosOutput)
			var res string
			switch {
			case out.unknown:
				res = "?"
			case in.kind == chaosBump:
				res = fmt.Sprintf("%d %s %s", out.n, out.last, out.digest)
			default:
				res = fmt.Sprintf("%d ids, last %s", len(out.list), lastOf(out.list))
			}
			if out.noted {
				res += " (noted: restored/reset)"
			}
			if in.kind == chaosBump {
				return fmt.Sprintf("bump(%s) → %s", in.id, res)
			}
			return "read() → " + res
		},
		DescribeState: func(state any) string {
			s := state.(chaosState)
			return fmt.Sprintf("%d ids: %s", s.len(), strings.Join(tail(s.ids(), 6), " "))
		},
		DescribeOperationMetadata: func(info any) string {
			if info == nil {
				return ""
			}
			return fmt.Sprint(info)
		},
	}
	return nm.ToModel()
}

func lastOf(ids []string) string {
	if len(ids) == 0 {
		return "-"
	}
	return ids[len(ids)-1]
}

func tail(ids []string, n int) []string {
	if len(ids) <= n {
		return ids
	}
	return append([]string{"…"}, ids[len(ids)-n:]...)
}

// chaosOperations turns the recorded ops into Porcupine's history:
// definitely failed ops are left out (they never take effect), an
// indeterminate op ends at infinity with an unknown output.
func chaosOperations(ops []chaosOp) []porcupine.Operation {
	var out []porcupine.Operation
	for _, op := range ops {
		if op.Outcome == chaosFailed {
			continue
		}
		in := chaosInput{container: op.Container, kind: op.Kind, id: op.ID, end: int64(op.End)}
		o := chaosOutput{noted: op.Noted, list: op.List, n: op.N, last: op.Last, digest: op.Digest}
		if op.Outcome == chaosUnknown {
			in.end, o = chaosInf, chaosOutput{unknown: true}
		}
		out = append(out, porcupine.Operation{ClientId: op.Client, Input: in, Call: int64(op.Start), Output: o,
			Return: in.end, Metadata: strings.TrimSpace(fmt.Sprintf("%s via %s %s", op.Outcome, op.Replica, op.Detail))})
	}
	return out
}

// chaosLimits bound a check: the time per container, and the heap (a
// history that is not linearizable makes Porcupine try every order of
// the indeterminate calls before it: exponential in their number).
type chaosLimits struct {
	PerContainer, Total time.Duration
	MaxHeap             uint64
}

// chaosVerdict is one container's linearizability check.
type chaosVerdict struct {
	Container  string
	Result     porcupine.CheckResult
	Calls      int // in the history checked (definitely failed ones left out)
	Linearized int // the longest linearizable prefix found
	// Stuck describes the first call (by start) the longest
	// linearization found could not place.
	Stuck   string
	StuckAt time.Duration // when the stuck call started
	Why     string
	Info    porcupine.LinearizationInfo
}

func (v chaosVerdict) String() string {
	s := fmt.Sprintf("%s: %s (%d of %d calls linearized)", v.Container, v.Result, v.Linearized, v.Calls)
	if v.Why != "" {
		s += ": " + v.Why
	}
	if v.Stuck != "" {
		s += "; the first call no linearization places: " + v.Stuck
	}
	return s
}

// chaosCheck checks the history for linearizability, one container at a
// time, each within the limits (past them its verdict is Unknown).
func chaosCheck(ops []chaosOp, faults []chaosFault, w chaosWindows, lim chaosLimits) ([]chaosVerdict, porcupine.Model) {
	var abort atomic.Bool
	m := chaosModel(ops, faults, w, &abort)
	by := map[string][]porcupine.Operation{}
	for _, op := range chaosOperations(ops) {
		c := op.Input.(chaosInput).container
		by[c] = append(by[c], op)
	}
	var containers []string
	for c := range by {
		containers = append(containers, c)
	}
	sort.Strings(containers)
	var out []chaosVerdict
	deadline := time.Now().Add(lim.Total)
	for _, c := range containers {
		timeout := min(lim.PerContainer, time.Until(deadline))
		if timeout < time.Second {
			out = append(out, chaosVerdict{Container: c, Result: porcupine.Unknown, Calls: len(by[c]), Why: "not checked: no time left"})
			continue
		}
		abort.Store(false)
		var heap atomic.Uint64
		done := make(chan struct{})
		go func() {
			sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-tick.C:
				}
				metrics.Read(sample)
				if b := sample[0].Value.Uint64(); b > lim.MaxHeap {
					heap.Store(b)
					abort.Store(true)
				}
			}
		}()
		res, info := porcupine.CheckOperationsVerbose(m, by[c], timeout)
		close(done)
		v := chaosVerdict{Container: c, Result: res, Calls: len(by[c]), Info: info}
		var longest []int
		for _, part := range info.PartialLinearizations() {
			for _, l := range part {
				if len(l) > len(longest) {
					longest = l
				}
			}
		}
		v.Linearized = len(longest)
		if res == porcupine.Illegal {
			placed := map[int]bool{}
			for _, i := range longest {
				placed[i] = true
			}
			stuck := -1
			for i, op := range by[c] {
				if !placed[i] && (stuck < 0 || op.Call < by[c][stuck].Call) {
					stuck = i
				}
			}
			if stuck >= 0 {
				op := by[c][stuck]
				v.Stuck = fmt.Sprintf("%s (%.3fs → %s, %s)", m.DescribeOperation(op.Input, op.Output),
					time.Duration(op.Call).Seconds(), chaosTime(op.Return), op.Metadata)
				v.StuckAt = time.Duration(op.Call)
			}
		}
		switch {
		case abort.Load():
			v.Result, v.Why = porcupine.Unknown, fmt.Sprintf("stopped with %d MiB of heap in use", heap.Load()>>20)
		case res == porcupine.Unknown:
			v.Why = "not finished in " + timeout.Round(time.Second).String()
		}
		out = append(out, v)
		runtime.GC()
	}
	return out, m
}

func chaosTime(t int64) string {
	if t == chaosInf {
		return "∞"
	}
	return fmt.Sprintf("%.3fs", time.Duration(t).Seconds())
}

// chaosOverall is the verdict on the whole history.
func chaosOverall(vs []chaosVerdict) porcupine.CheckResult {
	res := porcupine.Ok
	for _, v := range vs {
		switch {
		case v.Result == porcupine.Illegal:
			return porcupine.Illegal
		case v.Result == porcupine.Unknown:
			res = porcupine.Unknown
		}
	}
	return res
}

// chaosFinalCheck checks one container's final state as each replica
// read it (replica → list): the replicas agree, no id is there twice,
// every acknowledged bump not at risk is there, no definitely failed
// bump is, nor any id no bump of this container sent.
func chaosFinalCheck(container string, ops []chaosOp, faults []chaosFault, w chaosWindows, views map[string][]string) []string {
	var problems []string
	var replicas []string
	for r := range views {
		replicas = append(replicas, r)
	}
	sort.Strings(replicas)
	if len(replicas) == 0 {
		return []string{container + ": no replica could read it"}
	}
	list := views[replicas[0]]
	for _, r := range replicas[1:] {
		if !slices.Equal(views[r], list) {
			problems = append(problems, fmt.Sprintf("%s: replicas disagree: %s has %d ids (…%v), %s has %d ids (…%v)",
				container, replicas[0], len(list), tail(list, 4), r, len(views[r]), tail(views[r], 4)))
		}
	}
	count := map[string]int{}
	for _, id := range list {
		count[id]++
	}
	for id, n := range count {
		if n > 1 {
			problems = append(problems, fmt.Sprintf("%s: op %s is in the list %d times", container, id, n))
		}
	}
	sent := map[string]bool{}
	losing := chaosLosingFaults(faults)
	seen := chaosSeenTimes(ops)
	for _, op := range ops {
		if op.Container != container || op.Kind != chaosBump {
			continue
		}
		sent[op.ID] = true
		switch {
		case op.Outcome == chaosOK && !chaosAtRisk(op, seen, losing, w) && count[op.ID] == 0:
			problems = append(problems, fmt.Sprintf("%s: acknowledged bump %s (%.3fs → %.3fs via %s, told length %d) is lost",
				container, op.ID, op.Start.Seconds(), op.End.Seconds(), op.Replica, op.N))
		case op.Outcome == chaosFailed && count[op.ID] > 0:
			problems = append(problems, fmt.Sprintf("%s: bump %s was refused (%s) but is in the list", container, op.ID, op.Detail))
		}
	}
	for id := range count {
		if !sent[id] {
			problems = append(problems, fmt.Sprintf("%s: op %s in the list was never sent to this container", container, id))
		}
	}
	sort.Strings(problems)
	return problems
}

// chaosSummary counts ops per kind and outcome, and the at-risk bumps.
func chaosSummary(ops []chaosOp, faults []chaosFault, w chaosWindows) string {
	type key struct {
		kind    chaosKind
		outcome chaosOutcome
	}
	n := map[key]int{}
	atRisk, noted := 0, 0
	seen := chaosSeenTimes(ops)
	for _, op := range ops {
		n[key{op.Kind, op.Outcome}]++
		if chaosAtRisk(op, seen, faults, w) {
			atRisk++
		}
		if op.Noted {
			noted++
		}
	}
	var b strings.Builder
	for _, k := range []chaosKind{chaosBump, chaosRead} {
		fmt.Fprintf(&b, "%s: %d ok, %d failed (refused), %d indeterminate; ", k,
			n[key{k, chaosOK}], n[key{k, chaosFailed}], n[key{k, chaosUnknown}])
	}
	fmt.Fprintf(&b, "%d acknowledged bumps at risk (within the durability window before a kill -9 or long pause); %d answers noted a restore or reset", atRisk, noted)
	return b.String()
}

// chaosExplain lists a container's calls that started in the few seconds
// before at (and just after), in order, and the faults among them: what
// a failed check's reader needs first, in the test's own output (a CI
// run keeps nothing else).
func chaosExplain(ops []chaosOp, faults []chaosFault, container string, at time.Duration) string {
	from, to := at-8*time.Second, at+2*time.Second
	var lines []string
	for _, f := range faults {
		if f.End >= from && f.Start <= to {
			lines = append(lines, fmt.Sprintf("%8.3fs → %8.3fs  fault %s", f.Start.Seconds(), f.End.Seconds(), f))
		}
	}
	for _, op := range ops {
		if op.Container != container || op.Start < from || op.Start > to {
			continue
		}
		what := string(op.Kind)
		if op.ID != "" {
			what += "(" + op.ID + ")"
		}
		switch {
		case op.Outcome != chaosOK:
			what += " " + string(op.Outcome) + ": " + op.Detail
		case op.Kind == chaosRead:
			what += fmt.Sprintf(" → %d ids, last %v", len(op.List), tail(op.List, 3))
		default:
			what += fmt.Sprintf(" → %d %s", op.N, op.Digest)
		}
		if op.Noted {
			what += " (noted: restored/reset)"
		}
		lines = append(lines, fmt.Sprintf("%8.3fs → %8.3fs  client %d via %s: %s", op.Start.Seconds(), op.End.Seconds(), op.Client, op.Replica, what))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
