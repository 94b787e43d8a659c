package main

import (
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"

	"github.com/spf13/cobra"

	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/daemon"
	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/api"
	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/webhook"
	"github.com/argocd-image-resolver/argocd-image-resolver/notify"
	"github.com/argocd-image-resolver/argocd-image-resolver/render"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

var daemonLong = `The daemon holds one TTL-cached view of the registries for every render in the pod:
tag lists (--tag-ttl), tag digests (--head-ttl), manifests and configs by digest
(size-bounded, never expire), with singleflight, refresh-ahead, stale-if-error
(--stale-if-error) and per-registry rate limits (--rate-limit). generate reaches it on
the unix socket (--socket, env ` + api.SocketEnv + `); /metrics, /healthz and /readyz are
served on --metrics-addr.

Every setting can be given, in increasing precedence, in the YAML file (--config, env
` + config.ConfigEnv + `; keys as in this example), in its environment variable, or as a flag:

` + indent(config.ExampleFile, "  ") + `

The same file (` + config.ConfigEnv + `) and variables configure generate, preview and resolve,
so a render without the daemon uses the same registries, credentials and limits.

Argo CD keeps rendered manifests per commit (24h), so a new tag would reach an app only
at its next render. With --refresh hard (the default) the daemon remembers the apps it
rendered, re-resolves them as tag lists expire and, when an app's answer changes, sets
argocd.argoproj.io/refresh=hard on its Application through the Kubernetes API
(in-cluster, else $KUBECONFIG; RBAC: get and patch on applications.argoproj.io, see
deploy/rbac.yaml), at most once per --refresh-interval per app. Without a Kubernetes API
it says so at start and serves renders as before. See docs/freshness.md.

The socket is created with mode 0600 in a directory only the sidecar's user may write
(one writable by others without the sticky bit is refused). Whoever can connect is
trusted for the app name it sends: in the sidecar that is Argo CD's CMP server in the
same pod.`

func newServeCommand() *cobra.Command {
	var (
		flags *config.Flags
		logs  logFlags
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the daemon: the cached registry view shared by every render in the pod",
		Long:  daemonLong + "\n\nExit status: 0 stopped by SIGTERM or SIGINT, 2 bad configuration, 4 a server failed.",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, cfg, err := daemonSettings(cmd, &logs, flags)
			if err != nil {
				return err
			}
			daemon.TuneGC()
			d, err := daemon.New(cfg, daemonOptions(cfg, log)...)
			if err != nil {
				return err
			}
			d.LimitMemory()
			// cmd.Context() ends on SIGTERM/SIGINT: Run then stops gracefully.
			return d.Run(cmd.Context())
		},
	}
	flags = config.AddFlags(cmd.Flags())
	logs.add(cmd)
	return cmd
}

// daemonSettings reads the logging flags and the daemon's configuration (file, env,
// flags), for serve and sidecar alike.
func daemonSettings(cmd *cobra.Command, logs *logFlags, flags *config.Flags) (*slog.Logger, config.Config, error) {
	log, err := logs.logger(cmd.ErrOrStderr())
	if err != nil {
		return nil, config.Config{}, err
	}
	cfg, err := flags.Load(os.LookupEnv)
	return log, cfg, err
}

// daemonOptions wires the daemon's collaborators: its logger and, with refresh:
// hard, the notifier of its refresh loop (the Kubernetes API: in-cluster, else
// $KUBECONFIG). Without a Kubernetes API the daemon serves renders and says that
// the loop is off.
func daemonOptions(cfg config.Config, log *slog.Logger) []daemon.Option {
	opts := []daemon.Option{daemon.WithLogger(log), daemon.WithRenderWorkers(renderWorkerCommand),
		daemon.WithWebhookListener(webhookListenerCommand)}
	if cfg.Refresh != config.RefreshHard {
		return opts
	}
	kube, err := notify.LoadConfig()
	var n *notify.Kubernetes
	if err == nil {
		n, err = notify.NewKubernetes(kube)
	}
	if err != nil {
		log.Warn("refresh loop off: no Kubernetes API; apps follow new images only when Argo CD renders them again (pin-mode use apps still get new pins committed)", "reason", err)
		return opts
	}
	return append(opts, daemon.WithNotifier(n))
}

// renderWorkerCommand starts a render worker: this program's render-worker command.
func renderWorkerCommand() *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	cmd := exec.Command(exe, "render-worker")
	cmd.Env = workerEnviron(os.Environ())
	return cmd
}

// webhookListenerCommand starts the webhook listener process: this program's
// webhook-listener command. Its secrets come over its standard input, not its
// environment, which keeps only what a render worker's keeps.
func webhookListenerCommand() *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	cmd := exec.Command(exe, "webhook-listener")
	cmd.Env = workerEnviron(os.Environ())
	return cmd
}

// newWebhookListenerCommand is the daemon's webhook listener: it serves the
// registry webhooks on the listener it inherits (fd 3), at a lower priority,
// handing their pushes to the daemon over its standard output
// (webhook.ServeProcess), until the daemon closes its standard input.
func newWebhookListenerCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "webhook-listener",
		Short:  "Serve the registry webhooks for a daemon, at a lower priority (started by serve and sidecar)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return webhook.ServeProcess(cmd.InOrStdin(), cmd.OutOrStdout(), os.NewFile(3, "webhook listener"))
		},
	}
}

// workerEnviron is what a render worker inherits of the daemon's environment: only
// what a process needs to run. A render reads nothing from the environment (Argo
// CD's variables come with each request), and a hostile chart runs in the worker:
// credentials (REDIS_PASSWORD, tokens, DOCKER_CONFIG) and settings stay with the
// daemon. The proxy variables go along: a render fetches the Kustomize remote
// entries an operator allowed (kustomizeRemoteHosts) through the proxy the daemon's
// registry requests use; neither Helm's templates nor Kustomize without plugins can
// read the environment.
func workerEnviron(environ []string) []string {
	var out []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "PATH", "HOME", "TMPDIR", "TZ", "LANG", "GODEBUG", "GOMAXPROCS",
			"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy":
			out = append(out, kv)
		}
	}
	return out
}

// newRenderWorkerCommand is the daemon's render worker: it renders the requests a
// daemon writes on its standard input, one at a time (render.ServeWorker), until
// the daemon closes it or kills it.
func newRenderWorkerCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "render-worker",
		Short:  "Render for a daemon, in a process it can stop (started by serve and sidecar)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return render.ServeWorker(cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
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
