package migrate

import (
	"fmt"
	"strings"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/plugin"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// converter carries what convert's steps share: the settings every image reads,
// and what the images converted so far have taken.
type converter struct {
	c         converted
	conf      *appConf
	pinTarget string
	appWide   appWideSettings

	usedAlias map[string]bool
	// byRepo is the policy of each repository: the resolver rewrites images by
	// repository, so two aliases of one repository must have one policy (as the
	// plugin checks).
	byRepo      map[string]repoUse
	said        map[string]bool // for platformsDiffer: the settings it spoke of
	noPlatforms bool            // an image has no platforms, application-wide or its own
	entries     []string        // image-list's
	perAlias    []param
}

type repoUse struct{ alias, policy string }

// filters are the tag filters and platforms in effect for an image.
type filters struct{ allow, ignore, platforms string }

// convertImage converts one image into an image-list entry and its per-alias
// parameters, or leaves it out, saying why.
func (cv *converter) convertImage(img imageConf) {
	c := &cv.c
	repo, written, constraint, err := resolve.ParseImageSpec(img.spec)
	if err != nil {
		c.add(Lost, "%s: image %q: %v; left out of image-list", img.from, img.spec, err)
		return
	}
	label := fmt.Sprintf("image %s", written)
	if img.alias != "" {
		label = fmt.Sprintf("image %q (%s)", img.alias, written)
	}
	alias, explicit := cv.aliasOf(img, written)
	// The settings in effect: the image's, else the application-wide ones.
	s := img.settings
	strategy := cv.appWide.strategy
	var mine []param
	if s.strategy.set {
		strategy = strategyOf(s.strategy, c)
		mine = append(mine, param{name: alias + "." + plugin.KeyUpdateStrategy, kind: plugin.KindString, str: string(strategy)})
	}
	constraint, ok := cv.constraintFor(img, strategy, constraint)
	if !ok {
		return
	}
	filterParams, eff, ok := cv.filtersOf(img, alias, label)
	if !ok {
		return
	}
	mine = append(mine, filterParams...)
	verifyKey, ok := cv.verifyOf(img, label)
	if !ok {
		return
	}
	if verifyKey != cv.appWide.verifyKey {
		mine = append(mine, verifyParam(alias, verifyKey))
	}
	if s.forceUpdate.set {
		forceUpdateNote(s.forceUpdate, c)
	}
	if cv.paused(img, eff, label) {
		return
	}
	key := resolve.RepoKey(repo)
	policy := fmt.Sprintf("%s|%s|%s|%s|%s|%s", strategy, constraint, eff.allow, eff.ignore, platformSet(eff.platforms), verifyKey)
	if !cv.claimRepository(img, key, alias, label, policy) {
		return
	}
	cv.addCredential(img, key)
	// Where pins of this image go in a Helm values file.
	mine = append(mine, helmKeys(img, alias, cv.pinTarget, len(cv.conf.images), c)...)
	cv.kustomizeNameNote(img)

	cv.usedAlias[alias] = true
	entry := written
	if constraint != "" {
		entry += ":" + constraint
	}
	if explicit {
		entry = alias + "=" + entry
	}
	cv.entries = append(cv.entries, entry)
	cv.perAlias = append(cv.perAlias, mine...)
}

// aliasOf is the image's alias as the resolver's parameters accept it, unique in
// the app; explicit says the entry must write it (alias=), the plugin deriving
// another from the repository.
func (cv *converter) aliasOf(img imageConf, written string) (alias string, explicit bool) {
	explicit = img.alias != ""
	if explicit {
		alias = ourAlias(img.alias)
		if alias != normaliseAlias(img.alias) {
			cv.c.add(Note, "%s: alias %q is written %q here (aliases are letters, digits, - and _)", img.from, img.alias, alias)
		}
	} else {
		alias = deriveAlias(written)
		if !aliasRE.MatchString(alias) {
			alias, explicit = ourAlias(alias), true
		}
	}
	if cv.usedAlias[alias] {
		base := alias
		for n := 2; cv.usedAlias[alias]; n++ {
			alias = fmt.Sprintf("%s-%d", base, n)
		}
		explicit = true
		cv.c.add(Note, "%s: alias %q is taken by another image of the app; written %q", img.from, base, alias)
	}
	return alias, explicit
}

// constraintFor is the image's constraint (the tag after ":") as the strategy
// reads it; ok is false when the image is left out, argocd-image-updater never
// having updated it.
func (cv *converter) constraintFor(img imageConf, strategy resolve.Strategy, constraint string) (_ string, ok bool) {
	switch strategy {
	case resolve.Semver:
		if constraint != "" {
			if _, err := (resolve.PolicySpec{Constraint: constraint}).Compile(); err != nil {
				cv.c.add(Lost, "%s: %q is not a semver constraint, so argocd-image-updater never updated this image (update-strategy semver); left out of image-list, so the resolver leaves it as written too; write a range (e.g. ~1.2) or choose another update-strategy to have it resolved", img.from, constraint)
				return "", false
			}
		}
	case resolve.Digest:
		if constraint == "" || resolve.CheckTag(constraint) != nil {
			cv.c.add(Lost, "%s: update-strategy digest follows the tag after \":\", and %q names none; left out of image-list", img.from, img.spec)
			return "", false
		}
	default:
		if constraint != "" {
			cv.c.add(Note, "%s: the tag %q is ignored by update-strategy %s, in argocd-image-updater as here; left out of the entry", img.from, constraint, strategy)
			constraint = ""
		}
	}
	return constraint, true
}

// filtersOf converts the image's allow-tags, ignore-tags and platforms, and says
// which are in effect, the image's or else the application-wide ones; ok is
// false when the image is left out, argocd-image-updater never having updated it.
func (cv *converter) filtersOf(img imageConf, alias, label string) (mine []param, eff filters, ok bool) {
	c, s, w := &cv.c, img.settings, cv.appWide
	eff = filters{allow: w.allow, ignore: w.ignore, platforms: strings.Join(w.platforms, ",")}
	if s.allow.set {
		v, allowed, why := allowOf(s.allow)
		if !allowed {
			c.add(Lost, "%s: allow-tags %q: %s; argocd-image-updater matched no tag with it and never updated %s; left out of image-list (the resolver leaves it as written too)", s.allow.from, s.allow.v, why, label)
			return nil, eff, false
		}
		mine = append(mine, param{name: alias + "." + plugin.KeyAllowTags, kind: plugin.KindString, str: v})
		eff.allow = v
	} else if !w.allowOK {
		return nil, eff, false
	}
	if s.ignore.set {
		keep := ignoreOf(s.ignore, c)
		// An empty list still overrides the application-wide one, as there.
		mine = append(mine, param{name: alias + "." + plugin.KeyIgnoreTags, kind: plugin.KindString, str: strings.Join(keep, ",")})
		eff.ignore = strings.Join(keep, ",")
	}
	switch {
	case s.platforms.set:
		keep, matchable := platformsOf(s.platforms, c)
		if !matchable {
			c.add(Lost, "%s: no platform it names can match an image, so argocd-image-updater never updated %s; left out of image-list", s.platforms.from, label)
			return nil, eff, false
		}
		mine = append(mine, param{name: alias + "." + plugin.KeyPlatforms, kind: plugin.KindString, str: strings.Join(keep, ",")})
		eff.platforms = strings.Join(keep, ",")
		platformsDiffer(s.platforms, keep, c, cv.said)
	case cv.conf.common.platforms.set:
		if !w.platformsOK {
			return nil, eff, false
		}
		platformsDiffer(cv.conf.common.platforms, w.platforms, c, cv.said)
	default:
		cv.noPlatforms = true
	}
	return mine, eff, true
}

// verifyOf is the key an image's signatures must verify with: its own
// imagesVerification's, else the application's ("" for none); ok is false when
// the image is left out, its requirement not carried over.
func (cv *converter) verifyOf(img imageConf, label string) (key string, ok bool) {
	v := img.settings.verify
	if !v.set {
		if !cv.appWide.verifyOK {
			cv.c.add(Lost, "%s: %s is left out of image-list: its signature requirement (%s) could not be carried over, and it is never resolved without it", img.from, label, cv.conf.common.verify.from)
		}
		return cv.appWide.verifyKey, cv.appWide.verifyOK
	}
	return verifyKeyOf(v, &cv.c)
}

// paused reports, and says, that ignore-tags ignores every tag:
// argocd-image-updater's documented way to pause an image's updates. Resolving
// the image would fail (no tag qualifies) and stop the render; an image no policy
// names is left as written, as argocd-image-updater left it.
func (cv *converter) paused(img imageConf, eff filters, label string) bool {
	if !ignoresAll(eff.ignore) {
		return false
	}
	from := cv.conf.common.ignore.from
	if img.settings.ignore.set {
		from = img.settings.ignore.from
	}
	cv.c.add(Note, "%s: ignore-tags \"*\" ignores every tag (argocd-image-updater's way to pause updates); %s is left out of image-list, so the resolver leaves it as written too", from, label)
	return true
}

// claimRepository records the image's policy for its repository (repoKey); false
// when another alias gave the repository a different one: the image is left out.
func (cv *converter) claimRepository(img imageConf, repoKey, alias, label, policy string) bool {
	if prev, ok := cv.byRepo[repoKey]; ok && prev.policy != policy {
		cv.c.add(Lost, "%s: aliases %q and %q both name repository %s with different settings; the resolver rewrites images by repository and cannot tell which applies; %s is left out of image-list", img.from, prev.alias, alias, repoKey, label)
		return false
	}
	cv.byRepo[repoKey] = repoUse{alias, policy}
	return true
}

// addCredential keeps the image's pull-secret, else the application-wide one, for
// the registries file.
func (cv *converter) addCredential(img imageConf, repoKey string) {
	ps := img.settings.pullSecret
	if !ps.set {
		ps = cv.conf.common.pullSecret
	}
	if !ps.set {
		return
	}
	if cred, ok := credentialOf(ps, &cv.c); ok {
		cv.c.creds = append(cv.c.creds, credential{prefix: repoKey, source: cred, from: ps.from})
	}
}

// kustomizeNameNote says why the image's kustomize.image-name is not needed.
func (cv *converter) kustomizeNameNote(img imageConf) {
	if !img.kustomizeName.set {
		return
	}
	kn := img.kustomizeName
	if strings.HasPrefix(cv.pinTarget, pin.TargetKustomization) {
		cv.c.add(Note, "%s: kustomize.image-name %q: not needed; pin-target kustomization edits the images: entry whose name (else newName) is the image's repository", kn.from, kn.v)
	} else {
		cv.c.add(Note, "%s: kustomize.image-name %q: not needed; the resolver rewrites the image in the rendered manifests, after Kustomize's images transformer", kn.from, kn.v)
	}
}
