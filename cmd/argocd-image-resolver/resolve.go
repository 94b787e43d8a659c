package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/internal/compose"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

func newResolveCommand() *cobra.Command {
	var (
		spec     resolve.PolicySpec
		insecure bool
		explain  bool
		output   string
		app      string
		files    *config.Flags
	)
	cmd := &cobra.Command{
		Use:   "resolve IMAGE",
		Short: "Resolve one image repository to the tag its policy selects",
		Long: `Resolve IMAGE, written repo[:constraint] as in an image-list entry, to the
tag a policy selects, and say why: as text (-o text, with every candidate under
--explain), JSON or YAML (-o json|yaml, the result's fields).

Registries, credentials, trust and rate limits come from the operator's
configuration, as for every render.

Environment:
` + configEnvHelp + `

` + exitCodesHelp,
		Example: `  argocd-image-resolver resolve ghcr.io/org/app:~1.2 --platforms linux/arm64
  argocd-image-resolver resolve nginx --strategy newest-build --allow-tags 'regexp:^1\.' --explain`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			format, err := outputFormat(output, "")
			if err != nil {
				return err
			}
			repo, written, constraint, err := resolve.ParseImageSpec(args[0])
			if err != nil {
				return resolve.WithField(err, "IMAGE")
			}
			if constraint != "" && spec.Constraint != "" && constraint != spec.Constraint {
				return &resolve.InputError{Field: "--constraint", Value: spec.Constraint,
					Accepted: fmt.Sprintf("either IMAGE's constraint %q or --constraint, not two different ones", constraint)}
			}
			if spec.Constraint == "" {
				spec.Constraint = constraint
			}
			cfg, err := files.Load(os.LookupEnv)
			if err != nil {
				return err
			}
			if len(spec.Platforms) == 0 {
				// As a render would: the operator's default platforms when none are named.
				spec.Platforms = resolve.PlatformStrings(cfg.DefaultPlatforms)
			}
			policy, err := spec.Compile()
			if err != nil {
				return flagError(err)
			}
			var remoteOpts []resolve.RemoteOption
			if insecure {
				remoteOpts = append(remoteOpts, resolve.WithInsecure(true))
			}
			resolver, err := compose.NewDirectResolver(cfg, nil, remoteOpts...)
			if err != nil {
				return err
			}
			// The same bound as a render's: a registry that accepts and never answers
			// costs at most renderTimeout.
			ctx, cancel := context.WithTimeoutCause(cmd.Context(), cfg.RenderTimeout,
				fmt.Errorf("the resolution did not finish within %s (renderTimeout)", cfg.RenderTimeout))
			defer cancel()
			if app != "" {
				ctx = resolve.WithApp(ctx, app)
			}
			res, err := resolver.Resolve(ctx, repo, written, policy)
			if err != nil && ctx.Err() != nil {
				err = fmt.Errorf("%w: %w", context.Cause(ctx), err)
			}
			var noTag *resolve.NoTagError
			if err != nil && !errors.As(err, &noTag) {
				return err
			}
			if noTag != nil {
				res = noTag.Result
			}
			out := cmd.OutOrStdout()
			var werr error
			switch format {
			case "json":
				werr = writeJSON(out, res)
			case "yaml":
				werr = writeYAML(out, res)
			default:
				werr = res.WriteText(out, explain)
			}
			if werr != nil {
				return werr
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&spec.Strategy, "strategy", "semver", "update strategy: "+resolve.StrategyAccepted)
	f.StringVar(&spec.Strategy, "update-strategy", "semver", "alias of --strategy (argocd-image-updater's name)")
	f.StringVar(&spec.Constraint, "constraint", "", "semver range (semver) or the tag to follow (digest)")
	f.StringVar(&spec.Constraint, "semver-constraint", "", "alias of --constraint")
	for _, alias := range []string{"update-strategy", "semver-constraint"} {
		_ = f.MarkHidden(alias) // aliases work, help lists each setting once
	}
	f.StringVar(&spec.AllowTags, "allow-tags", "", "regexp:EXPR, glob:PATTERN or any")
	f.StringArrayVar(&spec.IgnoreTags, "ignore-tags", nil, "globs (comma-separated) or regexp:EXPR; repeatable")
	f.StringSliceVar(&spec.Platforms, "platforms", nil, "platforms every chosen tag must have: os/arch[/variant],... (default: defaultPlatforms of the configuration, as for a render)")
	f.BoolVar(&spec.PinDigest, "pin-digest", false, "write tag@sha256:digest")
	f.BoolVar(&insecure, "insecure", false, "allow plain HTTP and unverified TLS for this registry")
	f.StringVar(&app, "app", "", "Argo CD app name to resolve as (for registries whose credentials are scoped to apps)")
	f.BoolVar(&explain, "explain", false, "show every candidate considered and why it won or was passed over")
	f.StringVarP(&output, "output", "o", "text", "output format: text, json or yaml")
	files = config.AddFileFlags(f)
	return cmd
}

// flagError names the flag that set the policy field an input error is about.
func flagError(err error) error {
	var ie *resolve.InputError
	if !errors.As(err, &ie) {
		return err
	}
	flag, ok := map[resolve.PolicyField]string{
		resolve.FieldStrategy:   "--strategy",
		resolve.FieldConstraint: "--constraint",
		resolve.FieldAllowTags:  "--allow-tags",
		resolve.FieldIgnoreTags: "--ignore-tags",
		resolve.FieldPlatforms:  "--platforms",
	}[ie.Policy]
	if !ok {
		return err
	}
	return resolve.WithField(err, flag)
}
