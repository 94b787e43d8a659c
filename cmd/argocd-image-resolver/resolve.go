package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

func newResolveCommand() *cobra.Command {
	var (
		spec       resolve.PolicySpec
		insecure   bool
		explain    bool
		output     string
		registries string
		app        string
	)
	cmd := &cobra.Command{
		Use:   "resolve IMAGE",
		Short: "Resolve one image repository to the tag its policy selects",
		Long: `Resolve IMAGE, written repo[:constraint] as in an image-list entry, to the
tag a policy selects, and say why.

Exit status: 0 resolved, 1 no tag qualifies, 2 bad input, 3 registry error.`,
		Example: `  argocd-image-resolver resolve ghcr.io/org/app:~1.2 --platforms linux/arm64
  argocd-image-resolver resolve nginx --strategy newest-build --allow-tags 'regexp:^1\.' --explain`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "text" && output != "json" {
				return &resolve.InputError{Field: "--output", Value: output, Accepted: "text, json"}
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
			policy, err := spec.Compile()
			if err != nil {
				return flagError(err)
			}
			reg, err := newConfiguredRemote(registries, resolve.WithInsecure(insecure))
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if app != "" {
				ctx = resolve.WithApp(ctx, app)
			}
			res, err := resolve.NewResolver(reg).Resolve(ctx, repo, written, policy)
			var noTag *resolve.NoTagError
			if err != nil && !errors.As(err, &noTag) {
				return err
			}
			if noTag != nil {
				res = noTag.Result
			}
			out := cmd.OutOrStdout()
			if output == "json" {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if werr := enc.Encode(res); werr != nil {
					return werr
				}
			} else if werr := res.WriteText(out, explain); werr != nil {
				return werr
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&spec.Strategy, "strategy", "semver", "update strategy: "+strings.Join(strategyNames(), ", "))
	f.StringVar(&spec.Strategy, "update-strategy", "semver", "alias of --strategy")
	f.StringVar(&spec.Constraint, "constraint", "", "semver range (semver) or the tag to follow (digest)")
	f.StringVar(&spec.Constraint, "semver-constraint", "", "alias of --constraint")
	f.StringVar(&spec.AllowTags, "allow-tags", "", "regexp:EXPR, glob:PATTERN or any")
	f.StringArrayVar(&spec.IgnoreTags, "ignore-tags", nil, "globs (comma-separated) or regexp:EXPR; repeatable")
	f.StringSliceVar(&spec.Platforms, "platforms", nil, "platforms every chosen tag must have: os/arch[/variant],...")
	f.BoolVar(&spec.PinDigest, "pin-digest", false, "write tag@sha256:digest")
	f.BoolVar(&insecure, "insecure", false, "allow plain HTTP and unverified TLS for this registry")
	f.StringVar(&registries, "registries-config", os.Getenv(registriesConfigEnv), "registries configuration file (default $"+registriesConfigEnv+")")
	f.StringVar(&app, "app", "", "Argo CD app name to resolve as (for registries whose credentials are scoped to apps)")
	f.BoolVar(&explain, "explain", false, "show every candidate considered and why it won or was passed over")
	f.StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}

// flagError relabels policy field names as the flags that set them.
func flagError(err error) error {
	var ie *resolve.InputError
	if errors.As(err, &ie) {
		field := ie.Field
		if field == "update-strategy" {
			field = "strategy"
		}
		return resolve.WithField(err, "--"+field)
	}
	return err
}

func strategyNames() []string {
	var out []string
	for _, s := range resolve.Strategies {
		out = append(out, string(s))
	}
	return out
}

// registriesConfigEnv names the registries configuration file for every command.
const registriesConfigEnv = "IMAGE_RESOLVER_REGISTRIES_CONFIG"
