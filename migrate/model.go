package migrate

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// AnnotationPrefix prefixes every argocd-image-updater annotation.
const AnnotationPrefix = "argocd-image-updater.argoproj.io/"

// setting is one value as the input gave it, and where.
type setting struct {
	set  bool
	v    string
	list []string // ignore-tags, platforms
	from string   // "annotation argocd-image-updater.argoproj.io/web.allow-tags", "ImageUpdater argocd/x applicationRefs[0].images[1].commonUpdateSettings.allowTags"
}

func str(v, from string) setting { return setting{set: true, v: v, from: from} }

// splitList splits a comma-separated annotation value into trimmed, non-empty items.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func list(items []string, from string) setting {
	return setting{set: true, list: slices.Clone(items), v: strings.Join(items, ","), from: from}
}

// updateSettings are argocd-image-updater's per-image settings (annotations
// <alias>.<key> or the application-wide <key>; the CRD's commonUpdateSettings).
type updateSettings struct {
	strategy, allow, ignore, platforms, pullSecret, forceUpdate setting
	// verify is the ImageUpdater's imagesVerification (not a commonUpdateSettings
	// field, but layered as they are).
	verify verifySetting
}

// over returns s with every field o sets replaced by o's: o is more specific.
func (s updateSettings) over(o updateSettings) updateSettings {
	for _, f := range []struct{ dst, src *setting }{
		{&s.strategy, &o.strategy}, {&s.allow, &o.allow}, {&s.ignore, &o.ignore},
		{&s.platforms, &o.platforms}, {&s.pullSecret, &o.pullSecret}, {&s.forceUpdate, &o.forceUpdate},
	} {
		if f.src.set {
			*f.dst = *f.src
		}
	}
	if o.verify.set {
		s.verify = o.verify
	}
	return s
}

// imageConf is one image of argocd-image-updater's configuration of an app.
type imageConf struct {
	alias                                      string // as written; "" for an image-list entry without alias=
	spec                                       string // image[:constraint or tag] as written
	from                                       string
	settings                                   updateSettings
	helmName, helmTag, helmSpec, kustomizeName setting
}

// appConf is argocd-image-updater's configuration of one Application, from its
// annotations or from the ImageUpdater resource that selects it.
type appConf struct {
	via    string // what the configuration came from, for the comments
	images []imageConf
	common updateSettings // application-wide defaults
	// write-back
	method, target, branch, repository setting
	// pullRequest is the ImageUpdater's gitConfig.pullRequest: v names its forges
	// (github, gitlab), comma-separated, as the resource lists them.
	pullRequest setting
	// gitOther are per-app git settings the sidecar's daemon has per installation.
	gitOther []setting
	// unread are things found in the input that migrate does not know.
	unread []string
}

// appWideKeys are the application-wide annotation keys (without the prefix).
var appWideKeys = []string{
	"image-list", "update-strategy", "allow-tags", "ignore-tags", "platforms", "pull-secret", "force-update",
	"write-back-method", "write-back-target", "git-branch", "git-repository",
	"git-commit-message", "git-commit-user", "git-commit-email", "git-commit-signing-key",
	"git-commit-signing-method", "git-commit-sign-off",
}

// aliasKeys are the per-image annotation keys: <alias>.<key>.
var aliasKeys = []string{
	"update-strategy", "allow-tags", "tag-match", "ignore-tags", "platforms", "pull-secret", "force-update",
	"helm.image-name", "helm.image-tag", "helm.image-spec", "kustomize.image-name",
}

// writeBranchHint follows the name of a key for a separate write branch that
// argocd-image-updater does not read (annotation git-write-branch, gitConfig's
// writeBranch): it had no effect there.
const writeBranchHint = " (it had no effect there: argocd-image-updater's separate write branch is written %s: <base>:<write branch>, which migrate carries over as pin-push pull-request)"

// normaliseAlias is argocd-image-updater's rule for annotation keys: "/" in an
// alias is written "_".
func normaliseAlias(a string) string { return strings.ReplaceAll(a, "/", "_") }

// fromAnnotations reads argocd-image-updater's annotations of an Application. It
// returns nil when there are none.
func fromAnnotations(ann map[string]string) *appConf {
	keys := make([]string, 0, len(ann))
	for k := range ann {
		if strings.HasPrefix(k, AnnotationPrefix) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	slices.Sort(keys)
	c := &appConf{via: "annotations"}
	perAlias := map[string]map[string]setting{}
	for _, k := range keys {
		key := strings.TrimPrefix(k, AnnotationPrefix)
		v := ann[k]
		from := "annotation " + k
		if slices.Contains(appWideKeys, key) {
			c.setAppWide(key, v, from)
			continue
		}
		matched := false
		for _, ak := range aliasKeys {
			if alias, ok := strings.CutSuffix(key, "."+ak); ok && alias != "" {
				if perAlias[alias] == nil {
					perAlias[alias] = map[string]setting{}
				}
				perAlias[alias][ak] = str(v, from)
				matched = true
				break
			}
		}
		if !matched {
			hint := ""
			if key == "git-write-branch" {
				hint = fmt.Sprintf(writeBranchHint, "git-branch")
			}
			c.unread = append(c.unread, fmt.Sprintf("annotation %s: not a key of argocd-image-updater's documentation%s", k, hint))
		}
	}
	if il, ok := ann[AnnotationPrefix+"image-list"]; ok {
		used := map[string]bool{}
		for _, entry := range splitList(il) {
			alias, spec := splitEntry(entry)
			img := imageConf{alias: alias, spec: spec, from: "annotation " + AnnotationPrefix + "image-list"}
			if alias != "" {
				n := normaliseAlias(alias)
				used[n] = true
				pa := perAlias[n]
				rd := func(k string) setting { return pa[k] }
				img.settings.strategy = rd("update-strategy")
				img.settings.allow = rd("allow-tags")
				if !img.settings.allow.set && rd("tag-match").set {
					// tag-match is the deprecated name of allow-tags, read only
					// when allow-tags is absent.
					img.settings.allow = rd("tag-match")
				}
				if s := rd("ignore-tags"); s.set {
					img.settings.ignore = list(splitList(s.v), s.from)
				}
				if s := rd("platforms"); s.set {
					img.settings.platforms = list(splitList(s.v), s.from)
				}
				img.settings.pullSecret = rd("pull-secret")
				img.settings.forceUpdate = rd("force-update")
				img.helmName, img.helmTag, img.helmSpec = rd("helm.image-name"), rd("helm.image-tag"), rd("helm.image-spec")
				img.kustomizeName = rd("kustomize.image-name")
			}
			c.images = append(c.images, img)
		}
		aliases := make([]string, 0, len(perAlias))
		for a := range perAlias {
			aliases = append(aliases, a)
		}
		slices.Sort(aliases)
		for _, a := range aliases {
			if !used[a] {
				for _, k := range sortedKeys(perAlias[a]) {
					c.unread = append(c.unread, fmt.Sprintf("%s: alias %q is not in image-list, so argocd-image-updater did not use it either", perAlias[a][k].from, a))
				}
			}
		}
	} else {
		c.unread = append(c.unread, "annotations of argocd-image-updater without "+AnnotationPrefix+"image-list: argocd-image-updater updated no image of this app")
	}
	return c
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (c *appConf) setAppWide(key, v, from string) {
	switch key {
	case "image-list":
	case "update-strategy":
		c.common.strategy = str(v, from)
	case "allow-tags":
		c.common.allow = str(v, from)
	case "ignore-tags":
		c.common.ignore = list(splitList(v), from)
	case "platforms":
		c.common.platforms = list(splitList(v), from)
	case "pull-secret":
		c.common.pullSecret = str(v, from)
	case "force-update":
		c.common.forceUpdate = str(v, from)
	case "write-back-method":
		c.method = str(v, from)
	case "write-back-target":
		c.target = str(v, from)
	case "git-branch":
		c.branch = str(v, from)
	case "git-repository":
		c.repository = str(v, from)
	default:
		c.gitOther = append(c.gitOther, str(v, from))
	}
}

// splitEntry splits an image-list entry "alias=image[:constraint]". The "=" names
// an alias only when no ":" comes before it (in "nginx:>=1.2" it belongs to the
// constraint), as the plugin reads image-list.
func splitEntry(entry string) (alias, spec string) {
	i := strings.Index(entry, "=")
	if i < 0 || strings.Contains(entry[:i], ":") {
		return "", strings.TrimSpace(entry)
	}
	return strings.TrimSpace(entry[:i]), strings.TrimSpace(entry[i+1:])
}

// The ImageUpdater resource (argocd-image-updater.argoproj.io/v1alpha1), as its
// api/v1alpha1 types declare it.

type crCommon struct {
	UpdateStrategy *string  `json:"updateStrategy,omitempty"`
	ForceUpdate    *bool    `json:"forceUpdate,omitempty"`
	AllowTags      *string  `json:"allowTags,omitempty"`
	IgnoreTags     []string `json:"ignoreTags,omitempty"`
	PullSecret     *string  `json:"pullSecret,omitempty"`
	Platforms      []string `json:"platforms,omitempty"`
}

type crGit struct {
	Repository      *string `json:"repository,omitempty"`
	Branch          *string `json:"branch,omitempty"`
	WriteBackTarget *string `json:"writeBackTarget,omitempty"`
	// PullRequest (argocd-image-updater after v1.1) opens a pull request to Branch
	// instead of pushing to it: a mapping of forge (github, gitlab) to its
	// settings, e.g. {github: {}}.
	PullRequest map[string]json.RawMessage `json:"pullRequest,omitempty"`
}

type crWriteBack struct {
	Method    *string `json:"method,omitempty"`
	GitConfig *crGit  `json:"gitConfig,omitempty"`
}

type crImage struct {
	Alias                string    `json:"alias"`
	ImageName            string    `json:"imageName"`
	CommonUpdateSettings *crCommon `json:"commonUpdateSettings,omitempty"`
	ImagesVerification   *crVerify `json:"imagesVerification,omitempty"`
	ManifestTargets      *struct {
		Helm *struct {
			Name string `json:"name"`
			Tag  string `json:"tag"`
			Spec string `json:"spec,omitempty"`
		} `json:"helm,omitempty"`
		Kustomize *struct {
			Name string `json:"name"`
		} `json:"kustomize,omitempty"`
	} `json:"manifestTargets,omitempty"`
}

type crRef struct {
	NamePattern          string          `json:"namePattern"`
	LabelSelectors       json.RawMessage `json:"labelSelectors,omitempty"`
	UseAnnotations       *bool           `json:"useAnnotations,omitempty"`
	CommonUpdateSettings *crCommon       `json:"commonUpdateSettings,omitempty"`
	WriteBackConfig      *crWriteBack    `json:"writeBackConfig,omitempty"`
	ImagesVerification   *crVerify       `json:"imagesVerification,omitempty"`
	Images               []crImage       `json:"images"`
}

type crSpec struct {
	Namespace            string       `json:"namespace"`
	CommonUpdateSettings *crCommon    `json:"commonUpdateSettings,omitempty"`
	WriteBackConfig      *crWriteBack `json:"writeBackConfig,omitempty"`
	ImagesVerification   *crVerify    `json:"imagesVerification,omitempty"`
	ApplicationRefs      []crRef      `json:"applicationRefs"`
	// Registries is read when a resource carries one (argocd-image-updater's
	// registries.conf entries).
	Registries []map[string]any `json:"registries,omitempty"`
}

// Known field names, to say which fields of a resource migrate does not know.
var (
	crSpecFields   = []string{"namespace", "commonUpdateSettings", "writeBackConfig", "imagesVerification", "applicationRefs", "registries"}
	crRefFields    = []string{"namePattern", "labelSelectors", "useAnnotations", "commonUpdateSettings", "writeBackConfig", "imagesVerification", "images"}
	crImageFields  = []string{"alias", "imageName", "commonUpdateSettings", "imagesVerification", "manifestTargets"}
	crCommonFields = []string{"updateStrategy", "forceUpdate", "allowTags", "ignoreTags", "pullSecret", "platforms"}
	crWriteFields  = []string{"method", "gitConfig"}
	crGitFields    = []string{"repository", "branch", "writeBackTarget", "pullRequest"}
	// crForges are the forges of gitConfig.pullRequest argocd-image-updater knows.
	crForges = []string{"github", "gitlab"}
)

func (c *crCommon) settings(from string) updateSettings {
	var s updateSettings
	if c == nil {
		return s
	}
	if c.UpdateStrategy != nil {
		s.strategy = str(*c.UpdateStrategy, from+".updateStrategy")
	}
	if c.AllowTags != nil {
		s.allow = str(*c.AllowTags, from+".allowTags")
	}
	if c.IgnoreTags != nil {
		var items []string
		for _, it := range c.IgnoreTags {
			items = append(items, splitList(it)...)
		}
		s.ignore = list(items, from+".ignoreTags")
	}
	if c.Platforms != nil {
		var items []string
		for _, it := range c.Platforms {
			items = append(items, splitList(it)...)
		}
		s.platforms = list(items, from+".platforms")
	}
	if c.PullSecret != nil {
		s.pullSecret = str(*c.PullSecret, from+".pullSecret")
	}
	if c.ForceUpdate != nil {
		s.forceUpdate = str(fmt.Sprint(*c.ForceUpdate), from+".forceUpdate")
	}
	return s
}

func (w *crWriteBack) apply(c *appConf, from string) {
	if w == nil {
		return
	}
	if w.Method != nil {
		c.method = str(*w.Method, from+".method")
	}
	if g := w.GitConfig; g != nil {
		if g.Repository != nil {
			c.repository = str(*g.Repository, from+".gitConfig.repository")
		}
		if g.Branch != nil {
			c.branch = str(*g.Branch, from+".gitConfig.branch")
		}
		if g.WriteBackTarget != nil {
			c.target = str(*g.WriteBackTarget, from+".gitConfig.writeBackTarget")
		}
		if g.PullRequest != nil {
			forges := slices.Sorted(maps.Keys(g.PullRequest))
			c.pullRequest = str(strings.Join(forges, ","), from+".gitConfig.pullRequest")
			for _, f := range forges {
				if raw := strings.Join(strings.Fields(string(g.PullRequest[f])), ""); raw != "{}" && raw != "null" {
					c.unread = append(c.unread, fmt.Sprintf("%s.gitConfig.pullRequest.%s: its settings are not carried over; the pull requests' settings are the operator's (the sidecar's git configuration)", from, f))
				}
			}
		}
	}
}

// fromResource builds the configuration an ImageUpdater's applicationRef gives
// an app: spec-wide settings, overridden by the ref's, overridden per image.
func fromResource(cr *imageUpdater, refIndex int) *appConf {
	ref := cr.spec.ApplicationRefs[refIndex]
	base := fmt.Sprintf("%s spec", cr.label)
	refPath := fmt.Sprintf("%s spec.applicationRefs[%d]", cr.label, refIndex)
	c := &appConf{via: fmt.Sprintf("%s (applicationRefs[%d], namePattern %q)", cr.label, refIndex, ref.NamePattern)}
	c.common = cr.spec.CommonUpdateSettings.settings(base + ".commonUpdateSettings").over(ref.CommonUpdateSettings.settings(refPath + ".commonUpdateSettings"))
	c.common.verify = cr.spec.ImagesVerification.setting(base + ".imagesVerification")
	if v := ref.ImagesVerification.setting(refPath + ".imagesVerification"); v.set {
		c.common.verify = v
	}
	cr.spec.WriteBackConfig.apply(c, base+".writeBackConfig")
	ref.WriteBackConfig.apply(c, refPath+".writeBackConfig")
	for i, im := range ref.Images {
		from := fmt.Sprintf("%s.images[%d]", refPath, i)
		img := imageConf{alias: im.Alias, spec: strings.TrimSpace(im.ImageName), from: from + ".imageName",
			settings: im.CommonUpdateSettings.settings(from + ".commonUpdateSettings")}
		img.settings.verify = im.ImagesVerification.setting(from + ".imagesVerification")
		if mt := im.ManifestTargets; mt != nil {
			if h := mt.Helm; h != nil {
				if h.Name != "" {
					img.helmName = str(h.Name, from+".manifestTargets.helm.name")
				}
				if h.Tag != "" {
					img.helmTag = str(h.Tag, from+".manifestTargets.helm.tag")
				}
				if h.Spec != "" {
					img.helmSpec = str(h.Spec, from+".manifestTargets.helm.spec")
				}
			}
			if k := mt.Kustomize; k != nil && k.Name != "" {
				img.kustomizeName = str(k.Name, from+".manifestTargets.kustomize.name")
			}
		}
		c.images = append(c.images, img)
	}
	c.unread = append(c.unread, cr.unread...)
	return c
}
