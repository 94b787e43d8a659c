package plugin

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// merger gathers every problem and warning found while layering the policy file and
// the parameters, so that all of them are reported at once, not just the first.
type merger struct {
	errs     []error
	warnings []string
}

func (m *merger) fail(err error) { m.errs = append(m.errs, err) }

func (m *merger) failf(format string, args ...any) {
	m.errs = append(m.errs, fmt.Errorf(format, args...))
}

func (m *merger) warn(w string) {
	if !slices.Contains(m.warnings, w) {
		m.warnings = append(m.warnings, w)
	}
}

func paramSource(name string) string { return fmt.Sprintf("parameter %q", name) }

func kindList(kinds []ParamKind) string {
	s := make([]string, len(kinds))
	for i, k := range kinds {
		s[i] = article(k)
	}
	return strings.Join(s, " or ")
}

func article(k ParamKind) string {
	if k == KindArray {
		return "an array"
	}
	return "a " + string(k)
}

// checkKind reports a parameter given as the wrong kind of value.
func (m *merger) checkKind(p Parameter, accepted string, kinds ...ParamKind) bool {
	if slices.Contains(kinds, p.Kind) {
		return true
	}
	m.failf("parameter %q: is %s, expected %s (accepted: %s)", p.Name, article(p.Kind), kindList(kinds), accepted)
	return false
}

type imageListEntry struct {
	alias string
	image value
	cons  value
}

// buildPolicy is LoadPolicy once the file is read: it merges params over pf (nil when
// there is no policy file).
func buildPolicy(pf *policyFile, params Parameters) (*AppPolicy, error) {
	if pf == nil {
		pf = &policyFile{images: map[string]*fileImage{}}
	}
	b := &policyBuilder{
		merger:      &merger{},
		pf:          pf,
		out:         &AppPolicy{PinMode: PinOff, Refresh: RefreshHard},
		pinMode:     pf.pinMode,
		pinTarget:   pf.pinTarget,
		pinBranch:   pf.pinBranch,
		pinPush:     pf.pinPush,
		pinPRGroup:  pf.pinPRGroup,
		helmKeys:    pin.HelmKeys{},
		aliasParams: map[string]*[numFields]value{},
	}
	// Sorted by name: the outcome, and the order of the problems, do not depend on
	// the order the parameters come in.
	sorted := slices.Clone(params)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })

	// Pass 1: global and application-wide parameters; per-alias ones are kept for
	// pass 2, which needs every alias, and image-list declares some.
	for _, p := range sorted {
		b.readGlobal(p)
	}
	b.collectAliases()
	// Pass 2: per-alias parameters.
	for _, p := range b.perAlias {
		b.readAliasParam(p)
	}
	b.checkWhereGiven()
	b.settlePins()
	b.checkHelmKeysUsed()
	if len(b.errs) > 0 {
		return nil, joinLines(b.errs)
	}

	b.mergeAndCompile()
	if len(b.errs) > 0 {
		return nil, joinLines(b.errs)
	}
	b.checkSameRepository(b.out.Images)
	if len(b.errs) > 0 {
		return nil, joinLines(b.errs)
	}
	b.out.Warnings = b.warnings
	return b.out, nil
}

// policyBuilder is what buildPolicy's phases hand on to each other.
type policyBuilder struct {
	*merger
	pf  *policyFile // never nil
	out *AppPolicy

	// Pass 1: the application-wide image keys, the pin settings (the policy file's,
	// overridden by parameters) and image-list.
	appWide                       [numFields]value
	pinMode, pinTarget, pinBranch value
	pinPush, pinPRGroup           value
	entries                       []imageListEntry
	// listFailed: image-list did not parse whole, and an alias may be in the entry
	// that did not.
	listFailed bool
	perAlias   []Parameter // <alias>.<key>, for pass 2

	// The aliases: the policy file's and image-list's.
	fromList map[string]imageListEntry
	aliasSet map[string]bool
	aliases  []string // sorted

	// Pass 2: the per-alias image keys, and the Helm values keys pins go to.
	aliasParams    map[string]*[numFields]value
	helmKeys       pin.HelmKeys
	helmKeySources []string // the parameters that set helmKeys
}

// collectAliases gathers the aliases of the policy file and image-list.
func (b *policyBuilder) collectAliases() {
	b.fromList = map[string]imageListEntry{}
	for _, e := range b.entries {
		b.fromList[e.alias] = e
	}
	b.aliasSet = map[string]bool{}
	for a := range b.pf.images {
		b.aliasSet[a] = true
	}
	for a := range b.fromList {
		b.aliasSet[a] = true
	}
	b.aliases = make([]string, 0, len(b.aliasSet))
	for a := range b.aliasSet {
		b.aliases = append(b.aliases, a)
	}
	slices.Sort(b.aliases)
}

// checkWhereGiven checks each value where it was given, so a bad value is
// reported even when a more specific source overrides it.
func (b *policyBuilder) checkWhereGiven() {
	b.checkValues(b.appWide[:])
	for _, a := range b.aliases {
		if fi := b.pf.images[a]; fi != nil {
			b.checkValues(fi.vals[:])
		}
		if vals := b.aliasParams[a]; vals != nil {
			b.checkValues(vals[:])
		}
	}
}

// settlePins sets the pin mode, and with pins on, where they go, the branch and
// how they get there.
func (b *policyBuilder) settlePins() {
	out := b.out
	out.PinMode = PinOff
	if b.pinMode.set {
		out.PinMode = b.pinMode.str
	}
	if out.PinMode == PinOff {
		b.checkUnused(b.pinPush, b.pinMode, "pin-mode write or use", "pin-mode is off")
		b.checkUnused(b.pinPRGroup, b.pinMode, "pin-mode write or use", "pin-mode is off")
		return
	}
	target, err := pin.ParseTarget(b.pinTarget.str, b.helmKeys)
	if err != nil {
		src := b.pinTarget.src
		if src == "" {
			src = paramSource(ParamPinTarget)
		}
		b.fail(resolve.WithField(err, src))
	}
	out.Pins.Target = target
	if b.pinBranch.set {
		if err := pin.CheckBranch(b.pinBranch.str); err != nil {
			b.fail(&resolve.InputError{Field: b.pinBranch.src, Value: b.pinBranch.str, Accepted: pinBranchAccepted, Err: err})
		}
		out.Pins.Branch = b.pinBranch.str
	}
	out.Pins.Push, out.Pins.PRGroup = PinPushDirect, PinPRGroupApp
	if b.pinPush.set {
		out.Pins.Push = b.pinPush.str
	}
	if b.pinPRGroup.set {
		out.Pins.PRGroup = b.pinPRGroup.str
	}
	if out.Pins.Push != PinPushPullRequest {
		b.checkUnused(b.pinPRGroup, b.pinPush, "pin-push pull-request", "pin-push is direct")
	}
}

// checkUnused reports v, a pin setting that is set, as unused: it applies only
// with needs, and decider (the setting that says otherwise) says why not. A
// policy file's setting that a parameter turned off is not reported: an
// Application's parameters may turn off what its policy file sets up (pin-mode
// off over a file's pinMode and pinPush), and cannot unset the file's keys.
func (b *policyBuilder) checkUnused(v, decider value, needs, why string) {
	if !v.set || (v.line > 0 && decider.set && decider.line == 0) {
		return
	}
	by := "the default"
	if decider.set {
		by = decider.label()
	}
	b.failf("%s: %q applies only with %s, and %s (%s); remove it, or set %s",
		v.label(), v.str, needs, why, by, needs)
}

// checkHelmKeysUsed rejects <alias>.helm.* parameters that nothing would read:
// they are used only to write pins to a Helm values file.
func (b *policyBuilder) checkHelmKeysUsed() {
	if len(b.helmKeySources) == 0 {
		return
	}
	if b.out.PinMode == PinOff || !strings.HasPrefix(b.pinTarget.str, pin.TargetHelmValues+":") {
		slices.Sort(b.helmKeySources)
		b.failf("parameter %q: names a key of a Helm values file, used only with pin-mode write or use and pin-target helmvalues:<path> (without them, images are rewritten in the rendered manifests whatever the values say)", b.helmKeySources[0])
	}
}

// mergeAndCompile layers each alias's values (application-wide, then the policy
// file's, then its parameters; image-list gives the image and constraint) and
// compiles its policy. The most specific layer naming a verify key or a keyless
// identity decides between them (settleVerify).
func (b *policyBuilder) mergeAndCompile() {
	for _, a := range b.aliases {
		var merged [numFields]value
		layers := []*[numFields]value{&b.appWide}
		if fi := b.pf.images[a]; fi != nil {
			layers = append(layers, &fi.vals)
		}
		if vals := b.aliasParams[a]; vals != nil {
			layers = append(layers, vals)
		}
		for _, l := range layers {
			for f := range numFields {
				if l[f].set {
					merged[f] = l[f]
				}
			}
		}
		settleVerify(&merged, layers)
		if e, ok := b.fromList[a]; ok {
			merged[fImage], merged[fConstraint] = e.image, e.cons
		}
		if ip := b.compile(a, b.pf.images[a], merged); ip != nil {
			b.out.Images = append(b.out.Images, *ip)
		}
	}
}

// lineError keeps a problem on one line, whatever the user's values hold, so that
// joined problems read one per line.
type lineError struct{ err error }

func (e lineError) Error() string {
	return strings.NewReplacer("\r", `\r`, "\n", `\n`).Replace(e.err.Error())
}

func (e lineError) Unwrap() error { return e.err }

// PolicyError is a policy (the policy file and the parameters) that cannot be
// used: every problem, one per line. It is bad input, whatever the problems' own
// types.
type PolicyError struct{ err error }

func (e *PolicyError) Error() string { return e.err.Error() }
func (e *PolicyError) Unwrap() error { return e.err }

// joinLines joins problems, one per line, into a *PolicyError.
func joinLines(errs []error) error {
	wrapped := make([]error, len(errs))
	for i, err := range errs {
		wrapped[i] = lineError{err}
	}
	return &PolicyError{errors.Join(wrapped...)}
}

func describeAliases(aliases []string) string {
	if len(aliases) == 0 {
		return "no aliases are declared"
	}
	return "aliases: " + strings.Join(aliases, ", ")
}

// paramValue converts a parameter of the right kind into a value.
func (m *merger) paramValue(p Parameter, k imageKey, src string) value {
	v := value{set: true, src: src}
	switch k.field {
	case fIgnore, fPlatforms:
		v.list = slices.Clone(p.Values())
		if v.list == nil {
			v.list = []string{}
		}
	case fPinDigest:
		b, ok := parseBool(p.String)
		if !ok {
			m.fail(&resolve.InputError{Field: src, Value: p.String, Accepted: pinDigestAccepted})
			return value{}
		}
		v.b = b
	default:
		v.str = p.String
	}
	return v
}

func parseBool(s string) (bool, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

// checkValues checks every value that is set, on its own.
func (m *merger) checkValues(vals []value) {
	for f, v := range vals {
		if !v.set {
			continue
		}
		var err error
		switch field(f) {
		case fStrategy:
			var warn string
			if _, warn, err = resolve.ParseStrategy(v.str); warn != "" {
				m.warn(v.label() + ": " + warn)
			}
		case fAllow:
			_, err = resolve.ParseAllowTags(resolve.CanonicalAllowTags(v.str))
		case fIgnore:
			_, err = resolve.ParseIgnoreTags(resolve.CanonicalIgnoreTags(v.list)...)
		case fPlatforms:
			_, err = resolve.ParsePlatforms(v.list...)
		case fVerifyIdentity, fVerifyIssuer, fVerifyKey:
			err = checkVerifyValue(field(f), v.str)
		}
		if err != nil {
			m.fail(resolve.WithField(err, v.label()))
		}
	}
}

// checkSameRepository rejects aliases naming one repository with different policies.
func (m *merger) checkSameRepository(images []ImagePolicy) {
	byRepo := map[string]int{}
	for i, ip := range images {
		key := resolve.RepoKey(ip.Repo)
		j, ok := byRepo[key]
		if !ok {
			byRepo[key] = i
			continue
		}
		first := images[j]
		if first.Policy.String() != ip.Policy.String() {
			m.failf("aliases %q (%s) and %q (%s) both name repository %s with different policies; the rewrite matches images by repository and could not tell which applies (accepted: one alias per repository, or equal policies)",
				first.Alias, first.Source[SourceImage], ip.Alias, ip.Source[SourceImage], key)
		}
	}
}
