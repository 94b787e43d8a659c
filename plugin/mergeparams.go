package plugin

import (
	"fmt"
	"slices"
	"strings"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/argoglob"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// readGlobal reads one parameter in pass 1: a global setting, or an image key for
// all images; an <alias>.<key> is kept for pass 2.
func (b *policyBuilder) readGlobal(p Parameter) {
	switch p.Name {
	case ParamImageList:
		n := len(b.errs)
		if b.checkKind(p, imageListAccepted, KindString, KindArray) {
			b.entries = b.parseImageList(p)
		}
		b.listFailed = len(b.errs) > n
	case ParamPinMode:
		b.pinMode = b.choiceOver(b.pinMode, p, pinModeAccepted, PinOff, PinWrite, PinUse)
	case ParamPinTarget:
		b.pinTarget = b.stringOver(b.pinTarget, p, pin.TargetAccepted)
	case ParamPinBranch:
		b.pinBranch = b.stringOver(b.pinBranch, p, pinBranchAccepted)
	case ParamPinPush:
		b.pinPush = b.choiceOver(b.pinPush, p, pinPushAccepted, PinPushDirect, PinPushPullRequest)
	case ParamPinPRGroup:
		b.pinPRGroup = b.choiceOver(b.pinPRGroup, p, pinPRGroupAccepted, PinPRGroupApp, PinPRGroupRepository)
	case ParamRefresh:
		b.readRefresh(p)
	case ParamValuesFiles:
		b.readValuesFiles(p)
	case ParamHelmParameters:
		b.readHelmParameters(p)
	case ParamValues:
		if b.checkKind(p, valuesAccepted, KindString) {
			b.out.Helm.Values = p.String
		}
	case ParamDirectoryRecurse:
		b.readDirectoryRecurse(p)
	case ParamDirectoryInclude:
		b.out.Directory.Include = b.readDirectoryGlob(p)
	case ParamDirectoryExclude:
		b.out.Directory.Exclude = b.readDirectoryGlob(p)
	default:
		b.readImageKey(p)
	}
}

// stringOver is a string parameter's value, trimmed, over prev (the policy file's);
// an empty one leaves prev.
func (b *policyBuilder) stringOver(prev value, p Parameter, accepted string) value {
	if b.checkKind(p, accepted, KindString) && strings.TrimSpace(p.String) != "" {
		return value{set: true, str: strings.TrimSpace(p.String), src: paramSource(p.Name)}
	}
	return prev
}

// choiceOver is a string parameter that takes one of choices, trimmed, over prev
// (the policy file's); an empty one leaves prev, any other value is an error.
func (b *policyBuilder) choiceOver(prev value, p Parameter, accepted string, choices ...string) value {
	if !b.checkKind(p, accepted, KindString) {
		return prev
	}
	v := strings.TrimSpace(p.String)
	if v == "" {
		return prev
	}
	if !slices.Contains(choices, v) {
		b.fail(&resolve.InputError{Field: paramSource(p.Name), Value: p.String, Accepted: accepted})
		return prev
	}
	return value{set: true, str: v, src: paramSource(p.Name)}
}

func (b *policyBuilder) readRefresh(p Parameter) {
	if !b.checkKind(p, refreshAccepted, KindString) {
		return
	}
	switch v := strings.TrimSpace(p.String); v {
	case "", RefreshHard:
		b.out.Refresh = RefreshHard
	case RefreshOff:
		b.out.Refresh = RefreshOff
	default:
		b.fail(&resolve.InputError{Field: paramSource(p.Name), Value: p.String, Accepted: refreshAccepted})
	}
}

// readValuesFiles reads the values files: an array, or a string of comma-separated
// names.
func (b *policyBuilder) readValuesFiles(p Parameter) {
	if !b.checkKind(p, valuesFilesAcc, KindArray, KindString) {
		return
	}
	for _, v := range p.Values() {
		items := []string{v}
		if p.Kind == KindString {
			items = strings.Split(v, ",")
		}
		for _, f := range items {
			if f = strings.TrimSpace(f); f != "" {
				b.out.Helm.ValuesFiles = append(b.out.Helm.ValuesFiles, f)
			}
		}
	}
}

func (b *policyBuilder) readHelmParameters(p Parameter) {
	if !b.checkKind(p, helmParametersAcc, KindMap) {
		return
	}
	for k, v := range p.Map {
		if strings.TrimSpace(k) == "" {
			b.failf("parameter %q: an empty name (accepted: %s)", p.Name, helmParametersAcc)
			continue
		}
		if b.out.Helm.Parameters == nil {
			b.out.Helm.Parameters = map[string]string{}
		}
		b.out.Helm.Parameters[k] = v
	}
}

// readDirectoryRecurse reads directory-recurse: true or false, any case; empty is
// false (Argo CD's default).
func (b *policyBuilder) readDirectoryRecurse(p Parameter) {
	if !b.checkKind(p, dirRecurseAccepted, KindString) || strings.TrimSpace(p.String) == "" {
		return
	}
	v, ok := parseBool(p.String)
	if !ok {
		b.fail(&resolve.InputError{Field: paramSource(p.Name), Value: p.String, Accepted: dirRecurseAccepted})
		return
	}
	b.out.Directory.Recurse = v
}

// readDirectoryGlob reads directory-include or directory-exclude: a glob that
// compiles as Argo CD compiles it, trimmed; "" when empty or bad.
func (b *policyBuilder) readDirectoryGlob(p Parameter) string {
	if !b.checkKind(p, dirGlobAccepted, KindString) {
		return ""
	}
	v := strings.TrimSpace(p.String)
	if v == "" {
		return ""
	}
	if _, err := argoglob.Compile(v); err != nil {
		b.fail(&resolve.InputError{Field: paramSource(p.Name), Value: p.String, Err: err, Accepted: dirGlobAccepted})
		return ""
	}
	return v
}

// readImageKey reads a parameter that is no global setting: an image key for all
// images, or an <alias>.<key>, kept for pass 2; any other name is an error.
func (b *policyBuilder) readImageKey(p Parameter) {
	if why, ok := migrationGlobal[p.Name]; ok {
		b.failf("parameter %q: argocd-image-updater's %s is %s; remove the parameter", p.Name, p.Name, why)
		return
	}
	// The deprecated tag-match is accepted per alias only.
	if k, ok := imageKeyFor(p.Name); ok && p.Name != KeyTagMatch {
		if b.checkKind(p, k.accepted, k.kinds...) {
			b.appWide[k.field] = b.paramValue(p, k, paramSource(p.Name)+allImagesSourceTag)
		}
		return
	}
	if strings.Contains(p.Name, ".") {
		b.perAlias = append(b.perAlias, p)
		return
	}
	b.failf("parameter %q: unknown parameter%s (accepted: %s)", p.Name,
		suggest(p.Name, append(globalNames(), imageKeyNames()...)), acceptedParams())
}

// readAliasParam reads one <alias>.<key> parameter in pass 2, once every alias is
// known.
func (b *policyBuilder) readAliasParam(p Parameter) {
	rawAlias, key, _ := strings.Cut(p.Name, ".")
	alias := normaliseAlias(rawAlias)
	if key == KeyHelmImageTag || key == KeyHelmImageName || key == KeyHelmImageSpec {
		b.readAliasHelmKey(p, rawAlias, alias, key)
		return
	}
	if why, ok := migrationKeys[key]; ok {
		b.failf("parameter %q: argocd-image-updater's <alias>.%s is %s; remove the parameter", p.Name, key, why)
		return
	}
	k, ok := imageKeyFor(key)
	if !ok {
		b.failf("parameter %q: unknown key %q%s (accepted: <alias>.%s)", p.Name, key,
			suggest(key, imageKeyNames()), strings.Join(imageKeyNames(), ", <alias>."))
		return
	}
	if !b.aliasSet[alias] {
		if b.listFailed {
			return // the alias may be in the entry that did not parse
		}
		b.failf("parameter %q: unknown alias %q%s (%s; declare aliases in parameter %s as %s, or in %s under images)",
			p.Name, rawAlias, suggest(alias, b.aliases), describeAliases(b.aliases), ParamImageList, imageListAccepted, PolicyFileName)
		return
	}
	if !b.checkKind(p, k.accepted, k.kinds...) {
		return
	}
	vals := b.aliasParams[alias]
	if vals == nil {
		vals = &[numFields]value{}
		b.aliasParams[alias] = vals
	}
	if key == KeyTagMatch {
		b.warn(fmt.Sprintf("parameter %q: tag-match is deprecated; use %q", p.Name, rawAlias+"."+KeyAllowTags))
	}
	if vals[k.field].set {
		b.failf("parameter %q: alias %q is also configured by parameter %s (accepted: one parameter per alias and key; / in an alias is read as _)",
			p.Name, alias, strings.TrimPrefix(vals[k.field].src, "parameter "))
		return
	}
	vals[k.field] = b.paramValue(p, k, paramSource(p.Name))
}

// readAliasHelmKey reads <alias>.helm.image-{tag,name,spec}: the key of a Helm
// values file that pins of the alias go to.
func (b *policyBuilder) readAliasHelmKey(p Parameter, rawAlias, alias, key string) {
	if !b.aliasSet[alias] && !b.listFailed {
		b.failf("parameter %q: unknown alias %q%s (%s)", p.Name, rawAlias, suggest(alias, b.aliases), describeAliases(b.aliases))
		return
	}
	if !b.checkKind(p, "a dotted key of the values file, e.g. image.tag", KindString) {
		return
	}
	k := b.helmKeys[alias]
	v := strings.TrimSpace(p.String)
	switch key {
	case KeyHelmImageTag:
		k.Tag = v
	case KeyHelmImageName:
		k.Name = v
	case KeyHelmImageSpec:
		k.Spec = v
	}
	b.helmKeys[alias] = k
	b.helmKeySources = append(b.helmKeySources, p.Name)
}
