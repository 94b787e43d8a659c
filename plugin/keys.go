package plugin

import (
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// field indexes the settings of an image.
type field int

const (
	fImage field = iota
	fConstraint
	fStrategy
	fAllow
	fIgnore
	fPlatforms
	fPinDigest
	fVerifyIdentity
	fVerifyIssuer
	fVerifyKey
	numFields
)

var fieldSource = [numFields]string{SourceImage, SourceConstraint, SourceStrategy, SourceAllowTags, SourceIgnoreTags, SourcePlatforms, SourcePinDigest,
	SourceVerifyIdentity, SourceVerifyIssuer, SourceVerifyKey}

// verifyFields are the signature requirement's fields, keyless (identity, issuer)
// then key.
var verifyFields = []field{fVerifyIdentity, fVerifyIssuer, fVerifyKey}

// value is one setting as one source gave it.
type value struct {
	set  bool
	str  string          // image (as written), constraint, strategy, allowTags, verify-*
	repo name.Repository // image
	list []string        // ignoreTags, platforms
	b    bool            // pinDigest
	src  string          // for ImagePolicy.Source
	line int             // line in the policy file; 0 for parameters
}

func (v value) label() string {
	if v.line > 0 {
		return fmt.Sprintf("%s (line %d)", v.src, v.line)
	}
	return v.src
}

// imageKey describes a per-image parameter key.
type imageKey struct {
	key      string
	field    field
	kinds    []ParamKind
	accepted string
}

var imageKeys = []imageKey{
	{KeyUpdateStrategy, fStrategy, []ParamKind{KindString}, resolve.StrategyAccepted},
	{KeyAllowTags, fAllow, []ParamKind{KindString}, allowAccepted},
	{KeyIgnoreTags, fIgnore, []ParamKind{KindString, KindArray}, ignoreAccepted},
	{KeyPlatforms, fPlatforms, []ParamKind{KindString, KindArray}, platformsAccepted},
	{KeyPinDigest, fPinDigest, []ParamKind{KindString}, pinDigestAccepted},
	{KeyVerifyIdentity, fVerifyIdentity, []ParamKind{KindString}, verifyIdentityAccepted},
	{KeyVerifyIssuer, fVerifyIssuer, []ParamKind{KindString}, verifyIssuerAccepted},
	{KeyVerifyKey, fVerifyKey, []ParamKind{KindString}, verifyKeyAccepted},
}

func imageKeyFor(key string) (imageKey, bool) {
	if key == KeyTagMatch {
		k, _ := imageKeyFor(KeyAllowTags)
		return k, true
	}
	for _, k := range imageKeys {
		if k.key == key {
			return k, true
		}
	}
	return imageKey{}, false
}

func imageKeyNames() []string {
	var names []string
	for _, k := range imageKeys {
		names = append(names, k.key)
	}
	return names
}

// migrationKeys are argocd-image-updater annotation keys that have no meaning here.
// They are errors rather than warnings: a warning goes to the stderr of a successful
// run, which Argo CD only logs, and each of these keys means the user expects
// behaviour that the resolver provides differently (see the message).
var migrationKeys = map[string]string{
	"kustomize.image-name": "not needed: images are rewritten in the rendered manifests; name in image-list the repository as it appears in the rendered output (after Kustomize's images transformer)",
	"force-update":         "not needed: every image a policy names is rewritten wherever it appears in a pod template of the rendered manifests; image fields of custom resources are declared by the operator",
	"pull-secret":          "not supported: registry credentials are configured on the sidecar by the operator (cloud keychains, docker config, pull secrets)",
}

// migrationGlobal are argocd-image-updater's application-level keys with no meaning here.
var migrationGlobal = map[string]string{
	"force-update":       migrationKeys["force-update"],
	"pull-secret":        migrationKeys["pull-secret"],
	"write-back-method":  "not needed: the rendered manifests carry the resolved tags; to record them in git use parameter pin-mode (write or use), and pin-push pull-request for pins proposed as pull requests (argocd-image-updater's gitConfig.pullRequest)",
	"write-back-target":  "named pin-target here (pins, kustomization or helmvalues:<path>), with parameter pin-mode write or use",
	"git-branch":         "named pin-branch here; pins are committed to the Application's source branch by default, with parameter pin-mode write or use",
	"git-repository":     "not needed: pins are committed to the Application's source repository when parameter pin-mode is write or use",
	"git-commit-message": "not supported per Application: the pin commit message is configured on the sidecar by the operator",
}

func globalNames() []string {
	return []string{ParamImageList, ParamPinMode, ParamPinTarget, ParamPinBranch, ParamPinPush, ParamPinPRGroup, ParamRefresh, ParamValuesFiles, ParamHelmParameters, ParamValues,
		ParamDirectoryRecurse, ParamDirectoryInclude, ParamDirectoryExclude}
}

// acceptedParams describes every accepted parameter name, for unknown-name errors.
func acceptedParams() string {
	keys := strings.Join(imageKeyNames(), ", ")
	return strings.Join(globalNames(), ", ") + "; " + keys + " (defaults for all images); <alias>." +
		strings.ReplaceAll(keys, ", ", ", <alias>.")
}
