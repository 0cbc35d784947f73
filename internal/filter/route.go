package filter

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/codeinterp/codeinterp/internal/apierror"
	"github.com/codeinterp/codeinterp/internal/processor"
)

// Route is an endpoint the filter serves beside the main processor's
// paths (Config.Paths): its own processor, its own upstream URL (the model
// server's endpoint of the same protocol) and its own error shape. The
// filter maps a request's path to its route at request_headers; nothing
// else of the filter differs between routes.
type Route struct {
	// Name is the route's name in logs ("messages").
	Name string
	// Paths are the exact :path values (query ignored) of the route.
	Paths []string
	// Processor is the endpoint's logic.
	Processor processor.Processor
	// UpstreamURL is where the route's follow-ups go; ForwardHeaders are
	// added to the filter's forwarded headers (the protocol's own
	// credentials and version headers).
	UpstreamURL    string
	ForwardHeaders []string
	// ErrorBody renders the filter's own refusals (a body too large, a
	// misconfigured filter, a request the processor refused) in the
	// route's API shape; nil: OpenAI's.
	ErrorBody func(*apierror.Error) []byte
}

// route is a Route as a stream uses it.
type route struct {
	name      string
	proc      processor.Processor
	url, host string
	forward   []string
	errorBody func(*apierror.Error) []byte
	// main is the main processor's route: background requests are its.
	main bool
}

func (s *Server) addRoutes(rs []Route) error {
	for _, r := range rs {
		if r.Processor == nil || len(r.Paths) == 0 {
			return fmt.Errorf("route %q: a processor and paths are required", r.Name)
		}
		u, err := url.Parse(r.UpstreamURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("route %q: upstream url %q: must be an absolute http(s) URL", r.Name, r.UpstreamURL)
		}
		rt := &route{name: r.Name, proc: r.Processor, url: r.UpstreamURL, host: u.Hostname(), forward: s.forward, errorBody: r.ErrorBody}
		for _, h := range r.ForwardHeaders {
			rt.forward = append(rt.forward, strings.ToLower(h))
		}
		for _, p := range r.Paths {
			if s.routes[p] != nil {
				return errors.New("filter: path " + p + " has two routes")
			}
			s.routes[p] = rt
		}
	}
	return nil
}

// body is e as the route's API writes errors.
func (r *route) body(e *apierror.Error) []byte {
	if r == nil || r.errorBody == nil {
		return e.Body()
	}
	return r.errorBody(e)
}
