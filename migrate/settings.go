package migrate

// How each argocd-image-updater setting reads, as that tool reads it.

import (
	"fmt"
	"path"
	"regexp"
	"strings"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// strategyOf reads an update-strategy as argocd-image-updater reads it
// (case-insensitively; latest and name are old names; anything else is semver).
func strategyOf(s setting, c *converted) resolve.Strategy {
	if !s.set {
		return resolve.Semver
	}
	switch v := strings.ToLower(strings.TrimSpace(s.v)); v {
	case "semver", "":
		return resolve.Semver
	case "newest-build", "latest":
		if v == "latest" {
			c.add(Note, "%s: update-strategy %q is argocd-image-updater's old name of newest-build; written newest-build", s.from, s.v)
		}
		return resolve.NewestBuild
	case "alphabetical", "name":
		if v == "name" {
			c.add(Note, "%s: update-strategy %q is argocd-image-updater's old name of alphabetical; written alphabetical", s.from, s.v)
		}
		return resolve.Alphabetical
	case "digest":
		return resolve.Digest
	default:
		c.add(Note, "%s: update-strategy %q is unknown to argocd-image-updater, which used semver in its place; written semver", s.from, s.v)
		return resolve.Semver
	}
}

// allowOf reads an allow-tags value as argocd-image-updater reads it. ok is false
// when it matched no tag there (an unknown function, a regexp that does not
// compile): argocd-image-updater then never updated the image.
func allowOf(s setting) (v string, ok bool, why string) {
	t := strings.TrimSpace(s.v)
	if strings.EqualFold(t, "any") {
		return "any", true, ""
	}
	fn, arg, found := strings.Cut(t, ":")
	if !found {
		return "", false, "not a match function (regexp:EXPR or any)"
	}
	if !strings.EqualFold(fn, "regexp") {
		return "", false, fmt.Sprintf("unknown match function %q (argocd-image-updater knows regexp: and any)", fn)
	}
	if _, err := regexp.Compile(arg); err != nil {
		return "", false, fmt.Sprintf("the regular expression does not compile: %v", err)
	}
	return "regexp:" + arg, true, ""
}

// ignoreOf keeps the ignore-tags globs that mean the same here; it drops items
// that matched no tag in argocd-image-updater (which reads every item as a glob):
// a "regexp:" item (a regular expression here) and a malformed glob.
func ignoreOf(s setting, c *converted) []string {
	var keep []string
	for _, it := range s.list {
		switch {
		case strings.HasPrefix(strings.ToLower(it), "regexp:"):
			c.add(Note, "%s: item %q is a glob to argocd-image-updater, which matches no tag (a tag has no \":\"), and a regular expression here; left out, so nothing changes", s.from, it)
		case !validGlob(it):
			c.add(Note, "%s: item %q is not a valid glob; argocd-image-updater matched no tag with it; left out", s.from, it)
		default:
			keep = append(keep, it)
		}
	}
	return keep
}

func validGlob(p string) bool {
	p = strings.TrimPrefix(p, "glob:")
	_, err := path.Match(p, "")
	return err == nil && p != ""
}

// platformsOf keeps the platforms the resolver reads; an entry it cannot read is
// one argocd-image-updater could not match either (it compares the strings). ok is
// false when none is left: no tag ever qualified there.
func platformsOf(s setting, c *converted) (keep []string, ok bool) {
	for _, it := range s.list {
		if _, err := resolve.ParsePlatform(it); err != nil {
			c.add(Note, "%s: platform %q matches no image in argocd-image-updater and is refused here (accepted: os/arch[/variant], lowercase); left out", s.from, it)
			continue
		}
		keep = append(keep, it)
	}
	return keep, len(keep) > 0 || len(s.list) == 0
}

// platformsDiffer says, once per setting, that several platforms mean "any one"
// there and "every one" here, and offers the spelling that keeps the intent.
func platformsDiffer(s setting, keep []string, c *converted, said map[string]bool) {
	if len(keep) < 2 || said[s.from] {
		return
	}
	said[s.from] = true
	groups := map[string]bool{}
	for _, p := range keep {
		q, _ := resolve.ParsePlatform(p)
		groups[q.OS+"/"+q.Arch] = true
	}
	offer := ""
	if len(groups) == 1 {
		for g := range groups {
			offer = fmt.Sprintf("to accept a tag that has any of them, write %s (without a variant: any variant)", g)
		}
	} else {
		offer = fmt.Sprintf("to accept a tag that has any one of them, name only the platform the workload runs on (one of %s), or leave platforms out so the workload's nodeSelector/affinity decides", strings.Join(keep, ", "))
	}
	c.add(Differs, "%s: platforms %s: argocd-image-updater accepted a tag that has any one of them; the resolver requires every one (the workload may land on each), and carries that meaning over; %s", s.from, strings.Join(keep, ","), offer)
}

// credentialOf reads a pull-secret; argocd-image-updater ignored one it could
// not parse.
func credentialOf(s setting, c *converted) (string, bool) {
	src, err := resolve.ParseCredentialSource(s.v)
	if err != nil {
		c.add(Note, "%s: pull-secret %q: %v; argocd-image-updater ignored it too (accepted: secret:NAMESPACE/NAME#FIELD, pullsecret:NAMESPACE/NAME, env:VAR, ext:/path)", s.from, s.v, err)
		return "", false
	}
	return src.String(), true
}
