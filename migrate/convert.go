package migrate

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/plugin"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// Kind says what a finding means for the migrated app.
type Kind int

const (
	// Lost is something that could not be carried over: the migrated app does
	// without it (--check fails).
	Lost Kind = iota
	// Differs is a word the two tools read differently: carried over with the
	// resolver's meaning, and the spelling that keeps argocd-image-updater's.
	Differs
	// Note is carried over, or not needed, with nothing lost; said so the change
	// is never silent.
	Note
)

func (k Kind) String() string {
	switch k {
	case Lost:
		return "not carried over"
	case Differs:
		return "differs"
	}
	return "note"
}

// Finding is one thing migrate says about an object, as a YAML comment above it.
type Finding struct {
	Kind Kind
	Text string
}

// param is one plugin parameter: a string, an array or a map.
type param struct {
	name  string
	kind  plugin.ParamKind
	str   string
	array []string
	mp    map[string]string
}

// credential is a registry credential an app's configuration names.
type credential struct {
	prefix, source, from string
}

// converted is an app's configuration in this project's parameter vocabulary.
type converted struct {
	params   []param
	findings []Finding
	creds    []credential
}

func (c *converted) add(k Kind, format string, args ...any) {
	c.findings = append(c.findings, Finding{Kind: k, Text: fmt.Sprintf(format, args...)})
}

func (c *converted) str(name, v string) {
	c.params = append(c.params, param{name: name, kind: plugin.KindString, str: v})
}

// appSource is what the conversion needs to know of the Application's source.
type appSource struct {
	repoURL, path string
}

var aliasRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*$`)

// ourAlias spells an argocd-image-updater alias as the resolver's parameters
// accept it: "/" is "_" in both; "." (allowed by the ImageUpdater resource) and
// other characters become "_" here.
func ourAlias(a string) string {
	a = normaliseAlias(strings.TrimSpace(a))
	var b strings.Builder
	for i, r := range a {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || (i > 0 && (r == '_' || r == '-'))
		if ok {
			b.WriteRune(r)
		} else {
			b.WriteRune('_')
		}
	}
	s := b.String()
	if len(s) > 128 {
		s = s[:128]
	}
	return s
}

// deriveAlias is the alias the plugin gives an image-list entry without alias=:
// the last path segment of the repository, "." read as "_".
func deriveAlias(written string) string {
	last := written[strings.LastIndex(written, "/")+1:]
	return strings.ReplaceAll(last, ".", "_")
}

// convert turns an app's argocd-image-updater configuration into plugin
// parameters, the credentials it names and what could not be carried over.
func convert(conf *appConf, src appSource) converted {
	var c converted
	for _, u := range conf.unread {
		c.add(Lost, "%s", u)
	}

	// Write-back first: the Helm keys depend on the pin target.
	pinMode, pinTarget, pinBranch := convertWriteBack(conf, src, &c)

	// Application-wide settings.
	common := conf.common
	var appWide []param
	commonStrategy := resolve.Semver
	if common.strategy.set {
		commonStrategy = strategyOf(common.strategy, &c)
		appWide = append(appWide, param{name: plugin.KeyUpdateStrategy, kind: plugin.KindString, str: string(commonStrategy)})
	}
	commonAllowOK, commonAllow, commonIgnore := true, "", ""
	if common.allow.set {
		v, ok, why := allowOf(common.allow)
		commonAllow = v
		if ok {
			appWide = append(appWide, param{name: plugin.KeyAllowTags, kind: plugin.KindString, str: v})
		} else {
			commonAllowOK = false
			c.add(Lost, "%s: allow-tags %q: %s; argocd-image-updater matched no tag with it, so it never updated the images that use it; they are left out of image-list (the resolver leaves them as written too)", common.allow.from, common.allow.v, why)
		}
	}
	if common.ignore.set {
		if keep := ignoreOf(common.ignore, &c); len(keep) > 0 {
			commonIgnore = strings.Join(keep, ",")
			appWide = append(appWide, param{name: plugin.KeyIgnoreTags, kind: plugin.KindString, str: strings.Join(keep, ",")})
		}
	}
	said := map[string]bool{}
	commonPlatforms, commonPlatformsOK := []string(nil), true
	if common.platforms.set {
		commonPlatforms, commonPlatformsOK = platformsOf(common.platforms, &c)
		if len(commonPlatforms) > 0 {
			appWide = append(appWide, param{name: plugin.KeyPlatforms, kind: plugin.KindString, str: strings.Join(commonPlatforms, ",")})
		}
		if !commonPlatformsOK {
			c.add(Lost, "%s: no platform it names can match an image, so argocd-image-updater never updated the images that use it; they are left out of image-list", common.platforms.from)
		}
	}
	if common.forceUpdate.set {
		forceUpdateNote(common.forceUpdate, &c)
	}

	// Images.
	var entries []string
	var perAlias []param
	usedAlias := map[string]bool{}
	// The resolver rewrites images by repository: two aliases of one repository
	// must have one policy (as the plugin checks).
	type repoUse struct{ alias, policy string }
	byRepo := map[string]repoUse{}
	noPlatforms := false
	for _, img := range conf.images {
		repo, written, constraint, err := resolve.ParseImageSpec(img.spec)
		if err != nil {
			c.add(Lost, "%s: image %q: %v; left out of image-list", img.from, img.spec, err)
			continue
		}
		label := fmt.Sprintf("image %s", written)
		if img.alias != "" {
			label = fmt.Sprintf("image %q (%s)", img.alias, written)
		}
		// The alias.
		alias, explicit := "", img.alias != ""
		if explicit {
			alias = ourAlias(img.alias)
			if alias != normaliseAlias(img.alias) {
				c.add(Note, "%s: alias %q is written %q here (aliases are letters, digits, - and _)", img.from, img.alias, alias)
			}
		} else {
			alias = deriveAlias(written)
			if !aliasRE.MatchString(alias) {
				alias, explicit = ourAlias(alias), true
			}
		}
		if usedAlias[alias] {
			base := alias
			for n := 2; usedAlias[alias]; n++ {
				alias = fmt.Sprintf("%s-%d", base, n)
			}
			explicit = true
			c.add(Note, "%s: alias %q is taken by another image of the app; written %q", img.from, base, alias)
		}
		// The settings in effect: the image's, else the application-wide ones.
		s := img.settings
		strategy := commonStrategy
		if s.strategy.set {
			strategy = strategyOf(s.strategy, &c)
		}
		var mine []param
		eff := struct{ allow, ignore, platforms string }{allow: commonAllow, ignore: commonIgnore, platforms: strings.Join(commonPlatforms, ",")}
		if s.strategy.set {
			mine = append(mine, param{name: alias + "." + plugin.KeyUpdateStrategy, kind: plugin.KindString, str: string(strategy)})
		}
		// The constraint, as the strategy reads it.
		switch strategy {
		case resolve.Semver:
			if constraint != "" {
				if _, err := (resolve.PolicySpec{Constraint: constraint}).Compile(); err != nil {
					c.add(Lost, "%s: %q is not a semver constraint, so argocd-image-updater never updated this image (update-strategy semver); left out of image-list, so the resolver leaves it as written too; write a range (e.g. ~1.2) or choose another update-strategy to have it resolved", img.from, constraint)
					continue
				}
			}
		case resolve.Digest:
			if constraint == "" || resolve.CheckTag(constraint) != nil {
				c.add(Lost, "%s: update-strategy digest follows the tag after \":\", and %q names none; left out of image-list", img.from, img.spec)
				continue
			}
		default:
			if constraint != "" {
				c.add(Note, "%s: the tag %q is ignored by update-strategy %s, in argocd-image-updater as here; left out of the entry", img.from, constraint, strategy)
				constraint = ""
			}
		}
		if s.allow.set {
			v, ok, why := allowOf(s.allow)
			if !ok {
				c.add(Lost, "%s: allow-tags %q: %s; argocd-image-updater matched no tag with it and never updated %s; left out of image-list (the resolver leaves it as written too)", s.allow.from, s.allow.v, why, label)
				continue
			}
			mine = append(mine, param{name: alias + "." + plugin.KeyAllowTags, kind: plugin.KindString, str: v})
			eff.allow = v
		} else if !commonAllowOK {
			continue
		}
		if s.ignore.set {
			keep := ignoreOf(s.ignore, &c)
			// An empty list still overrides the application-wide one, as there.
			mine = append(mine, param{name: alias + "." + plugin.KeyIgnoreTags, kind: plugin.KindString, str: strings.Join(keep, ",")})
			eff.ignore = strings.Join(keep, ",")
		}
		if s.platforms.set {
			keep, ok := platformsOf(s.platforms, &c)
			if !ok {
				c.add(Lost, "%s: no platform it names can match an image, so argocd-image-updater never updated %s; left out of image-list", s.platforms.from, label)
				continue
			}
			mine = append(mine, param{name: alias + "." + plugin.KeyPlatforms, kind: plugin.KindString, str: strings.Join(keep, ",")})
			eff.platforms = strings.Join(keep, ",")
			platformsDiffer(s.platforms, keep, &c, said)
		} else if common.platforms.set {
			if !commonPlatformsOK {
				continue
			}
			platformsDiffer(common.platforms, commonPlatforms, &c, said)
		} else {
			noPlatforms = true
		}
		if s.forceUpdate.set {
			forceUpdateNote(s.forceUpdate, &c)
		}
		if ignoresAll(eff.ignore) {
			// argocd-image-updater's documented way to pause an image's updates.
			// Resolving it would fail (no tag qualifies) and stop the render; an
			// image no policy names is left as written, as argocd-image-updater left it.
			from := common.ignore.from
			if s.ignore.set {
				from = s.ignore.from
			}
			c.add(Note, "%s: ignore-tags \"*\" ignores every tag (argocd-image-updater's way to pause updates); %s is left out of image-list, so the resolver leaves it as written too", from, label)
			continue
		}
		key := resolve.RepoKey(repo)
		policy := fmt.Sprintf("%s|%s|%s|%s|%s", strategy, constraint, eff.allow, eff.ignore, platformSet(eff.platforms))
		if prev, ok := byRepo[key]; ok && prev.policy != policy {
			c.add(Lost, "%s: aliases %q and %q both name repository %s with different settings; the resolver rewrites images by repository and cannot tell which applies; %s is left out of image-list", img.from, prev.alias, alias, key, label)
			continue
		}
		byRepo[key] = repoUse{alias, policy}
		// Credentials.
		ps := s.pullSecret
		if !ps.set {
			ps = common.pullSecret
		}
		if ps.set {
			if cred, ok := credentialOf(ps, &c); ok {
				c.creds = append(c.creds, credential{prefix: resolve.RepoKey(repo), source: cred, from: ps.from})
			}
		}
		// Where pins of this image go in a Helm values file.
		mine = append(mine, helmKeys(img, alias, pinTarget, len(conf.images), &c)...)
		if img.kustomizeName.set {
			kn := img.kustomizeName
			if strings.HasPrefix(pinTarget, pin.TargetKustomization) {
				c.add(Note, "%s: kustomize.image-name %q: not needed; pin-target kustomization edits the images: entry whose name (else newName) is the image's repository", kn.from, kn.v)
			} else {
				c.add(Note, "%s: kustomize.image-name %q: not needed; the resolver rewrites the image in the rendered manifests, after Kustomize's images transformer", kn.from, kn.v)
			}
		}

		usedAlias[alias] = true
		entry := written
		if constraint != "" {
			entry += ":" + constraint
		}
		if explicit {
			entry = alias + "=" + entry
		}
		entries = append(entries, entry)
		perAlias = append(perAlias, mine...)
	}
	if noPlatforms && len(entries) > 0 {
		c.add(Note, "platforms: where none were given, argocd-image-updater required its own pod's platform (usually linux/amd64); the resolver requires the workload's nodeSelector/affinity platforms, else the operator's defaultPlatforms; write platforms: linux/amd64 to keep the old check")
	}

	if len(entries) > 0 {
		c.str(plugin.ParamImageList, strings.Join(entries, ", "))
	}
	c.params = append(c.params, appWide...)
	c.params = append(c.params, perAlias...)
	if pinMode != "" {
		c.str(plugin.ParamPinMode, pinMode)
		if pinTarget != "" && pinTarget != pin.TargetPins {
			c.str(plugin.ParamPinTarget, pinTarget)
		}
		if pinBranch != "" {
			c.str(plugin.ParamPinBranch, pinBranch)
		}
	}
	return c
}

func forceUpdateNote(s setting, c *converted) {
	c.add(Note, "%s: force-update %q: not needed; every image the policy names is rewritten wherever it appears in a pod template of the rendered manifests (image fields of custom resources are declared by the operator: extraImagePaths)", s.from, s.v)
}

// helmKeys carries the Helm values keys of an image over when pins are written to
// a Helm values file; otherwise they are not needed.
func helmKeys(img imageConf, alias, pinTarget string, images int, c *converted) []param {
	keys := []struct {
		s   setting
		key string
	}{{img.helmName, plugin.KeyHelmImageName}, {img.helmTag, plugin.KeyHelmImageTag}, {img.helmSpec, plugin.KeyHelmImageSpec}}
	if !strings.HasPrefix(pinTarget, pin.TargetHelmValues+":") {
		for _, k := range keys {
			if k.s.set {
				c.add(Note, "%s: %s %q: not needed; the resolver rewrites the image in the rendered manifests, whatever the values say", k.s.from, k.key, k.s.v)
			}
		}
		return nil
	}
	var out []param
	for _, k := range keys {
		if !k.s.set {
			continue
		}
		v := strings.TrimSpace(k.s.v)
		if slices.Contains(strings.Split(v, "."), "") {
			c.add(Lost, "%s: %s %q is not a dotted key of a values file (e.g. image.tag); pins of %q go to the values file's default keys", k.s.from, k.key, k.s.v, alias)
			continue
		}
		out = append(out, param{name: alias + "." + k.key, kind: plugin.KindString, str: v})
	}
	if len(out) == 0 && images > 1 {
		// argocd-image-updater's defaults, written out: the resolver's default
		// (image.tag) is for an app with one image only.
		c.add(Note, "%s: pins go to a Helm values file: argocd-image-updater's default keys image.name and image.tag written out for alias %q", img.from, alias)
		out = append(out,
			param{name: alias + "." + plugin.KeyHelmImageName, kind: plugin.KindString, str: "image.name"},
			param{name: alias + "." + plugin.KeyHelmImageTag, kind: plugin.KindString, str: "image.tag"})
	}
	return out
}

// sortFindings orders findings: what was lost first, then differences, then notes,
// each in the order found.
func sortFindings(fs []Finding) []Finding {
	out := slices.Clone(fs)
	slices.SortStableFunc(out, func(a, b Finding) int { return int(a.Kind) - int(b.Kind) })
	return slices.CompactFunc(out, func(a, b Finding) bool { return a == b })
}

// platformSet is a platform list in the resolver's canonical order, to compare.
func platformSet(list string) string {
	ps, err := resolve.ParsePlatforms(list)
	if err != nil {
		return list
	}
	return strings.Join(resolve.PlatformStrings(ps), ",")
}

// redactURL hides the password of a URL's user information: comments never
// carry a credential.
func redactURL(s string) string {
	if u, err := url.Parse(strings.TrimSpace(s)); err == nil && u.User != nil {
		return u.Redacted()
	}
	return s
}

// ignoresAll reports whether an ignore-tags list has a glob matching every tag.
func ignoresAll(list string) bool {
	for _, it := range strings.Split(list, ",") {
		switch strings.TrimPrefix(strings.TrimSpace(it), "glob:") {
		case "*", "**":
			return true
		}
	}
	return false
}
