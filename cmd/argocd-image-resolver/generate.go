package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/argocd-image-resolver/argocd-image-resolver/cache"
	"github.com/argocd-image-resolver/argocd-image-resolver/plugin"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

func newGenerateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "generate",
		Short: "Render the app in the current directory with resolved images (the CMP generate command)",
		Long: `Render the application in the current directory as Argo CD's CMP server asks:
environment from Argo CD (ARGOCD_APP_*, ARGOCD_ENV_*, ARGOCD_APP_PARAMETERS), manifests on
stdout, diagnostics on stderr. Nothing is printed on stdout unless every image a policy
names resolved.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env, err := plugin.EnvFromEnviron(os.Environ())
			if err != nil {
				return oneLine(err)
			}
			batch := batchFor(cmd.ErrOrStderr())
			out, report, err := renderApp(cmd.Context(), ".", env, batch)
			writeNotes(cmd.ErrOrStderr(), report)
			if err != nil {
				return oneLine(err)
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
}

// batchFor returns how to resolve: through the daemon's cached view when it answers
// on its socket, else directly with a cold client, said in one line on stderr. The
// daemon is an optimisation, never a single point of failure for rendering.
func batchFor(stderr io.Writer) resolve.Batch {
	return &fallbackBatch{daemon: cache.NewClient(cache.SocketFromEnv()), stderr: stderr}
}

// fallbackBatch asks the daemon and, if it cannot be reached, resolves directly.
type fallbackBatch struct {
	daemon *cache.Client
	stderr io.Writer
}

func (f *fallbackBatch) ResolveBatch(ctx context.Context, app string, reqs []resolve.Request) ([]resolve.Answer, error) {
	answers, err := f.daemon.ResolveBatch(ctx, app, reqs)
	if err == nil || !errors.Is(err, cache.ErrUnreachable) {
		return answers, err
	}
	fmt.Fprintf(f.stderr, "argocd-image-resolver: daemon unreachable (%v); resolving directly, without its cache\n", err)
	reg, rerr := newConfiguredRemote(os.Getenv(registriesConfigEnv))
	if rerr != nil {
		return nil, rerr
	}
	return resolve.NewResolver(reg).ResolveBatch(ctx, app, reqs)
}

// writeNotes tells stderr what a render resolved, skipped, served stale or warned
// about. Argo CD logs the stderr of a successful run and shows that of a failed one.
func writeNotes(w io.Writer, r *renderReport) {
	if r == nil {
		return
	}
	for _, n := range r.notes {
		fmt.Fprintf(w, "argocd-image-resolver: warning: %s\n", n)
	}
	for _, s := range r.stale {
		fmt.Fprintf(w, "argocd-image-resolver: stale: %s\n", s)
	}
}

// oneLine joins a multi-error into one line, as Argo CD shows it in the app's
// condition, with exit status 1: a CMP command either rendered or failed.
func oneLine(err error) error {
	msg := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", " ; ")), " ")
	return &exitError{code: 1, err: fmt.Errorf("%s", msg)}
}

func newParametersCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "parameters",
		Short: "Print the dynamic parameter announcement Argo CD's UI shows",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out, err := plugin.Announce(".")
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
	)
	cmd := &cobra.Command{
		Use:   "preview [DIR]",
		Short: "Render an app locally as the plugin would and show which tag each image resolves to",
		Example: `  argocd-image-resolver preview testdata/apps/helm-web
  argocd-image-resolver preview . --param image-list=web=ghcr.io/org/web:~1.2 --param web.platforms=linux/arm64
  argocd-image-resolver preview . -o yaml`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := "."
			if len(args) == 1 {
				dir = args[0]
			}
			if output != "table" && output != "yaml" {
				return &resolve.InputError{Field: "--output", Value: output, Accepted: "table, yaml"}
			}
			environ, err := previewEnviron(appName, appNS, envs, params)
			if err != nil {
				return err
			}
			env, err := plugin.EnvFromEnviron(environ)
			if err != nil {
				return err
			}
			batch := batchFor(cmd.ErrOrStderr())
			out, report, err := renderApp(cmd.Context(), dir, env, batch)
			writeNotes(cmd.ErrOrStderr(), report)
			if err != nil {
				return err
			}
			if output == "yaml" {
				_, err = cmd.OutOrStdout().Write(out)
				return err
			}
			return writePreview(cmd.OutOrStdout(), report)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&envs, "env", nil, "plugin env entry NAME=VALUE (ARGOCD_ENV_NAME); repeatable")
	f.StringArrayVar(&params, "param", nil, "plugin parameter name=value (a string parameter); repeatable")
	f.StringVarP(&output, "output", "o", "table", "table or yaml (the manifests Argo CD would get)")
	f.StringVar(&appName, "app-name", "preview", "Application name (ARGOCD_APP_NAME; the Helm release name)")
	f.StringVar(&appNS, "namespace", "default", "destination namespace (ARGOCD_APP_NAMESPACE)")
	return cmd
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

func writePreview(w io.Writer, r *renderReport) error {
	fmt.Fprintf(w, "source: %s\n", r.kind)
	if len(r.subs) == 0 {
		_, err := fmt.Fprintln(w, "no image field is named by a policy; nothing to resolve")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ALIAS\tOBJECT\tFIELD\tIN SOURCE\tRESOLVED\tWHY")
	for _, s := range r.subs {
		res := s.answer.Result
		why := describe(s.req, res)
		for _, sk := range res.Skipped {
			why += fmt.Sprintf("; skipped %s: %s", sk.Tag, sk.Reason)
		}
		if len(res.Stale) > 0 {
			why += "; STALE: " + strings.Join(res.Stale, ", ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.policy.Alias, s.use.Object, s.use.Path, s.use.Raw, s.newRef, why)
	}
	return tw.Flush()
}
