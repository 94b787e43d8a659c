package main

import (
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache"
	"github.com/argocd-image-resolver/argocd-image-resolver/plugin/delegate"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

var daemonLong = `The daemon holds one TTL-cached view of the registries for every render in the pod:
tag lists (--tag-ttl), tag digests (--head-ttl), manifests and configs by digest
(size-bounded, never expire), with singleflight, refresh-ahead, stale-if-error
(--stale-if-error) and per-registry rate limits (--rate-limit). generate reaches it on
the unix socket (--socket, env ` + cache.SocketEnv + `); /metrics, /healthz and /readyz are
served on --metrics-addr.

Every setting can be given, in increasing precedence, in the YAML file (--config, env
` + cache.ConfigEnv + `; keys as in this example), in its environment variable, or as a flag:

` + indent(cache.ExampleFile, "  ")

func newServeCommand() *cobra.Command {
	var (
		flags *cache.Flags
		logs  logFlags
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the daemon: the cached registry view shared by every render in the pod",
		Long:  daemonLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, cfg, err := daemonSettings(cmd, &logs, flags)
			if err != nil {
				return err
			}
			d, err := newDaemon(cfg, log)
			if err != nil {
				return err
			}
			// cmd.Context() ends on SIGTERM/SIGINT: Run then stops gracefully.
			return d.Run(cmd.Context())
		},
	}
	flags = cache.AddFlags(cmd.Flags())
	logs.add(cmd)
	return cmd
}

// daemonSettings reads the logging flags and the daemon's configuration (file, env,
// flags), for serve and sidecar alike.
func daemonSettings(cmd *cobra.Command, logs *logFlags, flags *cache.Flags) (*slog.Logger, cache.Config, error) {
	log, err := logs.logger(cmd.ErrOrStderr())
	if err != nil {
		return nil, cache.Config{}, err
	}
	cfg, err := flags.Load(os.LookupEnv)
	return log, cfg, err
}

// newDaemon builds the daemon with the registries' credentials keychain, as
// generate's own client has. The Resolver over the daemon's cache checks each
// entry's apps (the cache passes the Remote's Authorize on) before the cache is read.
func newDaemon(cfg cache.Config, log *slog.Logger) (*cache.Daemon, error) {
	kc, err := newCredentialsKeychain(cfg.Registries)
	if err != nil {
		return nil, err
	}
	d, err := cache.NewDaemon(cfg, cache.WithLogger(log), cache.WithRemoteOptions(resolve.WithKeychain(kc)))
	if err != nil {
		return nil, err
	}
	d.Handle("POST "+delegate.Path, delegatedGenerate(d.Server, log))
	return d, nil
}

// logFlags are the daemon's logging flags.
type logFlags struct{ format, level string }

func (l *logFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&l.format, "log-format", envOr("IMAGE_RESOLVER_LOG_FORMAT", "text"), "log format: text or json (env IMAGE_RESOLVER_LOG_FORMAT)")
	cmd.Flags().StringVar(&l.level, "log-level", envOr("IMAGE_RESOLVER_LOG_LEVEL", "info"), "log level: debug, info, warn or error (env IMAGE_RESOLVER_LOG_LEVEL)")
}

// logger returns a structured logger writing to w.
func (l *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.level)); err != nil {
		return nil, &resolve.InputError{Field: "--log-level", Value: l.level, Accepted: "debug, info, warn, error"}
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(l.format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, &resolve.InputError{Field: "--log-format", Value: l.format, Accepted: "text, json"}
}

// indent prefixes every line of s.
func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n"+prefix)
}

func envOr(key, def string) string {
	if v, ok := os.LookupEnv(key); ok && v != "" {
		return v
	}
	return def
}
