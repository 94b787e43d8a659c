package plugin

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// compile builds the checked policy of one alias from its merged values.
func (m *merger) compile(alias string, fi *fileImage, merged [numFields]value) *ImagePolicy {
	if !merged[fImage].set {
		where := fmt.Sprintf("alias %q", alias)
		if fi != nil {
			where = fmt.Sprintf("file %s key images.%s (line %d)", PolicyFileName, fi.key, fi.line)
		}
		m.failf("%s: alias %q has no image (accepted: key images.%s.image in %s, or an entry %s=repository[:constraint] in parameter %s)",
			where, alias, alias, PolicyFileName, alias, ParamImageList)
		return nil
	}
	m.dropIgnoredListTag(alias, &merged)
	spec := resolve.PolicySpec{
		Strategy:   merged[fStrategy].str,
		Constraint: merged[fConstraint].str,
		AllowTags:  resolve.CanonicalAllowTags(merged[fAllow].str),
		IgnoreTags: resolve.CanonicalIgnoreTags(merged[fIgnore].list),
		Platforms:  slices.Clone(merged[fPlatforms].list),
		PinDigest:  merged[fPinDigest].b,
		Verify: resolve.VerifySpec{
			Identity: merged[fVerifyIdentity].str,
			Issuer:   merged[fVerifyIssuer].str,
			Key:      merged[fVerifyKey].str,
		},
	}
	pol, err := spec.Compile()
	if err != nil {
		m.fail(resolve.WithField(err, errorLabel(err, alias, merged, fi)))
		return nil
	}
	ip := &ImagePolicy{
		Alias:   alias,
		Repo:    merged[fImage].repo,
		Written: merged[fImage].str,
		Spec:    spec,
		Policy:  pol,
		Source:  map[string]string{},
	}
	for f := range numFields {
		if merged[f].set {
			ip.Source[fieldSource[f]] = merged[f].src
		}
	}
	return ip
}

// policyFields maps the policy fields of resolve's input errors to the fields here.
var policyFields = map[resolve.PolicyField]field{
	resolve.FieldStrategy:       fStrategy,
	resolve.FieldConstraint:     fConstraint,
	resolve.FieldAllowTags:      fAllow,
	resolve.FieldIgnoreTags:     fIgnore,
	resolve.FieldPlatforms:      fPlatforms,
	resolve.FieldVerifyIdentity: fVerifyIdentity,
	resolve.FieldVerifyIssuer:   fVerifyIssuer,
	resolve.FieldVerifyKey:      fVerifyKey,
}

// errorLabel names, in the user's spelling, where the value a compile error is
// about was given (or would go).
func errorLabel(err error, alias string, merged [numFields]value, fi *fileImage) string {
	var ie *resolve.InputError
	if !errors.As(err, &ie) {
		return fmt.Sprintf("alias %q", alias)
	}
	f, ok := policyFields[ie.Policy]
	if !ok {
		f = fImage
	}
	if isVerify(f) && !merged[f].set {
		return missingVerifyLabel(alias, merged, f)
	}
	label := fieldLabel(alias, merged, f, fi)
	if f == fConstraint && merged[fStrategy].set {
		label += fmt.Sprintf(", with update-strategy %q from %s", merged[fStrategy].str, merged[fStrategy].label())
	}
	return label
}

// fieldLabel names where field f of an alias was given; for a field that was not
// given (a constraint the strategy needs), where it would go: beside the image.
func fieldLabel(alias string, merged [numFields]value, f field, fi *fileImage) string {
	if merged[f].set {
		if f == fConstraint && merged[f].src == paramSource(ParamImageList) {
			return fmt.Sprintf("%s (%s constraint)", merged[f].src, alias)
		}
		return merged[f].label()
	}
	img := merged[fImage]
	if img.line > 0 && fi != nil {
		return fmt.Sprintf("file %s key images.%s.constraint", PolicyFileName, fi.key)
	}
	return fmt.Sprintf("%s (%s constraint)", img.src, alias)
}

// dropIgnoredListTag accepts an image-list entry's tag under a strategy that has no
// use for one, with a warning (IgnoredListTag). A constraint written in the policy
// file stays an error there: the file is this project's vocabulary.
func (m *merger) dropIgnoredListTag(alias string, merged *[numFields]value) {
	c := merged[fConstraint]
	if c.src != paramSource(ParamImageList) {
		return
	}
	where := fmt.Sprintf("%s (%s constraint)", c.src, alias)
	if w, ignored := IgnoredListTag(where, c.str, merged[fStrategy].str, merged[fStrategy].label()); ignored {
		m.warn(w)
		merged[fConstraint] = value{}
	}
}

// IgnoredListTag decides for the tag of an image written repository:tag (an
// image-list entry alias=org/app:latest, resolve's IMAGE) under strategy: the
// strategies that have no use for one (newest-build, alphabetical, numeric) ignore
// it, as argocd-image-updater does, and the warning says so, naming where the tag
// (where) and the strategy (strategyFrom) were given. ignored is false when the tag
// stands: another strategy, an unknown one (compiling the policy says what is
// wrong), or no tag.
func IgnoredListTag(where, tag, strategy, strategyFrom string) (warning string, ignored bool) {
	if strings.TrimSpace(tag) == "" {
		return "", false
	}
	st, _, err := resolve.ParseStrategy(strategy)
	if err != nil || (st != resolve.NewestBuild && st != resolve.Alphabetical && st != resolve.Numeric) {
		return "", false
	}
	return fmt.Sprintf("%s: %q is ignored with update-strategy %s (from %s), as argocd-image-updater ignores it; remove \":%s\" from the entry, and filter tags with allow-tags/ignore-tags",
		where, tag, st, strategyFrom, tag), true
}
