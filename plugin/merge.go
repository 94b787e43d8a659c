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
	m := &merger{}
	out := &AppPolicy{PinMode: PinOff, Refresh: RefreshHard}
	if pf == nil {
		pf = &policyFile{images: map[string]*fileImage{}}
	}

	sorted := slices.Clone(params)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })

	// Pass 1: global and application-wide parameters; per-alias ones are kept for pass 2.
	var appWide [numFields]value
	pinMode, pinTarget, pinBranch := pf.pinMode, pf.pinTarget, pf.pinBranch
	helmKeys := pin.HelmKeys{}
	var helmKeySources []string
	var entries []imageListEntry
	var perAlias []Parameter
	listFailed := false
	for _, p := range sorted {
		switch p.Name {
		case ParamImageList:
			n := len(m.errs)
			if m.checkKind(p, imageListAccepted, KindString, KindArray) {
				entries = m.parseImageList(p)
			}
			listFailed = len(m.errs) > n
			continue
		case ParamPinMode:
			if m.checkKind(p, pinModeAccepted, KindString) {
				switch v := strings.TrimSpace(p.String); v {
				case "":
				case PinOff, PinWrite, PinUse:
					pinMode = value{set: true, str: v, src: paramSource(p.Name)}
				default:
					m.fail(&resolve.InputError{Field: paramSource(p.Name), Value: p.String, Accepted: pinModeAccepted})
				}
			}
			continue
		case ParamPinTarget:
			if m.checkKind(p, pin.TargetAccepted, KindString) && strings.TrimSpace(p.String) != "" {
				pinTarget = value{set: true, str: strings.TrimSpace(p.String), src: paramSource(p.Name)}
			}
			continue
		case ParamPinBranch:
			if m.checkKind(p, pinBranchAccepted, KindString) && strings.TrimSpace(p.String) != "" {
				pinBranch = value{set: true, str: strings.TrimSpace(p.String), src: paramSource(p.Name)}
			}
			continue
		case ParamRefresh:
			if m.checkKind(p, refreshAccepted, KindString) {
				switch v := strings.TrimSpace(p.String); v {
				case "", RefreshHard:
					out.Refresh = RefreshHard
				case RefreshOff:
					out.Refresh = RefreshOff
				default:
					m.fail(&resolve.InputError{Field: paramSource(p.Name), Value: p.String, Accepted: refreshAccepted})
				}
			}
			continue
		case ParamValuesFiles:
			if m.checkKind(p, valuesFilesAcc, KindArray, KindString) {
				for _, v := range p.Values() {
					items := []string{v}
					if p.Kind == KindString {
						items = strings.Split(v, ",")
					}
					for _, f := range items {
						if f = strings.TrimSpace(f); f != "" {
							out.Helm.ValuesFiles = append(out.Helm.ValuesFiles, f)
						}
					}
				}
			}
			continue
		case ParamHelmParameters:
			if m.checkKind(p, helmParametersAcc, KindMap) {
				for k, v := range p.Map {
					if strings.TrimSpace(k) == "" {
						m.failf("parameter %q: an empty name (accepted: %s)", p.Name, helmParametersAcc)
						continue
					}
					if out.Helm.Parameters == nil {
						out.Helm.Parameters = map[string]string{}
					}
					out.Helm.Parameters[k] = v
				}
			}
			continue
		case ParamValues:
			if m.checkKind(p, valuesAccepted, KindString) {
				out.Helm.Values = p.String
			}
			continue
		}
		if why, ok := migrationGlobal[p.Name]; ok {
			m.failf("parameter %q: argocd-image-updater's %s is %s; remove the parameter", p.Name, p.Name, why)
			continue
		}
		if k, ok := imageKeyFor(p.Name); ok && p.Name != KeyTagMatch {
			if m.checkKind(p, k.accepted, k.kinds...) {
				appWide[k.field] = m.paramValue(p, k, paramSource(p.Name)+allImagesSourceTag)
			}
			continue
		}
		if strings.Contains(p.Name, ".") {
			perAlias = append(perAlias, p)
			continue
		}
		m.failf("parameter %q: unknown parameter%s (accepted: %s)", p.Name,
			suggest(p.Name, append(globalNames(), imageKeyNames()...)), acceptedParams())
	}

	// The aliases: the file's and image-list's.
	fromList := map[string]imageListEntry{}
	for _, e := range entries {
		fromList[e.alias] = e
	}
	aliasSet := map[string]bool{}
	for a := range pf.images {
		aliasSet[a] = true
	}
	for a := range fromList {
		aliasSet[a] = true
	}
	aliases := make([]string, 0, len(aliasSet))
	for a := range aliasSet {
		aliases = append(aliases, a)
	}
	slices.Sort(aliases)

	// Pass 2: per-alias parameters.
	aliasParams := map[string]*[numFields]value{}
	for _, p := range perAlias {
		rawAlias, key, _ := strings.Cut(p.Name, ".")
		alias := normaliseAlias(rawAlias)
		if key == KeyHelmImageTag || key == KeyHelmImageName || key == KeyHelmImageSpec {
			if !aliasSet[alias] && !listFailed {
				m.failf("parameter %q: unknown alias %q%s (%s)", p.Name, rawAlias, suggest(alias, aliases), describeAliases(aliases))
				continue
			}
			if m.checkKind(p, "a dotted key of the values file, e.g. image.tag", KindString) {
				k := helmKeys[alias]
				v := strings.TrimSpace(p.String)
				switch key {
				case KeyHelmImageTag:
					k.Tag = v
				case KeyHelmImageName:
					k.Name = v
				case KeyHelmImageSpec:
					k.Spec = v
				}
				helmKeys[alias] = k
				helmKeySources = append(helmKeySources, p.Name)
			}
			continue
		}
		if why, ok := migrationKeys[key]; ok {
			m.failf("parameter %q: argocd-image-updater's <alias>.%s is %s; remove the parameter", p.Name, key, why)
			continue
		}
		k, ok := imageKeyFor(key)
		if !ok {
			m.failf("parameter %q: unknown key %q%s (accepted: <alias>.%s)", p.Name, key,
				suggest(key, imageKeyNames()), strings.Join(imageKeyNames(), ", <alias>."))
			continue
		}
		if !aliasSet[alias] {
			if listFailed {
				continue // the alias may be in the entry that did not parse
			}
			m.failf("parameter %q: unknown alias %q%s (%s; declare aliases in parameter %s as %s, or in %s under images)",
				p.Name, rawAlias, suggest(alias, aliases), describeAliases(aliases), ParamImageList, imageListAccepted, PolicyFileName)
			continue
		}
		if !m.checkKind(p, k.accepted, k.kinds...) {
			continue
		}
		vals := aliasParams[alias]
		if vals == nil {
			vals = &[numFields]value{}
			aliasParams[alias] = vals
		}
		if key == KeyTagMatch {
			m.warn(fmt.Sprintf("parameter %q: tag-match is deprecated; use %q", p.Name, rawAlias+"."+KeyAllowTags))
		}
		if vals[k.field].set {
			m.failf("parameter %q: alias %q is also configured by parameter %s (accepted: one parameter per alias and key; / in an alias is read as _)",
				p.Name, alias, strings.TrimPrefix(vals[k.field].src, "parameter "))
			continue
		}
		vals[k.field] = m.paramValue(p, k, paramSource(p.Name))
	}

	// Check each value where it was given, so a bad value is reported even when a
	// more specific source overrides it.
	m.checkValues(appWide[:])
	for _, a := range aliases {
		if fi := pf.images[a]; fi != nil {
			m.checkValues(fi.vals[:])
		}
		if vals := aliasParams[a]; vals != nil {
			m.checkValues(vals[:])
		}
	}
	out.PinMode = PinOff
	if pinMode.set {
		out.PinMode = pinMode.str
	}
	if out.PinMode != PinOff {
		target, err := pin.ParseTarget(pinTarget.str, helmKeys)
		if err != nil {
			src := pinTarget.src
			if src == "" {
				src = paramSource(ParamPinTarget)
			}
			m.fail(resolve.WithField(err, src))
		}
		out.Pins.Target = target
		if pinBranch.set {
			if err := pin.CheckBranch(pinBranch.str); err != nil {
				m.fail(&resolve.InputError{Field: pinBranch.src, Value: pinBranch.str, Accepted: pinBranchAccepted, Err: err})
			}
			out.Pins.Branch = pinBranch.str
		}
	}
	if len(helmKeySources) > 0 && (out.PinMode == PinOff || !strings.HasPrefix(pinTarget.str, pin.TargetHelmValues+":")) {
		slices.Sort(helmKeySources)
		m.failf("parameter %q: names a key of a Helm values file, used only with pin-mode write or use and pin-target helmvalues:<path> (without them, images are rewritten in the rendered manifests whatever the values say)", helmKeySources[0])
	}
	if len(m.errs) > 0 {
		return nil, joinLines(m.errs)
	}

	// Merge and compile.
	for _, a := range aliases {
		var merged [numFields]value
		layers := []*[numFields]value{&appWide}
		if fi := pf.images[a]; fi != nil {
			layers = append(layers, &fi.vals)
		}
		if vals := aliasParams[a]; vals != nil {
			layers = append(layers, vals)
		}
		for _, l := range layers {
			for f := range numFields {
				if l[f].set {
					merged[f] = l[f]
				}
			}
		}
		if e, ok := fromList[a]; ok {
			merged[fImage], merged[fConstraint] = e.image, e.cons
		}
		if ip := m.compile(a, pf.images[a], merged); ip != nil {
			out.Images = append(out.Images, *ip)
		}
	}
	if len(m.errs) > 0 {
		return nil, joinLines(m.errs)
	}
	m.checkSameRepository(out.Images)
	if len(m.errs) > 0 {
		return nil, joinLines(m.errs)
	}
	out.Warnings = m.warnings
	return out, nil
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
