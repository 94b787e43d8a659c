package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/daemon"
	"github.com/argocd-image-resolver/argocd-image-resolver/daemon/api"
	"github.com/argocd-image-resolver/argocd-image-resolver/internal/compose"
	"github.com/argocd-image-resolver/argocd-image-resolver/pipeline"
	"github.com/argocd-image-resolver/argocd-image-resolver/plugin"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// configEnvHelp lists the operator's configuration variables every rendering
// command reads.
var configEnvHelp = `  ` + config.ConfigEnv + `  YAML configuration file (the daemon's; registries: among its keys)
  ` + config.RegistriesConfigEnv + `  registries file, instead of registries: in the configuration
  ` + config.DefaultPlatformsEnv + `  platforms required when neither policy nor workload names any
  ` + config.ExtraImagePathsEnv + `  image fields of custom resources (Kind[.group]:path;...)
  IMAGE_RESOLVER_*  every other daemon setting (see serve --help); DOCKER_CONFIG for docker credentials`

func newGenerateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "generate",
		Short: "Render the app in the current directory with resolved images (the CMP generate command)",
		Long: `Render the application in the current directory as Argo CD's CMP server asks:
environment from Argo CD (ARGOCD_APP_*, ARGOCD_ENV_*, ARGOCD_APP_PARAMETERS), manifests on
stdout, diagnostics on stderr. Nothing is printed on stdout unless every image a policy
names resolved.

The render runs in this process and resolves images directly, with the daemon's
configuration. plugin.yaml names argocd-image-resolver-generate, which hands each
render to the daemon (its cache, its refresh loop) and runs this command only when
the daemon cannot render.

Environment:
  ARGOCD_APP_*, ARGOCD_ENV_*, KUBE_*  what Argo CD gives a plugin
` + configEnvHelp + `

Exit status: 0 rendered, 1 not rendered (the reason on stderr, on one line).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env, err := plugin.EnvFromEnviron(os.Environ())
			if err != nil {
				return oneLine(err)
			}
			cfg, err := config.Load(os.LookupEnv)
			if err != nil {
				return oneLine(err)
			}
			direct, err := compose.NewDirectResolver(cfg, nil)
			if err != nil {
				return oneLine(err)
			}
			out, report, err := pipeline.New(direct, compose.PipelineSettings(cfg)).Render(cmd.Context(), ".", env)
			report.WriteNotes(cmd.ErrOrStderr())
			if err != nil {
				return oneLine(err)
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
}

// directBatch builds, when first needed, the resolver of a render without the
// daemon: the same registries, credentials, trust, limits and app scoping.
func directBatch(cfg config.Config) func() (resolve.Batch, error) {
	return func() (resolve.Batch, error) { return compose.NewDirectResolver(cfg, nil) }
}

// oneLine joins a multi-error into one line, as Argo CD shows it in the app's
// condition, with exit status 1: a CMP command either rendered or failed.
func oneLine(err error) error {
	return &exitError{code: 1, err: fmt.Errorf("%s", daemon.OneLine(err))}
}

func newParametersCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "parameters",
		Short: "Print the dynamic parameter announcement Argo CD's UI shows",
		Long: `Print, as JSON, the parameters Argo CD's UI offers for the app in the current
directory (the CMP parameters.dynamic command).

Exit status: 0 printed, 1 the policy file cannot be read (the reason on stderr).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := filepath.Abs(".")
			if err != nil {
				return err
			}
			// The policy file may be a link to a shared file elsewhere in the
			// repository (ARGOCD_APP_SOURCE_PATH says where the root is), never outside.
			out, err := plugin.Announce(plugin.RepoRoot(dir, os.Getenv(plugin.EnvAppSourcePath)), dir)
			if err != nil {
				return oneLine(err)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), string(out))
			return err
		},
	}
}

func newPreviewCommand() *cobra.Command {
	var (
		envs    []string
		params  []string
		output  string
		appName string
		appNS   string
		socket  string
		files   *config.Flags
	)
	cmd := &cobra.Command{
		Use:   "preview [DIR]",
		Short: "Render an app locally as the plugin would and show which tag each image resolves to",
		Long: `Render the app in DIR (default .) as the plugin would, and show for each image field
the reference in the source, the one resolved and why (-o text), the same as JSON
(-o json), or the manifests Argo CD would get (-o yaml).

Images are resolved directly with the operator's configuration; through a daemon only
when a socket is given (--socket or ` + api.SocketEnv + `).

Environment:
` + configEnvHelp + `
  ` + api.SocketEnv + `  resolve through the daemon on this socket

` + exitCodesHelp,
		Example: `  argocd-image-resolver preview testdata/apps/helm-web
  argocd-image-resolver preview . --param image-list=web=ghcr.io/org/web:~1.2 --param web.platforms=linux/arm64
  argocd-image-resolver preview . -o yaml`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := "."
			if len(args) == 1 {
				dir = args[0]
			}
			format, err := outputFormat(output, "table")
			if err != nil {
				return err
			}
			environ, err := previewEnviron(appName, appNS, envs, params)
			if err != nil {
				return err
			}
			env, err := plugin.EnvFromEnviron(environ)
			if err != nil {
				return err
			}
			cfg, err := files.Load(os.LookupEnv)
			if err != nil {
				return err
			}
			var batch resolve.Batch
			if socket == "" {
				socket = os.Getenv(api.SocketEnv)
			}
			if socket != "" {
				batch = daemon.NewFallback(daemon.NewClient(socket), directBatch(cfg), cmd.ErrOrStderr())
			} else if batch, err = compose.NewDirectResolver(cfg, nil); err != nil {
				return err
			}
			out, report, err := pipeline.New(batch, compose.PipelineSettings(cfg)).Render(cmd.Context(), dir, env)
			report.WriteNotes(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			switch format {
			case "yaml":
				_, err = cmd.OutOrStdout().Write(out)
				return err
			case "json":
				return writeJSON(cmd.OutOrStdout(), report.View())
			}
			return report.WriteTable(cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&envs, "env", nil, "plugin env entry NAME=VALUE (ARGOCD_ENV_NAME); repeatable")
	f.StringArrayVar(&params, "param", nil, "plugin parameter name=value (a string parameter); repeatable")
	f.StringVarP(&output, "output", "o", "text", "text (a table), json (the table's data) or yaml (the manifests Argo CD would get)")
	f.StringVar(&appName, "app-name", "preview", "Application name (ARGOCD_APP_NAME; the Helm release name)")
	f.StringVar(&appNS, "namespace", "default", "destination namespace (ARGOCD_APP_NAMESPACE)")
	f.StringVar(&socket, "socket", "", "resolve through the daemon on this unix socket (env "+api.SocketEnv+")")
	files = config.AddFileFlags(f)
	return cmd
}

// outputFormat checks -o: text, json or yaml everywhere (alias, if not empty, is
// an older name of text).
func outputFormat(v, alias string) (string, error) {
	switch v {
	case "text", "json", "yaml":
		return v, nil
	case alias:
		if alias != "" {
			return "text", nil
		}
	}
	return "", &resolve.InputError{Field: "--output", Value: v, Accepted: "text, json, yaml"}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func writeYAML(w io.Writer, v any) error {
	b, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// previewEnviron builds the environment Argo CD would give generate.
func previewEnviron(app, ns string, envs, params []string) ([]string, error) {
	environ := append(os.Environ(), "ARGOCD_APP_NAME="+app, "ARGOCD_APP_NAMESPACE="+ns,
		"ARGOCD_APP_REVISION=preview", "ARGOCD_APP_SOURCE_PATH=.")
	for _, e := range envs {
		k, v, ok := strings.Cut(e, "=")
		if !ok || k == "" {
			return nil, &resolve.InputError{Field: "--env", Value: e, Accepted: "NAME=VALUE"}
		}
		environ = append(environ, "ARGOCD_ENV_"+k+"="+v)
	}
	type param struct {
		Name   string `json:"name"`
		String string `json:"string"`
	}
	var ps []param
	for _, p := range params {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, &resolve.InputError{Field: "--param", Value: p, Accepted: "name=value"}
		}
		ps = append(ps, param{k, v})
	}
	if len(ps) > 0 {
		b, err := json.Marshal(ps)
		if err != nil {
			return nil, err
		}
		environ = append(environ, "ARGOCD_APP_PARAMETERS="+string(b))
	}
	return environ, nil
}
