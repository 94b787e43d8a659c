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

// addOnce adds a finding that does not depend on where it was found, once.
func (c *converted) addOnce(k Kind, text string) {
	if !slices.Contains(c.findings, Finding{Kind: k, Text: text}) {
		c.findings = append(c.findings, Finding{Kind: k, Text: text})
	}
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
	cv := &converter{conf: conf, usedAlias: map[string]bool{}, byRepo: map[string]repoUse{}, said: map[string]bool{}}
	c := &cv.c
	for _, u := range conf.unread {
		c.add(Lost, "%s", u)
	}

	// Write-back first: the Helm keys depend on the pin target.
	wb := convertWriteBack(conf, src, c)
	cv.pinTarget = wb.target
	cv.appWide = convertAppWide(conf.common, c)
	for _, img := range conf.images {
		cv.convertImage(img)
	}
	if cv.noPlatforms && len(cv.entries) > 0 {
		c.add(Note, "platforms: where none were given, argocd-image-updater required its own pod's platform (usually linux/amd64); the resolver requires the workload's nodeSelector/affinity platforms, else the operator's defaultPlatforms; write platforms: linux/amd64 to keep the old check")
	}

	if len(cv.entries) > 0 {
		c.str(plugin.ParamImageList, strings.Join(cv.entries, ", "))
	}
	c.params = append(c.params, cv.appWide.params...)
	c.params = append(c.params, cv.perAlias...)
	if wb.mode != "" {
		c.str(plugin.ParamPinMode, wb.mode)
		if wb.target != "" && wb.target != pin.TargetPins {
			c.str(plugin.ParamPinTarget, wb.target)
		}
		if wb.branch != "" {
			c.str(plugin.ParamPinBranch, wb.branch)
		}
		if wb.push != "" {
			c.str(plugin.ParamPinPush, wb.push)
		}
	}
	return cv.c
}

// appWideSettings are an app's application-wide settings, converted: the
// parameters for all images, and what each image falls back on.
type appWideSettings struct {
	params   []param
	strategy resolve.Strategy
	allow    string
	// allowOK is false when allow-tags matched no tag in argocd-image-updater: the
	// images that use it were never updated there.
	allowOK     bool
	ignore      string
	platforms   []string
	platformsOK bool // likewise, false when no platform it names can match
	// verifyKey is the key signatures must verify with ("" for none); verifyOK is
	// false when the requirement could not be carried over: the images that
	// inherit it are left out rather than resolved unchecked.
	verifyKey string
	verifyOK  bool
}

// convertAppWide converts the application-wide settings.
func convertAppWide(common updateSettings, c *converted) appWideSettings {
	w := appWideSettings{strategy: resolve.Semver, allowOK: true, platformsOK: true, verifyOK: true}
	if common.strategy.set {
		w.strategy = strategyOf(common.strategy, c)
		w.params = append(w.params, param{name: plugin.KeyUpdateStrategy, kind: plugin.KindString, str: string(w.strategy)})
	}
	if common.allow.set {
		v, ok, why := allowOf(common.allow)
		w.allow = v
		if ok {
			w.params = append(w.params, param{name: plugin.KeyAllowTags, kind: plugin.KindString, str: v})
		} else {
			w.allowOK = false
			c.add(Lost, "%s: allow-tags %q: %s; argocd-image-updater matched no tag with it, so it never updated the images that use it; they are left out of image-list (the resolver leaves them as written too)", common.allow.from, common.allow.v, why)
		}
	}
	if common.ignore.set {
		if keep := ignoreOf(common.ignore, c); len(keep) > 0 {
			w.ignore = strings.Join(keep, ",")
			w.params = append(w.params, param{name: plugin.KeyIgnoreTags, kind: plugin.KindString, str: strings.Join(keep, ",")})
		}
	}
	if common.platforms.set {
		w.platforms, w.platformsOK = platformsOf(common.platforms, c)
		if len(w.platforms) > 0 {
			w.params = append(w.params, param{name: plugin.KeyPlatforms, kind: plugin.KindString, str: strings.Join(w.platforms, ",")})
		}
		if !w.platformsOK {
			c.add(Lost, "%s: no platform it names can match an image, so argocd-image-updater never updated the images that use it; they are left out of image-list", common.platforms.from)
		}
	}
	if common.forceUpdate.set {
		forceUpdateNote(common.forceUpdate, c)
	}
	if common.verify.set {
		w.verifyKey, w.verifyOK = verifyKeyOf(common.verify, c)
		if w.verifyKey != "" {
			w.params = append(w.params, verifyParam("", w.verifyKey))
		}
	}
	return w
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
// each in the order found; a finding repeated in a row is kept once.
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
