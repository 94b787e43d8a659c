package resolve

import (
	"cmp"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// Accepted forms of a registries entry's requireSignature.
const (
	requireAccepted         = "{identity, issuer} (a keyless signer) or {key} (a name in trust.keys)"
	requireIdentityAccepted = "the signer's certificate identity, exact (https://github.com/org/repo/.github/workflows/release.yml@refs/heads/main) or regexp:EXPR; with issuer, without key"
	requireIssuerAccepted   = "the OIDC issuer of the signer's certificate, exact (https://token.actions.githubusercontent.com) or regexp:EXPR; with identity, without key"
	requireKeyAccepted      = "the name of a public key in trust.keys (a letter or digit, then up to 62 letters, digits, ., _ or -); without identity and issuer"
)

// requireField names a registries entry's requireSignature (sub: one of its
// fields, or "" for the whole) in errors.
func requireField(source, prefix, sub string) string {
	f := fmt.Sprintf("registries entry %q: requireSignature", prefix)
	if sub != "" {
		f += "." + sub
	}
	if source != "" {
		f = source + ": " + f
	}
	return f
}

// compileRequirement checks the requireSignature of the entry for prefix: an
// *InputError naming the entry, the field, the value and what is accepted.
func compileRequirement(source, prefix string, s VerifySpec) (*Trust, error) {
	s = VerifySpec{Identity: strings.TrimSpace(s.Identity), Issuer: strings.TrimSpace(s.Issuer), Key: strings.TrimSpace(s.Key)}
	bad := func(sub, value string, err error) error {
		accepted := map[string]string{"": requireAccepted, "identity": requireIdentityAccepted,
			"issuer": requireIssuerAccepted, "key": requireKeyAccepted}[sub]
		return &InputError{Field: requireField(source, prefix, sub), Value: value, Accepted: accepted, Err: err}
	}
	switch {
	case s.IsZero():
		return nil, bad("", "{}", errors.New("it requires nothing"))
	case s.Key != "" && s.Identity != "":
		return nil, bad("identity", s.Identity, fmt.Errorf("key %q is set too: a requirement names a key or a keyless signer, not both", s.Key))
	case s.Key != "" && s.Issuer != "":
		return nil, bad("issuer", s.Issuer, fmt.Errorf("key %q is set too: a requirement names a key or a keyless signer, not both", s.Key))
	case s.Key == "" && s.Identity == "":
		return nil, bad("identity", "", fmt.Errorf("issuer %q needs the identity it issued", s.Issuer))
	case s.Key == "" && s.Issuer == "":
		return nil, bad("issuer", "", fmt.Errorf("identity %q needs its OIDC issuer", s.Identity))
	}
	t, err := s.Compile()
	if err != nil {
		var ie *InputError
		if !errors.As(err, &ie) {
			return nil, fmt.Errorf("%s: %w", requireField(source, prefix, ""), err)
		}
		sub := map[PolicyField]string{FieldVerifyIdentity: "identity", FieldVerifyIssuer: "issuer", FieldVerifyKey: "key"}[ie.Policy]
		return nil, bad(sub, ie.Value, ie.Err)
	}
	return t, nil
}

// requirement is the signature requirement in force under one entry's prefix:
// the merge of its own and every broader entry's requireSignature.
type requirement struct {
	trust *Trust
	by    string // who set it, for messages
	err   error  // a requirement that does not compile or conflicts: fail closed
}

// requirements computes, for every entry of cfgs, the requirement in force under
// its prefix: its own requireSignature and that of every entry whose prefix
// contains it (ghcr.io for ghcr.io/org), merged with MergeTrust, so that a more
// specific entry can add to an operator's requirement and never lifts it. The
// first requirement that does not compile or conflicts with a broader one is
// returned as the error (it is also kept in the map).
func requirements(source string, cfgs []RegistryConfig) (map[string]requirement, error) {
	own := map[string]*Trust{}
	var firstErr error
	out := map[string]requirement{}
	for _, rc := range cfgs {
		if rc.RequireSignature == nil {
			continue
		}
		t, err := compileRequirement(source, rc.Prefix, *rc.RequireSignature)
		if err != nil {
			out[rc.Prefix] = requirement{err: err}
			firstErr = cmp.Or(firstErr, err)
			continue
		}
		own[rc.Prefix] = t
	}
	for _, rc := range cfgs {
		if _, failed := out[rc.Prefix]; failed {
			continue
		}
		r := mergeRequirements(source, rc.Prefix, cfgs, own)
		if r.err != nil {
			firstErr = cmp.Or(firstErr, r.err)
		}
		if r.trust != nil || r.err != nil {
			out[rc.Prefix] = r
		}
	}
	return out, firstErr
}

// mergeRequirements merges the requirements of the entries whose prefix
// contains prefix, broadest first.
func mergeRequirements(source, prefix string, cfgs []RegistryConfig, own map[string]*Trust) requirement {
	var outer []string
	for _, rc := range cfgs {
		if own[rc.Prefix] != nil && (prefix == rc.Prefix || strings.HasPrefix(prefix, rc.Prefix+"/")) {
			outer = append(outer, rc.Prefix)
		}
	}
	sort.Slice(outer, func(i, j int) bool { return len(outer[i]) < len(outer[j]) })
	var r requirement
	for i, p := range outer {
		merged, err := MergeTrust(r.trust, r.by, own[p])
		if err != nil {
			var ie *InputError
			if errors.As(err, &ie) {
				sub := map[PolicyField]string{FieldVerifyIdentity: "identity", FieldVerifyIssuer: "issuer", FieldVerifyKey: "key"}[ie.Policy]
				err = &InputError{Field: requireField(source, p, sub), Value: ie.Value, Err: ie.Err,
					Accepted: "a requirement compatible with " + r.by + " (" + r.trust.Describe() + "): a more specific entry adds to a broader one's requirement, it cannot replace it"}
			}
			return requirement{err: err}
		}
		r = requirement{trust: merged, by: requiredBy(outer[:i+1])}
	}
	return r
}

// requiredBy names the entries a requirement comes from.
func requiredBy(prefixes []string) string {
	q := make([]string, len(prefixes))
	for i, p := range prefixes {
		q[i] = strconv.Quote(p)
	}
	if len(q) == 1 {
		return "registries entry " + q[0] + " requireSignature"
	}
	return "registries entries " + strings.Join(q[:len(q)-1], ", ") + " and " + q[len(q)-1] + " requireSignature"
}

// invalidRequirementKey is the key of the requirement RequiredTrust returns for an
// entry whose requireSignature is invalid: no configured key can have this name
// (it is outside the key-name grammar), so nothing verifies and nothing under the
// prefix resolves unchecked.
const invalidRequirementKey = "(invalid requireSignature)"

// RequiredTrust returns the operator's signature requirement for repo and who
// set it (for resolve.WithRequiredTrust): the requireSignature of the entry with
// the longest prefix matching repo merged with that of every broader matching
// entry (nil, "" when none requires one). A table built from entries that
// ParseRegistries did not check may hold an invalid or conflicting requirement:
// it fails closed, with a requirement no signature satisfies and the reason in
// who set it.
func (t RegistryTable) RequiredTrust(repo name.Repository) (*Trust, string) {
	rc, ok := t.t.lookup(repo)
	if !ok {
		return nil, ""
	}
	r, ok := t.req[rc.Prefix]
	switch {
	case !ok:
		return nil, ""
	case r.err != nil:
		return &Trust{Key: invalidRequirementKey}, fmt.Sprintf("registries entry %q requireSignature (invalid: %v)", rc.Prefix, r.err)
	}
	return r.trust, r.by
}
