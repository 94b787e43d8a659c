package plugin

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// Parameter names. Per-image parameters are "<alias>.<key>" with the keys below;
// the same keys without an alias are application-wide defaults for every image.
// They mirror argocd-image-updater's annotation keys without the
// "argocd-image-updater.argoproj.io/" prefix.
const (
	ParamImageList      = "image-list"
	ParamPinMode        = "pin-mode"
	ParamValuesFiles    = "values-files"
	ParamHelmParameters = "helm-parameters"
	ParamValues         = "values"

	KeyUpdateStrategy = "update-strategy"
	KeyAllowTags      = "allow-tags"
	KeyIgnoreTags     = "ignore-tags"
	KeyPlatforms      = "platforms"
	KeyPinDigest      = "pin-digest"
	// KeyTagMatch is argocd-image-updater's deprecated name of allow-tags; accepted
	// per image with a warning, as argocd-image-updater does.
	KeyTagMatch = "tag-match"
)

// Pin modes (DESIGN.md §8).
const (
	PinOff   = "off"
	PinWrite = "write"
	PinUse   = "use"
)

// Accepted forms, for messages and tooltips.
const (
	allowAccepted      = "regexp:EXPR, glob:PATTERN or any"
	ignoreAccepted     = "globs, comma-separated or one per array item (regexp:EXPR takes a whole item)"
	platformsAccepted  = "os/arch[/variant], comma-separated or one per array item, e.g. linux/amd64,linux/arm64"
	pinDigestAccepted  = "true or false"
	pinModeAccepted    = "off"
	imageListAccepted  = "alias=repository[:constraint], comma-separated or one per array item, e.g. web=ghcr.io/org/web:~1.2"
	aliasAccepted      = "letters, digits, - and _, starting with a letter or digit (/ is read as _)"
	valuesFilesAcc     = "an array of values file paths (or one comma-separated string)"
	helmParametersAcc  = "a map of Helm parameter name to value"
	valuesAccepted     = "a string of Helm values YAML"
	maxAliasLen        = 128
	allImagesSourceTag = " (all images)"
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
)

// AppPolicy is the policy of one Application: its images and render settings.
type AppPolicy struct {
	// Images are the image policies, sorted by alias.
	Images []ImagePolicy
	// PinMode is off; write and use are reserved for pins in git and refused.
	PinMode string
	// Helm holds source parameters passed through to the renderer.
	Helm HelmParams
	// Warnings are accepted but deprecated inputs, each one line naming its source.
	Warnings []string
}

// HelmParams are the Helm settings given as plugin parameters.
type HelmParams struct {
	ValuesFiles []string
	Parameters  map[string]string
	Values      string
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
	// pinDigest), e.g. "parameter \"web.update-strategy\"", "parameter
	// \"update-strategy\" (all images)" or "file .argocd-image-resolver.yaml key
	// images.web.strategy". Fields left at their defaults are absent.
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
// warning. Its keys that have no meaning here (<alias>.helm.image-name,
// .helm.image-tag, .helm.image-spec, .kustomize.image-name, .force-update,
// .pull-secret, and write-back-method, git-branch, ...) are errors that say why they
// are not needed and ask for their removal: the resolver rewrites the rendered output,
// so silently ignoring them would hide a changed behaviour, and a warning would go
// unseen (Argo CD only logs the stderr of a successful run).
//
// Every problem found is reported, one line each (errors.Join), naming the parameter
// or file key, the value and the accepted forms.
func LoadPolicy(appDir string, params Parameters) (*AppPolicy, error) {
	pf, err := readPolicyFile(appDir)
	if err != nil {
		return nil, err
	}
	return buildPolicy(pf, params)
}

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

func buildPolicy(pf *policyFile, params Parameters) (*AppPolicy, error) {
	m := &merger{}
	out := &AppPolicy{PinMode: PinOff}
	if pf == nil {
		pf = &policyFile{images: map[string]*fileImage{}}
	}

	sorted := slices.Clone(params)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })

	// Pass 1: global and application-wide parameters; per-alias ones are kept for pass 2.
	var appWide [numFields]value
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
				case "", PinOff:
					out.PinMode = PinOff
				case PinWrite, PinUse:
					m.failf("%s: pin-mode %q is not available yet: pins in git arrive with a later release (accepted: %s)", paramSource(p.Name), v, pinModeAccepted)
				default:
					m.fail(&resolve.InputError{Field: paramSource(p.Name), Value: p.String, Accepted: pinModeAccepted})
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
			_, err = resolve.ParseAllowTags(v.str)
		case fIgnore:
			_, err = resolve.ParseIgnoreTags(v.list...)
		case fPlatforms:
			_, err = resolve.ParsePlatforms(v.list...)
		}
		if err != nil {
			m.fail(resolve.WithField(err, v.label()))
		}
	}
}

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
	spec := resolve.PolicySpec{
		Strategy:   merged[fStrategy].str,
		Constraint: merged[fConstraint].str,
		AllowTags:  merged[fAllow].str,
		IgnoreTags: slices.Clone(merged[fIgnore].list),
		Platforms:  slices.Clone(merged[fPlatforms].list),
		PinDigest:  merged[fPinDigest].b,
	}
	pol, err := spec.Compile()
	if err != nil {
		label := fmt.Sprintf("alias %q", alias)
		var ie *resolve.InputError
		if errors.As(err, &ie) {
			f := fImage
			switch ie.Policy {
			case resolve.FieldStrategy:
				f = fStrategy
			case resolve.FieldConstraint:
				f = fConstraint
			case resolve.FieldAllowTags:
				f = fAllow
			case resolve.FieldIgnoreTags:
				f = fIgnore
			case resolve.FieldPlatforms:
				f = fPlatforms
			}
			label = fieldLabel(alias, merged, f, fi)
			if f == fConstraint && merged[fStrategy].set {
				label += fmt.Sprintf(", with update-strategy %q from %s", merged[fStrategy].str, merged[fStrategy].label())
			}
		}
		m.fail(resolve.WithField(err, label))
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

// suggest returns ` ; did you mean "x"?` for the closest candidate, or "".
func suggest(s string, candidates []string) string {
	best, bestD := "", -1
	for _, c := range candidates {
		d := levenshtein(strings.ToLower(s), strings.ToLower(c))
		if bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	if bestD < 0 || bestD == 0 && s == best {
		return ""
	}
	if bestD <= 2 || bestD*4 <= len(s) {
		return fmt.Sprintf("; did you mean %q?", best)
	}
	return ""
}

func levenshtein(a, b string) int {
	if len(a) > 256 || len(b) > 256 {
		return max(len(a), len(b))
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
