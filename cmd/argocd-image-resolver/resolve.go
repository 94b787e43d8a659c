package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/internal/compose"
	"github.com/argocd-image-resolver/argocd-image-resolver/plugin"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// resolveCommand is the resolve command's flags and its run, in steps.
type resolveCommand struct {
	spec     resolve.PolicySpec
	insecure bool
	explain  bool
	output   string
	app      string
	files    *config.Flags

	// newResolver builds the resolver (compose.NewDirectResolver; tests give
	// their own signature verifier).
	newResolver func(config.Config, ...resolve.RemoteOption) (*resolve.Resolver, error)
}

func newResolveCommand() *cobra.Command {
	return resolveCommandFor(&resolveCommand{newResolver: func(c config.Config, opts ...resolve.RemoteOption) (*resolve.Resolver, error) {
		return compose.NewDirectResolver(c, nil, opts...)
	}})
}

// resolveCommandFor is the resolve command running rc.
func resolveCommandFor(rc *resolveCommand) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "resolve IMAGE",
		Short: "Resolve one image repository to the tag its policy selects",
		Long: `Resolve IMAGE, written repo[:constraint] as in an image-list entry, to the
tag a policy selects, and say why: as text (-o text, with every candidate under
--explain), JSON or YAML (-o json|yaml, the result's fields). Under newest-build,
alphabetical and numeric a tag in IMAGE is ignored with a warning, as in an
image-list entry; --constraint is refused there.

Registries, credentials, trust and rate limits come from the operator's
configuration, as for every render.

Environment:
` + configEnvHelp + `

` + exitCodesHelp,
		Example: `  argocd-image-resolver resolve ghcr.io/org/app:~1.2 --platforms linux/arm64
  argocd-image-resolver resolve nginx --strategy newest-build --allow-tags 'regexp:^1\.' --explain
  argocd-image-resolver resolve ghcr.io/org/app:^1 --explain \
    --verify-identity 'regexp:^https://github.com/org/app/.github/workflows/release.yml@refs/tags/' \
    --verify-issuer https://token.actions.githubusercontent.com`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return rc.run(cmd, args[0]) },
	}
	rc.addFlags(cmd.Flags())
	return cmd
}

func (rc *resolveCommand) addFlags(f *pflag.FlagSet) {
	f.StringVar(&rc.spec.Strategy, "strategy", "semver", "update strategy: "+resolve.StrategyAccepted)
	f.StringVar(&rc.spec.Strategy, "update-strategy", "semver", "alias of --strategy (argocd-image-updater's name)")
	f.StringVar(&rc.spec.Constraint, "constraint", "", "semver range (semver) or the tag to follow (digest)")
	f.StringVar(&rc.spec.Constraint, "semver-constraint", "", "alias of --constraint")
	for _, alias := range []string{"update-strategy", "semver-constraint"} {
		_ = f.MarkHidden(alias) // aliases work, help lists each setting once
	}
	f.StringVar(&rc.spec.AllowTags, "allow-tags", "", "regexp:EXPR, glob:PATTERN or any")
	f.StringArrayVar(&rc.spec.IgnoreTags, "ignore-tags", nil, "globs (comma-separated) or regexp:EXPR; repeatable")
	f.StringSliceVar(&rc.spec.Platforms, "platforms", nil, "platforms every chosen tag must have: os/arch[/variant],... (default: defaultPlatforms of the configuration, as for a render)")
	f.BoolVar(&rc.spec.PinDigest, "pin-digest", false, "write tag@sha256:digest")
	f.StringVar(&rc.spec.Verify.Identity, "verify-identity", "", "require a keyless signature by this certificate identity: exact, or regexp:EXPR (with --verify-issuer)")
	f.StringVar(&rc.spec.Verify.Issuer, "verify-issuer", "", "the OIDC issuer of the signer's certificate, e.g. https://token.actions.githubusercontent.com (exact or regexp:EXPR)")
	f.StringVar(&rc.spec.Verify.Key, "verify-key", "", "require a signature by the public key of this name in the configuration's trust.keys")
	f.BoolVar(&rc.insecure, "insecure", false, "allow plain HTTP and unverified TLS for this registry")
	f.StringVar(&rc.app, "app", "", "Argo CD app name to resolve as (for registries whose credentials are scoped to apps)")
	f.BoolVar(&rc.explain, "explain", false, "show every candidate considered and why it won or was passed over")
	f.StringVarP(&rc.output, "output", "o", "text", "output format: text, json or yaml")
	rc.files = config.AddFileFlags(f)
}

func (rc *resolveCommand) run(cmd *cobra.Command, image string) error {
	format, err := outputFormat(rc.output, "")
	if err != nil {
		return err
	}
	repo, written, constraint, err := resolve.ParseImageSpec(image)
	if err != nil {
		return resolve.WithField(err, "IMAGE")
	}
	// IMAGE:TAG under a strategy with no use for a tag: ignored with a warning, as
	// the plugin ignores an image-list entry's.
	warning, ignored := plugin.IgnoredListTag("IMAGE "+image, constraint, rc.spec.Strategy, "--strategy")
	if ignored {
		constraint = ""
	}
	if constraint != "" && rc.spec.Constraint != "" && constraint != rc.spec.Constraint {
		return &resolve.InputError{Field: "--constraint", Value: rc.spec.Constraint,
			Accepted: fmt.Sprintf("either IMAGE's constraint %q or --constraint, not two different ones", constraint)}
	}
	cfg, err := rc.files.Load(os.LookupEnv)
	if err != nil {
		return err
	}
	policy, err := rc.policy(constraint, cfg)
	if err != nil {
		return err
	}
	res, err := rc.resolve(cmd.Context(), cfg, repo, written, policy)
	var noTag *resolve.NoTagError
	if err != nil && !errors.As(err, &noTag) {
		return err
	}
	if noTag != nil {
		res = noTag.Result
	}
	if ignored && res != nil {
		res.Warnings = append([]string{warning}, res.Warnings...)
	}
	if werr := rc.write(cmd.OutOrStdout(), format, res); werr != nil {
		return werr
	}
	return err
}

// policy compiles the flags' policy, with IMAGE's constraint and, as a render
// would, the operator's default platforms when none are named.
func (rc *resolveCommand) policy(constraint string, cfg config.Config) (*resolve.Policy, error) {
	spec := rc.spec
	if spec.Constraint == "" {
		spec.Constraint = constraint
	}
	if len(spec.Platforms) == 0 {
		spec.Platforms = resolve.PlatformStrings(cfg.DefaultPlatforms)
	}
	if err := plugin.RefuseKeyMaterial("--verify-key", spec.Verify.Key); err != nil {
		return nil, err
	}
	policy, err := spec.Compile()
	if err != nil {
		return nil, flagError(err)
	}
	return policy, nil
}

// resolve reads the registry directly, within the same bound as a render's: a
// registry that accepts and never answers costs at most renderTimeout.
func (rc *resolveCommand) resolve(ctx context.Context, cfg config.Config, repo name.Repository, written string, policy *resolve.Policy) (*resolve.Result, error) {
	var remoteOpts []resolve.RemoteOption
	if rc.insecure {
		remoteOpts = append(remoteOpts, resolve.WithInsecure(true))
	}
	resolver, err := rc.newResolver(cfg, remoteOpts...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, cfg.RenderTimeout,
		fmt.Errorf("the resolution did not finish within %s (renderTimeout)", cfg.RenderTimeout))
	defer cancel()
	if rc.app != "" {
		ctx = resolve.WithApp(ctx, rc.app)
	}
	res, err := resolver.Resolve(ctx, repo, written, policy)
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("%w: %w", context.Cause(ctx), err)
	}
	// The flags' requirement may conflict with the operator's for the registry.
	var ie *resolve.InputError
	if errors.As(err, &ie) && strings.HasPrefix(string(ie.Policy), "verify-") {
		err = flagError(err)
	}
	return res, err
}

func (rc *resolveCommand) write(out io.Writer, format string, res *resolve.Result) error {
	switch format {
	case "json":
		return writeJSON(out, res)
	case "yaml":
		return writeYAML(out, res)
	}
	var b strings.Builder
	if err := res.WriteText(&b, rc.explain); err != nil {
		return err
	}
	_, err := io.WriteString(out, withSigner(b.String(), res.Verified))
	return err
}

// withSigner adds to a result's text, after its platforms line and aligned with
// it, who signed the chosen tag and where the signature was found.
func withSigner(text string, v *resolve.Verified) string {
	const label = "  platforms"
	i := strings.Index(text, "\n"+label)
	if v == nil || i < 0 {
		return text
	}
	line, _, _ := strings.Cut(text[i+1:], "\n")
	col := len(line) - len(strings.TrimLeft(line[len(label):], " "))
	signer := fmt.Sprintf("%-*s%s; signature from %s", col, "  signed by", v.Describe(), v.Source)
	end := i + 1 + len(line) + 1
	return text[:end] + signer + "\n" + text[end:]
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

		resolve.FieldVerifyIdentity: "--verify-identity",
		resolve.FieldVerifyIssuer:   "--verify-issuer",
		resolve.FieldVerifyKey:      "--verify-key",
	}[ie.Policy]
	if !ok {
		return err
	}
	return resolve.WithField(err, flag)
}
