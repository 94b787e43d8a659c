package migrate

import (
	"fmt"
	"path"
	"strings"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/plugin"
)

// writeBack is an app's write-back, converted: the pin parameters ("" for none).
type writeBack struct {
	mode, target, branch, push string
}

// convertWriteBack maps write-back-method, write-back-target, git-branch and the
// ImageUpdater's gitConfig.pullRequest to pin-mode, pin-target, pin-branch and
// pin-push; a separate write branch (git-branch base:write) is pin-push
// pull-request too.
func convertWriteBack(conf *appConf, src appSource, c *converted) writeBack {
	var mode, target, branch string
	git := false
	if conf.method.set {
		m := strings.TrimSpace(conf.method.v)
		switch {
		case m == "argocd" || m == "":
			c.add(Note, "%s: write-back-method %q: not needed; the rendered manifests carry the resolved tags and nothing is written to the Application", conf.method.from, conf.method.v)
		case m == "git" || strings.HasPrefix(m, "git:"):
			git = true
			mode = pin.ModeUse
			c.add(Note, "%s: write-back-method %q is pin-mode use: renders take images from the pins in git, and the sidecar's daemon commits each new match (pin-mode write records them and renders live)", conf.method.from, m)
			if creds := strings.TrimPrefix(strings.TrimPrefix(m, "git"), ":"); creds != "" && creds != "repocreds" {
				c.add(Lost, "%s: git credentials %q: pins are committed by the sidecar's daemon with the operator's git.credentials (one configuration for every app)", conf.method.from, creds)
			} else {
				c.add(Note, "%s: pins are committed by the sidecar's daemon with the operator's git.credentials; it does not read Argo CD's repository credentials", conf.method.from)
			}
		default:
			c.add(Lost, "%s: write-back-method %q: unknown (argocd-image-updater knows argocd, git and git:<credentials>)", conf.method.from, conf.method.v)
		}
	}
	if !git {
		for _, s := range append([]setting{conf.target, conf.branch, conf.repository, conf.pullRequest}, conf.gitOther...) {
			if s.set {
				c.add(Note, "%s: used by argocd-image-updater only with write-back-method git; it had no effect and is left out", s.from)
			}
		}
		return writeBack{}
	}
	target = pin.TargetPins
	if conf.target.set {
		target = convertTarget(conf.target, src, c)
	} else {
		c.add(Note, "write-back target: argocd-image-updater's .argocd-source-<app>.yaml is neither read nor written by the resolver; pins go to %s beside the app; remove the old file once the app renders through the plugin (Argo CD still merges it into the source)", pin.PinsFile)
	}
	push := ""
	if conf.branch.set {
		b := strings.TrimSpace(conf.branch.v)
		// base:write, argocd-image-updater's separate write branch: it checks out
		// base and pushes to a new branch write (a template) made from it.
		base, write, _ := strings.Cut(b, ":")
		base, write = strings.TrimSpace(base), strings.TrimSpace(write)
		if write != "" {
			push = plugin.PinPushPullRequest
			writeBranchFinding(conf, b, base, write, c)
		}
		// An empty base is the Application's own branch: pin-branch's default.
		if base != "" {
			if err := pin.CheckBranch(base); err != nil {
				c.add(Lost, "%s: git-branch %q: %v", conf.branch.from, base, err)
			} else {
				branch = base
			}
		}
	}
	if conf.repository.set {
		if sameRepo(conf.repository.v, src.repoURL) {
			c.add(Note, "%s: git-repository %q: not needed; pins are committed to the Application's source repository", conf.repository.from, redactURL(conf.repository.v))
		} else {
			c.add(Lost, "%s: git-repository %q: pins are committed to the Application's source repository (%s) only", conf.repository.from, redactURL(conf.repository.v), redactURL(src.repoURL))
		}
	}
	for _, s := range conf.gitOther {
		c.add(Lost, "%s: set once for every app on the sidecar by the operator (git.message, git.author, git.signingKeyFile)", s.from)
	}
	if pr := convertPullRequest(conf.pullRequest, c); pr != "" {
		push = pr
	}
	return writeBack{mode: mode, target: target, branch: branch, push: push}
}

// writeBranchFinding says how a separate write branch (git-branch base:write,
// gitConfig.branch of the ImageUpdater) is carried over: as pin-push
// pull-request, the plugin's way to keep pins off the base branch until someone
// merges them. The branch's name is the resolver's own, not the template.
func writeBranchFinding(conf *appConf, value, base, write string, c *converted) {
	into := fmt.Sprintf("%q", base)
	if base == "" {
		into = "the Application's branch (targetRevision)"
	}
	opened := "argocd-image-updater only pushed the branch"
	if conf.pullRequest.set {
		opened = "as gitConfig.pullRequest did there"
	}
	c.add(Differs, "%s: git-branch %q: argocd-image-updater pushed each update to a new branch %q made from %s; the closest here is pin-push %s: pins go to the resolver's own branch image-resolver/<app> (one per app, updated in place; the name %q is not kept) with a pull request into %s, which the resolver opens through the forge the operator configures in the sidecar's git.forges (%s); pin-push %s would commit them to %s itself",
		conf.branch.from, value, write, into, plugin.PinPushPullRequest, write, into, opened, plugin.PinPushDirect, into)
}

// convertPullRequest maps the ImageUpdater's gitConfig.pullRequest to pin-push
// ("" when it is not set). The forge and its token are the operator's, in the
// sidecar's git.forges, whatever forge the resource names.
func convertPullRequest(s setting, c *converted) string {
	if !s.set {
		return ""
	}
	forges := "no forge"
	if s.v != "" {
		forges = s.v
	}
	c.add(Note, "%s (%s) is pin-push %s: pins are proposed to the branch as a pull request, one per app (branch image-resolver/<app>); the operator configures the repository's forge and its token in the sidecar's git.forges (argocd-image-updater's git credentials are not used for it)",
		s.from, forges, plugin.PinPushPullRequest)
	return plugin.PinPushPullRequest
}

// sameRepo compares git URLs loosely: scheme, a trailing .git and / aside.
func sameRepo(a, b string) bool {
	n := func(s string) string {
		s = strings.TrimSpace(strings.ToLower(s))
		if _, rest, ok := strings.Cut(s, "://"); ok {
			s = rest
		}
		s = strings.TrimSuffix(strings.TrimSuffix(s, "/"), ".git")
		return s
	}
	return n(a) == n(b)
}

// convertTarget maps write-back-target to pin-target. argocd-image-updater reads
// a path with a leading / from the repository root and any other from the app's
// path; pin-target paths are relative to the app directory and stay inside it.
func convertTarget(s setting, src appSource, c *converted) string {
	v := strings.TrimSpace(s.v)
	kind, p, hasPath := strings.Cut(v, ":")
	rel := func() (string, bool) {
		if strings.HasPrefix(p, "/") {
			appDir := path.Clean("/" + src.path)
			full := path.Clean(p)
			if full == appDir {
				return ".", true
			}
			r, ok := strings.CutPrefix(full, strings.TrimSuffix(appDir, "/")+"/")
			return r, ok
		}
		r := path.Clean(p)
		return r, r != ".." && !strings.HasPrefix(r, "../")
	}
	switch kind {
	case "kustomization":
		if !hasPath {
			return pin.TargetKustomization
		}
		if r, ok := rel(); ok && r == "." {
			return pin.TargetKustomization
		}
		c.add(Lost, "%s: write-back-target %q: pin-target kustomization edits only the app's own kustomization.yaml (%s), not another directory's; pins go to %s instead", s.from, v, path.Join(src.path, pin.KustomizationFile), pin.PinsFile)
		return pin.TargetPins
	case "helmvalues":
		if !hasPath {
			p = "values.yaml"
		}
		r, ok := rel()
		if !ok {
			c.add(Lost, "%s: write-back-target %q: the values file is outside the app's directory (%s); pin-target helmvalues names a file inside it; pins go to %s instead", s.from, v, src.path, pin.PinsFile)
			return pin.TargetPins
		}
		t := pin.TargetHelmValues + ":" + r
		if _, err := pin.ParseTarget(t, nil); err != nil {
			c.add(Lost, "%s: write-back-target %q: %v; pins go to %s instead", s.from, v, err, pin.PinsFile)
			return pin.TargetPins
		}
		if t != pin.TargetHelmValues+":"+p {
			c.add(Note, "%s: write-back-target %q is written %s (relative to the app's directory)", s.from, v, t)
		}
		return t
	}
	c.add(Lost, "%s: write-back-target %q: unknown (argocd-image-updater knows kustomization[:path] and helmvalues[:path]); pins go to %s", s.from, v, pin.PinsFile)
	return pin.TargetPins
}
