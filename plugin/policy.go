package plugin

import (
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// Parameter names. Per-image parameters are "<alias>.<key>" with the keys below;
// the same keys without an alias are application-wide defaults for every image.
// They mirror argocd-image-updater's annotation keys without the
// "argocd-image-updater.argoproj.io/" prefix.
const (
	ParamImageList      = "image-list"
	ParamPinMode        = "pin-mode"
	ParamPinTarget      = "pin-target"
	ParamPinBranch      = "pin-branch"
	ParamPinPush        = "pin-push"
	ParamPinPRGroup     = "pin-pr-group"
	ParamRefresh        = "refresh"
	ParamValuesFiles    = "values-files"
	ParamHelmParameters = "helm-parameters"
	ParamValues         = "values"
	// ParamDirectoryRecurse, ParamDirectoryInclude and ParamDirectoryExclude are
	// Argo CD's spec.source.directory options recurse, include and exclude, for an
	// app rendered as a directory of plain manifests.
	ParamDirectoryRecurse = "directory-recurse"
	ParamDirectoryInclude = "directory-include"
	ParamDirectoryExclude = "directory-exclude"

	KeyUpdateStrategy = "update-strategy"
	KeyAllowTags      = "allow-tags"
	KeyIgnoreTags     = "ignore-tags"
	KeyPlatforms      = "platforms"
	KeyPinDigest      = "pin-digest"
	// KeyVerifyIdentity, KeyVerifyIssuer and KeyVerifyKey require the chosen tag to
	// be signed: by a keyless certificate identity and its OIDC issuer, or by the
	// operator's public key of that name (docs/signatures.md).
	KeyVerifyIdentity = "verify-identity"
	KeyVerifyIssuer   = "verify-issuer"
	KeyVerifyKey      = "verify-key"
	// KeyTagMatch is argocd-image-updater's deprecated name of allow-tags; accepted
	// per image with a warning, as argocd-image-updater does.
	KeyTagMatch = "tag-match"
)

// Pin modes (docs/pins.md, The three modes).
const (
	PinOff   = pin.ModeOff
	PinWrite = pin.ModeWrite
	PinUse   = pin.ModeUse
)

// How pins reach the pin branch (parameter pin-push, policy file key pinPush):
// committed to it, or proposed to it as a pull request (docs/pins.md).
const (
	PinPushDirect      = "direct"
	PinPushPullRequest = "pull-request"
)

// What one pull request carries with pin-push pull-request (parameter
// pin-pr-group, policy file key pinPRGroup): the pins of one app (branch
// image-resolver/<app>), or of every app of the repository and base branch.
const (
	PinPRGroupApp        = "app"
	PinPRGroupRepository = "repository"
)

// Per-alias keys naming an image's keys in a Helm values file, for pin-target
// helmvalues:<path> (argocd-image-updater's names).
const (
	KeyHelmImageTag  = "helm.image-tag"
	KeyHelmImageName = "helm.image-name"
	KeyHelmImageSpec = "helm.image-spec"
)

// Refresh modes of one app (parameter refresh): follow the sidecar's refresh
// setting, or never ask Argo CD to render this app again when its images change.
const (
	RefreshHard = "hard"
	RefreshOff  = "off"
)

// Accepted forms, for messages and tooltips.
const (
	refreshAccepted    = "hard (the default: the sidecar asks Argo CD to render the app again when a new image matches) or off"
	allowAccepted      = "regexp:EXPR, glob:PATTERN or any"
	ignoreAccepted     = "globs, comma-separated or one per array item (regexp:EXPR takes a whole item)"
	platformsAccepted  = "os/arch[/variant], comma-separated or one per array item, e.g. linux/amd64,linux/arm64"
	pinDigestAccepted  = "true or false"
	pinModeAccepted    = "off (resolve at every render), write (resolve, and commit the references to git) or use (render from the pins in git; new matches are committed as new pins)"
	pinBranchAccepted  = "a git branch name (the branch must exist), e.g. image-pins"
	pinPushAccepted    = "direct (the default: pins are committed to the pin branch) or pull-request (pins are proposed to it as a pull request, on a forge the operator configures in git.forges)"
	pinPRGroupAccepted = "app (the default: one pull request per app) or repository (one per repository and base branch), with pin-push pull-request"
	imageListAccepted  = "alias=repository[:constraint], comma-separated or one per array item, e.g. web=ghcr.io/org/web:~1.2"
	aliasAccepted      = "letters, digits, - and _, starting with a letter or digit (/ is read as _)"
	valuesFilesAcc     = "an array of values file paths (or one comma-separated string)"
	helmParametersAcc  = "a map of Helm parameter name to value"
	valuesAccepted     = "a string of Helm values YAML"
	dirRecurseAccepted = "true (read the subdirectories too) or false (the default: the files of the app directory itself), as Argo CD's directory.recurse"
	dirGlobAccepted    = "a glob matched against each file's path relative to the app directory, as Argo CD's directory.include and directory.exclude (gobwas/glob: * also matches /, {a,b} alternatives), e.g. {*.yaml,*.yml} or {config.yaml,tests/*}"
	maxAliasLen        = 128
	allImagesSourceTag = " (all images)"
)

// The verify keys' accepted forms, for messages and tooltips (resolve.VerifySpec
// checks the values).
const (
	verifyIdentityAccepted = "the signer's certificate identity, exact (e.g. https://github.com/org/web/.github/workflows/release.yml@refs/heads/main) or regexp:EXPR (e.g. regexp:^https://github.com/org/web/.github/workflows/release.yml@refs/tags/); with verify-issuer, instead of verify-key"
	verifyIssuerAccepted   = "the OIDC issuer of the signer's certificate, exact (e.g. https://token.actions.githubusercontent.com) or regexp:EXPR; with verify-identity, instead of verify-key"
	verifyKeyAccepted      = "the name of a public key in the operator's trust.keys (letters, digits, ., _, -; never key material); instead of verify-identity and verify-issuer"
)

// Source keys of ImagePolicy.Source: the policy file's key names.
const (
	SourceImage      = "image"
	SourceConstraint = "constraint"
	SourceStrategy   = "strategy"
	SourceAllowTags  = "allowTags"
	SourceIgnoreTags = "ignoreTags"
	SourcePlatforms  = "platforms"
	SourcePinDigest  = "pinDigest"
	// The keys of the policy file's verify mapping.
	SourceVerifyIdentity = "verify.identity"
	SourceVerifyIssuer   = "verify.issuer"
	SourceVerifyKey      = "verify.key"
)

// AppPolicy is the policy of one Application: its images and render settings.
type AppPolicy struct {
	// Images are the image policies, sorted by alias.
	Images []ImagePolicy
	// PinMode is off (resolve live), write (resolve live and record the
	// references in git) or use (render from the pins in git).
	PinMode string
	// Pins says where pins are kept, with pin-mode write or use.
	Pins PinSettings
	// Refresh is RefreshHard, or RefreshOff when the app opted out of the refresh
	// loop (parameter refresh: off).
	Refresh string
	// Helm holds source parameters passed through to the renderer.
	Helm HelmParams
	// Directory holds Argo CD's directory options, passed through to the renderer
	// (read only when the app is a directory of plain manifests).
	Directory DirectoryParams
	// Warnings are accepted but deprecated inputs, each one line naming its source.
	Warnings []string
}

// PinSettings are where an app's pins are kept and committed.
type PinSettings struct {
	// Target is the file the pins are in (pin-target; the pins file by default).
	Target pin.Target
	// Branch is the branch pins are committed to (pin-branch); "" means the
	// app's own (ARGOCD_APP_SOURCE_TARGET_REVISION). With Push
	// PinPushPullRequest it is the pull request's base branch.
	Branch string
	// Push is how pins reach Branch (pin-push): PinPushDirect (the default) or
	// PinPushPullRequest.
	Push string
	// PRGroup is what one pull request carries (pin-pr-group): PinPRGroupApp (the
	// default) or PinPRGroupRepository. It is set whatever Push is, and read only
	// with PinPushPullRequest.
	PRGroup string
}

// HelmParams are the Helm settings given as plugin parameters.
type HelmParams struct {
	ValuesFiles []string
	Parameters  map[string]string
	Values      string
}

// DirectoryParams are Argo CD's directory options given as plugin parameters
// (directory-recurse, directory-include, directory-exclude). The zero value is Argo
// CD's default: every manifest file of the app directory itself.
type DirectoryParams struct {
	// Recurse reads the subdirectories too.
	Recurse bool
	// Include, when set, reads only the files whose relative path matches this glob;
	// Exclude skips those whose relative path matches it, and wins over Include. Both
	// are checked to compile.
	Include string
	Exclude string
}

// ImagePolicy is the checked policy of one image alias.
type ImagePolicy struct {
	Alias string
	// Repo is the normalised repository; Written is the repository as the user wrote it.
	Repo    name.Repository
	Written string
	Spec    resolve.PolicySpec
	Policy  *resolve.Policy
	// Source says where each field that was set came from, keyed by the policy file's
	// key names (image, constraint, strategy, allowTags, ignoreTags, platforms,
	// pinDigest, verify.identity, verify.issuer, verify.key), e.g. "parameter
	// \"web.update-strategy\"", "parameter \"update-strategy\" (all images)" or
	// "file .argocd-image-resolver.yaml key images.web.strategy". Fields left at
	// their defaults are absent.
	Source map[string]string
}

// ForRepo returns the policy whose repository is repo (compared as resolve.RepoKey
// does), or nil. When several aliases name the repository their policies are equal
// (LoadPolicy checks it) and the first alias is returned.
func (a *AppPolicy) ForRepo(repo name.Repository) *ImagePolicy {
	key := resolve.RepoKey(repo)
	for i := range a.Images {
		if resolve.RepoKey(a.Images[i].Repo) == key {
			return &a.Images[i]
		}
	}
	return nil
}

// LoadPolicy reads the policy file of appDir (optional) and merges the parameters over
// it, returning the policy of every image alias.
//
// Precedence, field by field, most specific first: the "<alias>.<key>" parameter, then
// the policy file's images.<alias>.<field>, then the application-wide "<key>"
// parameter (a default for every image, as argocd-image-updater's application-wide
// annotations are), then the built-in default. The image and its constraint are one
// setting: an image-list entry for an alias sets both and replaces the file's image
// and constraint for that alias; aliases only in the file stay.
//
// image-list entries are alias=repository[:constraint]. An entry without "alias=" is
// accepted, as argocd-image-updater accepts it, and gets the alias of its repository's
// last path segment ("." read as "_"); two entries deriving the same alias are an error
// asking for explicit aliases. In the string form entries are separated by commas (a
// constraint needing a comma goes in the array form, or uses a space: ">=1.2 <2").
//
// Two aliases naming the same repository are accepted only with equal policies: the
// rewrite matches images by repository and could not tell which policy applies.
//
// argocd-image-updater's tag-match (per alias) is accepted as allow-tags with a
// warning. <alias>.helm.image-tag, -name and -spec name the values keys of pin-target
// helmvalues:<path> and are errors without it. Its keys that have no meaning here
// (.kustomize.image-name, .force-update, .pull-secret, and write-back-method,
// git-branch, ...) are errors that say why they are not needed (or what they are
// called here) and ask for their removal: the resolver rewrites the rendered output,
// so silently ignoring them would hide a changed behaviour, and a warning would go
// unseen (Argo CD only logs the stderr of a successful run).
//
// Every problem found is reported, one line each (errors.Join), naming the parameter
// or file key, the value and the accepted forms.
func LoadPolicy(appDir string, params Parameters) (*AppPolicy, error) {
	return LoadPolicyIn("", appDir, params)
}

// LoadPolicyIn is LoadPolicy with the policy file confined to the repository checkout
// repoRoot (see RepoRoot) rather than to appDir: a symbolic link to a shared policy
// file elsewhere in the repository is followed, one that leaves it is refused.
func LoadPolicyIn(repoRoot, appDir string, params Parameters) (*AppPolicy, error) {
	pf, err := readPolicyFile(repoRoot, appDir)
	if err != nil {
		return nil, err
	}
	return buildPolicy(pf, params)
}
