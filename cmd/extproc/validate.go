package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/codeinterp/codeinterp/internal/config"
)

// runValidateConfig checks a configuration file the way `serve` would load
// it (defaults, file, CODEINTERP_* environment, validation) and prints "ok"
// with a summary, or returns an error listing every problem.
func runValidateConfig(_ context.Context, args []string) error {
	return validateConfig(args, os.Environ(), os.Stdout, os.Stderr)
}

func validateConfig(args, environ []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("validate-config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	noEnv := fs.Bool("no-env", false, "ignore CODEINTERP_* environment overrides (check the file alone)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: extproc validate-config [--no-env] FILE")
		fs.PrintDefaults()
	}
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return &usageError{"validate-config takes exactly one FILE"}
	}
	file := fs.Arg(0)
	if *noEnv {
		environ = nil
	}
	for _, name := range config.UnknownEnv(environ) {
		fmt.Fprintf(stderr, "warning: %s matches no configuration field (ignored)\n", name)
	}
	c, err := config.LoadEnv(file, environ, checkOptions)
	if err != nil {
		return err
	}
	for _, l := range loweredLimits(c) {
		fmt.Fprintf(stderr, "note: %s\n", l)
	}
	fmt.Fprintf(stdout, "ok: %s\n", file)
	writeSummary(stdout, c, appliedEnv(environ))
	return nil
}

func appliedEnv(environ []string) []string {
	set := map[string]bool{}
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	var out []string
	for _, e := range config.EnvVars() {
		if set[e.Name] {
			out = append(out, e.Name)
		}
	}
	return out
}

func writeSummary(w io.Writer, c *config.Config, env []string) {
	orDefault := func(s, def string) string {
		if s == "" {
			return def
		}
		return s
	}
	admin := "off"
	if c.Server.AdminListen != "" {
		admin = c.Server.AdminListen
		if c.Metrics.Enabled {
			admin += " (metrics at " + c.Metrics.Path + ")"
		}
	}
	override := "off"
	if c.Server.OverrideMessageTimeout > 0 {
		override = c.Server.OverrideMessageTimeout.String() + " (Envoy's max_message_timeout must be at least this)"
	}
	messagesRoutes := "off"
	if len(c.Routes.MessagesPaths) > 0 {
		messagesRoutes = strings.Join(c.Routes.MessagesPaths, ", ") + " (follow-ups to " + c.Upstream.MessagesUpstream() + ")"
	}
	l := c.Sandbox.Limits
	lines := [][2]string{
		{"grpc listen", c.Server.Listen},
		{"admin listen", admin},
		{"routes", strings.Join(c.Routes.Methods, ",") + " " + strings.Join(c.Routes.Paths, ", ")},
		{"messages routes", messagesRoutes},
		{"max body", c.Server.MaxBodyBytes.String()},
		{"message timeout override", override},
		{"function name", c.Interceptor.FunctionName},
		{"loop", fmt.Sprintf("max %d rounds, %d calls per turn, %d calls per request, follow-up %s",
			c.Interceptor.MaxRounds, c.Interceptor.MaxParallelCalls, c.Interceptor.MaxToolCalls, c.Interceptor.FollowUp)},
		{"upstream", fmt.Sprintf("%s (timeout %s, forwards %s)", c.Upstream.URL, c.Upstream.Timeout,
			orDefault(strings.Join(c.Upstream.ForwardHeaders, ", "), "no headers"))},
		{"sandbox", fmt.Sprintf("%d sessions, %d warm, queue wait %s, cgroup %s under %s",
			c.Sandbox.MaxSessions, c.Sandbox.WarmWorkers, c.Sandbox.QueueWait, c.Sandbox.Isolation.Cgroup, c.Sandbox.Isolation.CgroupParent)},
		{"limits", fmt.Sprintf("run %s, memory %s (max %s) + %s overhead, stdout/stderr %s/%s, %d pids, %g cpus",
			l.RunTimeout, l.GuestMemory, l.MaxGuestMemory, l.WorkerOverhead, l.StdoutBytes, l.StderrBytes, l.Pids, l.CPUs)},
		{"runtime dir", orDefault(c.Sandbox.RuntimeDir, "(found at start-up: newest build under the cache dir)")},
		{"api listen", orDefault(c.API.Listen, "off")},
		{"containers", fmt.Sprintf("expire %s after use (max %s), uploads up to %s, owners by %s, anonymous requests: %s",
			c.API.DefaultExpiry, c.API.MaxExpiry, config.ByteSize(maxUploadBytes(c)), strings.Join(c.API.AuthHeaders, ", "), c.API.Anonymous)},
		{"container bounds", fmt.Sprintf("%s a file, %s and %d files a container",
			config.ByteSize(storeLimits(c).FileBytes), config.ByteSize(storeLimits(c).ContainerBytes), c.Store.Limits.ContainerFiles)},
		{"store", storeSummary(c.Store)},
		{"files source", strings.TrimSpace(c.Files.Source + " " + c.Files.UpstreamURL)},
		{"logging", c.Logging.Level + ", " + c.Logging.Format},
		{"environment overrides", orDefault(strings.Join(env, ", "), "none")},
	}
	for _, kv := range lines {
		fmt.Fprintf(w, "  %-25s %s\n", kv[0]+":", kv[1])
	}
}

func storeSummary(s config.Store) string {
	if s.Backend == config.StoreRedis {
		// Never print a password from the URL.
		if u, err := url.Parse(s.RedisURL); err == nil {
			return "redis " + u.Redacted()
		}
		return "redis"
	}
	return s.Backend
}
