package api

import (
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/store"
)

// This file serves usage (Config.Usage): the caller's own code interpreter
// sessions in OpenAI's shape, GET /v1/organization/usage/code_interpreter_sessions
// (buckets of bucket_width 1m, 1h or 1d from start_time, paginated with
// page/next_page; one result per bucket that has sessions, with
// project_id null: this server has no projects), and the operator's view
// of every owner, UsageHandler, for the admin listener.

// usageWidths are OpenAI's bucket widths with their default and largest
// limit.
var usageWidths = map[string]struct {
	d           time.Duration
	defLim, max int
}{
	"1m": {time.Minute, 60, 1440},
	"1h": {time.Hour, 24, 168},
	"1d": {24 * time.Hour, 7, 31},
}

// usageQuery is a parsed usage request.
type usageQuery struct {
	from, end time.Time // [from, end): from aligned to width
	width     time.Duration
	limit     int
}

// parseUsage reads start_time, end_time, bucket_width, limit and page.
func parseUsage(r *http.Request, now time.Time) (usageQuery, *apierror.Error) {
	q := r.URL.Query()
	var uq usageQuery
	st := q.Get("start_time")
	if st == "" {
		return uq, apierror.Invalid("start_time", "missing_required_parameter", "Missing required parameter: 'start_time'.")
	}
	start, err := strconv.ParseInt(st, 10, 64)
	if err != nil || start < 0 {
		return uq, apierror.Invalid("start_time", "invalid_value", "Invalid 'start_time': expected a Unix time in seconds, got '%s'.", st)
	}
	uq.end = now
	if et := q.Get("end_time"); et != "" {
		e, err := strconv.ParseInt(et, 10, 64)
		if err != nil || e <= start {
			return uq, apierror.Invalid("end_time", "invalid_value", "Invalid 'end_time': expected a Unix time in seconds after start_time, got '%s'.", et)
		}
		uq.end = time.Unix(e, 0)
	}
	bw := q.Get("bucket_width")
	if bw == "" {
		bw = "1d"
	}
	w, ok := usageWidths[bw]
	if !ok {
		return uq, apierror.Invalid("bucket_width", "invalid_value", "Invalid 'bucket_width': '%s' is not one of 1m, 1h, 1d.", bw)
	}
	uq.width, uq.limit = w.d, w.defLim
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > w.max {
			return uq, apierror.Invalid("limit", "invalid_value", "Invalid 'limit': expected an integer from 1 to %d for bucket_width %s, got '%s'.", w.max, bw, l)
		}
		uq.limit = n
	}
	for _, g := range q["group_by"] {
		if g != "project_id" {
			return uq, apierror.Invalid("group_by", "invalid_value", "Invalid 'group_by': '%s' is not one of project_id.", g)
		}
	}
	ws := int64(uq.width / time.Second)
	from := start / ws * ws
	if p := q.Get("page"); p != "" {
		n, err := strconv.ParseInt(strings.TrimPrefix(p, "page_"), 10, 64)
		if err != nil || !strings.HasPrefix(p, "page_") || n < from {
			return uq, apierror.Invalid("page", "invalid_value", "Invalid 'page': '%s' is not a next_page this endpoint gave.", p)
		}
		from = n
	}
	uq.from = time.Unix(from, 0)
	return uq, nil
}

type usageResult struct {
	Object      string  `json:"object"`
	NumSessions int64   `json:"num_sessions"`
	ProjectID   *string `json:"project_id"`
}

type usageBucket struct {
	Object    string        `json:"object"`
	StartTime int64         `json:"start_time"`
	EndTime   int64         `json:"end_time"`
	Results   []usageResult `json:"results"`
}

type usagePage struct {
	Object   string        `json:"object"`
	Data     []usageBucket `json:"data"`
	HasMore  bool          `json:"has_more"`
	NextPage *string       `json:"next_page"`
}

// codeInterpreterUsage is GET /v1/organization/usage/code_interpreter_sessions
// for the caller's own credential.
func (s *Server) codeInterpreterUsage(w http.ResponseWriter, r *http.Request, owner string) {
	uq, e := parseUsage(r, time.Now())
	if e != nil {
		writeError(w, e)
		return
	}
	page := usagePage{Object: "page", Data: []usageBucket{}}
	to := uq.from
	for len(page.Data) < uq.limit && to.Before(uq.end) {
		page.Data = append(page.Data, usageBucket{Object: "bucket", StartTime: to.Unix(), EndTime: to.Add(uq.width).Unix(), Results: []usageResult{}})
		to = to.Add(uq.width)
	}
	got, err := s.cfg.Usage.Buckets(r.Context(), owner, uq.from, to, uq.width)
	if err != nil {
		s.log.Error("usage store failed", zap.Error(err))
		writeError(w, apierror.Server(http.StatusInternalServerError, "", "The usage store is unavailable; try again later."))
		return
	}
	for _, b := range got {
		i := int((b.Start.Unix() - uq.from.Unix()) / int64(uq.width/time.Second))
		if i >= 0 && i < len(page.Data) && b.Sessions > 0 {
			page.Data[i].Results = []usageResult{{Object: "organization.usage.code_interpreter_sessions.result", NumSessions: b.Sessions}}
		}
	}
	if to.Before(uq.end) {
		next := "page_" + strconv.FormatInt(to.Unix(), 10)
		page.HasMore, page.NextPage = true, &next
	}
	writeJSON(w, http.StatusOK, page)
}

// ownerUsage is one owner's line of the operator's view.
type ownerUsage struct {
	Owner            string           `json:"owner"`
	NumSessions      int64            `json:"num_sessions"`
	SessionsByMemory map[string]int64 `json:"sessions_by_memory_limit"`
	Runs             int64            `json:"runs"`
	RunSeconds       float64          `json:"run_seconds"`
	EgressBytes      int64            `json:"egress_bytes"`
	// BytesStored is what the owner holds now (its containers' files and
	// Files API files), when the store tells it.
	BytesStored *int64 `json:"bytes_stored,omitempty"`
}

// UsageHandler is the operator's view of every owner's usage — owners by
// their hash (the credential itself is never stored) — for the admin
// listener only: GET with start_time (required) and end_time, Unix
// seconds, whole hours.
// held, when not nil, tells each owner's bytes stored.
func UsageHandler(u store.Usage, held store.OwnerBytes, log *zap.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		uq, e := parseUsage(r, time.Now())
		if e != nil {
			writeError(w, e)
			return
		}
		from := uq.from.Truncate(time.Hour)
		all, err := u.Owners(r.Context(), from, uq.end)
		if err != nil {
			log.Error("usage store failed", zap.Error(err))
			writeError(w, apierror.Server(http.StatusInternalServerError, "", "The usage store is unavailable; try again later."))
			return
		}
		out := struct {
			Object    string       `json:"object"`
			StartTime int64        `json:"start_time"`
			EndTime   int64        `json:"end_time"`
			Data      []ownerUsage `json:"data"`
		}{Object: "list", StartTime: from.Unix(), EndTime: uq.end.Unix(), Data: []ownerUsage{}}
		for o, d := range all {
			ou := ownerUsage{Owner: o, NumSessions: d.Sessions, SessionsByMemory: d.SessionsByMemory,
				Runs: d.Runs, RunSeconds: float64(d.RunMillis) / 1000, EgressBytes: d.EgressBytes}
			if held != nil {
				if n, err := held.OwnerBytes(r.Context(), o); err == nil {
					ou.BytesStored = &n
				}
			}
			out.Data = append(out.Data, ou)
		}
		sort.Slice(out.Data, func(i, j int) bool { return out.Data[i].Owner < out.Data[j].Owner })
		writeJSON(w, http.StatusOK, out)
	})
}
