package plugin

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// The signature requirement of an image: parameters <alias>.verify-identity,
// -issuer and -key (and the application-wide verify-*), the policy file's
// images.<alias>.verify: {identity, issuer, key}. They fill resolve.PolicySpec's
// Verify, which checks them.

// fileVerifyKeys are the keys of images.<alias>.verify, in documentation order.
var fileVerifyKeys = []string{"identity", "issuer", "key"}

var (
	verifyParamKey = map[field]string{fVerifyIdentity: KeyVerifyIdentity, fVerifyIssuer: KeyVerifyIssuer, fVerifyKey: KeyVerifyKey}
	verifyFileKey  = map[string]field{"identity": fVerifyIdentity, "issuer": fVerifyIssuer, "key": fVerifyKey}
	verifyFileSub  = map[field]string{fVerifyIdentity: "identity", fVerifyIssuer: "issuer", fVerifyKey: "key"}
)

func isVerify(f field) bool { return f == fVerifyIdentity || f == fVerifyIssuer || f == fVerifyKey }

// given reports whether a value names something (an empty one only clears).
func (v value) given() bool { return v.set && strings.TrimSpace(v.str) != "" }

// settleVerify decides between the two ways to require a signature, a key and a
// keyless identity, once the layers are merged field by field: the most specific
// layer naming either decides (a key there drops the identity and issuer of the
// layers below, an identity or issuer drops their key), and the fields of the way
// it chose keep merging one by one, like every other key: the application-wide
// verify-issuer and a per-image verify-identity make one requirement. A layer
// naming both is left as it is: resolve.VerifySpec.Compile says it is an error.
func settleVerify(merged *[numFields]value, layers []*[numFields]value) {
	for i := len(layers) - 1; i >= 0; i-- {
		l := layers[i]
		key := l[fVerifyKey].given()
		keyless := l[fVerifyIdentity].given() || l[fVerifyIssuer].given()
		switch {
		case key && keyless:
			return
		case key:
			merged[fVerifyIdentity], merged[fVerifyIssuer] = value{}, value{}
			return
		case keyless:
			merged[fVerifyKey] = value{}
			return
		}
	}
}

// checkVerifyValue checks one verify value where it was given, on its own: a
// regexp: that compiles, a key name of the accepted form. An empty value is a
// valid "none".
func checkVerifyValue(f field, s string) error {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	if f == fVerifyKey {
		if err := RefuseKeyMaterial("", s); err != nil {
			return err
		}
	}
	var spec resolve.VerifySpec
	switch f {
	case fVerifyIdentity:
		spec = resolve.VerifySpec{Identity: s, Issuer: "x"}
	case fVerifyIssuer:
		spec = resolve.VerifySpec{Identity: "x", Issuer: s}
	default:
		spec = resolve.VerifySpec{Key: s}
	}
	_, err := spec.Compile()
	return err
}

// RefuseKeyMaterial returns an input error for field when a verify-key value
// holds key material (a PEM block, a long encoded blob) rather than the name of a
// key the operator configured; the error never repeats the value, so a private
// key pasted by mistake goes to no log or UI. Nil otherwise.
func RefuseKeyMaterial(field, v string) error {
	t := strings.TrimSpace(v)
	if !strings.Contains(t, "-----") && !strings.ContainsAny(t, "\r\n") && len(t) <= 64 {
		return nil
	}
	return &resolve.InputError{Field: field, Policy: resolve.FieldVerifyKey, Value: "(not shown)", Accepted: verifyKeyAccepted,
		Err: fmt.Errorf("%d characters that look like key material, not a key name: a policy names a public key the operator configured under trust.keys and never carries a key itself", len(v))}
}

// missingVerifyLabel names where the missing half of a keyless requirement (f,
// the identity or the issuer) goes, beside the half that was given.
func missingVerifyLabel(alias string, merged [numFields]value, f field) string {
	partner := fVerifyIdentity
	if f == fVerifyIdentity {
		partner = fVerifyIssuer
	}
	p := merged[partner]
	var where string
	switch {
	case p.line > 0:
		where = strings.TrimSuffix(p.src, verifyFileSub[partner]) + verifyFileSub[f]
	case strings.HasSuffix(p.src, allImagesSourceTag):
		where = paramSource(verifyParamKey[f]) + allImagesSourceTag
	default:
		where = paramSource(alias + "." + verifyParamKey[f])
	}
	return fmt.Sprintf("%s (not given; needed with %s)", where, p.label())
}

// verifyField reads images.<alias>.verify: a mapping of identity, issuer and key
// to strings.
func (p fileParser) verifyField(fi *fileImage, path string, v *yaml.Node) {
	if !p.mapping(v, path, "a mapping with keys "+strings.Join(fileVerifyKeys, ", ")) {
		return
	}
	p.pairs(v, path, fileVerifyKeys, func(key string, _, n *yaml.Node) {
		sub := path + "." + key
		switch {
		case n.Kind == yaml.AliasNode:
			p.fail(n, sub, "YAML aliases are not supported")
		case isNullNode(n):
		case n.Kind != yaml.ScalarNode:
			p.fail(n, sub, "is %s (accepted: a string)", describeNode(n))
		default:
			fi.vals[verifyFileKey[key]] = value{set: true, str: n.Value, src: "file " + PolicyFileName + " key " + sub, line: n.Line}
		}
	})
}

// verifyAnnouncements announces the verify keys with prefix ("" or "alias."),
// prefilled from spec.
func verifyAnnouncements(prefix, subject string, spec resolve.VerifySpec) []ParameterAnnouncement {
	return []ParameterAnnouncement{
		{
			Name:  prefix + KeyVerifyIdentity,
			Title: subject + ": signed by (identity)",
			Tooltip: "Require a keyless signature (cosign sign in CI) by this certificate identity: the newest tag so signed wins, unsigned or otherwise signed tags are skipped. " +
				"Exact, or regexp:EXPR, e.g. regexp:^https://github.com/org/web/.github/workflows/release.yml@refs/tags/ . Needs verify-issuer. " +
				"Empty: this app requires no signature (the operator may still require one for the registry).",
			ItemType:       "string",
			CollectionType: "string",
			String:         spec.Identity,
		},
		{
			Name:           prefix + KeyVerifyIssuer,
			Title:          subject + ": signed by (OIDC issuer)",
			Tooltip:        "The OIDC issuer of the signer's certificate, with verify-identity: exact or regexp:EXPR, e.g. https://token.actions.githubusercontent.com for GitHub Actions.",
			ItemType:       "string",
			CollectionType: "string",
			String:         spec.Issuer,
		},
		{
			Name:  prefix + KeyVerifyKey,
			Title: subject + ": signed by (key name)",
			Tooltip: "Require a signature by the operator's public key of this name (a name from the sidecar's trust.keys, e.g. release; never key material). " +
				"Instead of verify-identity and verify-issuer.",
			ItemType:       "string",
			CollectionType: "string",
			String:         spec.Key,
		},
	}
}
