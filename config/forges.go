package config

import (
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin/forge"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// GitForge is the forge of the repositories under Prefix, where pull requests
// of pins (pin-push pull-request) are opened: git.forges[].
type GitForge struct {
	// Prefix is a repository URL prefix, as the apps' repoURL spell it
	// (https://github.com/org/); the longest matching prefix wins.
	Prefix string `json:"prefix"`
	// Kind is github, gitlab or gitea (Forgejo is gitea).
	Kind string `json:"kind"`
	// API is the forge's API base URL (https://api.github.com,
	// https://gitlab.example.com, https://gitea.example.com).
	API string `json:"api"`
	// TokenFile holds the token, read at each write (a rotated token is used
	// at the next one).
	TokenFile string `json:"tokenFile,omitempty"`
	// AppID, InstallationID and PrivateKeyFile authenticate as a GitHub App
	// installation instead of TokenFile (github only).
	AppID          int64  `json:"appID,omitempty"`
	InstallationID int64  `json:"installationID,omitempty"`
	PrivateKeyFile string `json:"privateKeyFile,omitempty"`
	// Labels, Reviewers and Assignees are set on each pull request opened.
	Labels    []string `json:"labels,omitempty"`
	Reviewers []string `json:"reviewers,omitempty"`
	Assignees []string `json:"assignees,omitempty"`
	// AutoMerge asks the forge to merge once its checks pass (off by default).
	AutoMerge bool `json:"autoMerge,omitempty"`
}

// forgesAccepted describes a git.forges entry, for messages.
const forgesAccepted = "git.forges: [{prefix, kind: " + forge.KindsAccepted + ", api, tokenFile (or appID, installationID, privateKeyFile for a GitHub App), labels, reviewers, assignees, autoMerge}]"

func (f GitForge) validate(field string) error {
	switch {
	case f.Prefix == "":
		return &resolve.InputError{Field: field + ".prefix", Value: "", Accepted: "a repository URL prefix, e.g. https://github.com/org/"}
	case f.Kind != forge.KindGitHub && f.Kind != forge.KindGitLab && f.Kind != forge.KindGitea:
		return &resolve.InputError{Field: field + ".kind", Value: f.Kind, Accepted: forge.KindsAccepted}
	}
	u, err := url.Parse(f.API)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		return &resolve.InputError{Field: field + ".api", Value: redactedURL(f.API), Accepted: "the forge's API URL, http(s)://host[/path], without credentials"}
	}
	app := f.AppID != 0 || f.InstallationID != 0 || f.PrivateKeyFile != ""
	switch {
	case app && f.Kind != forge.KindGitHub:
		return &resolve.InputError{Field: field + ".appID", Value: fmt.Sprint(f.AppID), Accepted: "GitHub App settings only with kind github"}
	case app && f.TokenFile != "":
		return &resolve.InputError{Field: field + ".tokenFile", Value: f.TokenFile, Accepted: "either tokenFile or a GitHub App (appID, installationID, privateKeyFile), not both"}
	case app && (f.AppID <= 0 || f.InstallationID <= 0 || f.PrivateKeyFile == ""):
		return &resolve.InputError{Field: field + ".appID", Value: fmt.Sprintf("appID %d, installationID %d, privateKeyFile %q", f.AppID, f.InstallationID, f.PrivateKeyFile),
			Accepted: "a GitHub App needs all three: appID, installationID and privateKeyFile"}
	case !app && f.TokenFile == "":
		return &resolve.InputError{Field: field + ".tokenFile", Value: "", Accepted: "the path of a file holding the forge's API token"}
	}
	return nil
}

func redactedURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		return u.Redacted()
	}
	return s
}

// forgeFor returns the index of the forge with the longest prefix of repoURL,
// -1 for none.
func (g GitConfig) forgeFor(repoURL string) int {
	best := -1
	for i, f := range g.Forges {
		if strings.HasPrefix(repoURL, f.Prefix) && (best < 0 || len(f.Prefix) > len(g.Forges[best].Prefix)) {
			best = i
		}
	}
	return best
}

// ForgeFor returns the forge of repoURL and the repository's path on it
// (owner/name: the URL's path after the prefix's host, without .git).
func (g GitConfig) ForgeFor(repoURL string) (GitForge, string, error) {
	best := g.forgeFor(repoURL)
	if best < 0 {
		return GitForge{}, "", fmt.Errorf("no forge is configured for repository %s (accepted: %s, one whose prefix the repository URL starts with)", redactedURL(repoURL), forgesAccepted)
	}
	path, err := RepoPath(repoURL)
	if err != nil {
		return GitForge{}, "", err
	}
	return g.Forges[best], path, nil
}

// RepoPath is a repository URL's path as forges' APIs spell it: owner/name
// (GitLab: group/subgroup/name), from https://host/owner/name(.git) or
// git@host:owner/name(.git) or ssh://git@host/owner/name.
func RepoPath(repoURL string) (string, error) {
	var p string
	if isSSHURL(repoURL) && !strings.HasPrefix(repoURL, "ssh://") {
		_, p, _ = strings.Cut(repoURL, ":")
	} else {
		u, err := url.Parse(repoURL)
		if err != nil || u.Host == "" {
			return "", fmt.Errorf("repository URL %q: not a URL with a host and a path (accepted: https://host/owner/name, ssh://git@host/owner/name or git@host:owner/name)", redactedURL(repoURL))
		}
		p = u.Path
	}
	p = strings.TrimSuffix(strings.Trim(p, "/"), ".git")
	if !strings.Contains(p, "/") || strings.Contains(p, "..") {
		return "", fmt.Errorf("repository URL %q: path %q is not owner/name (accepted: https://host/owner/name)", redactedURL(repoURL), p)
	}
	return p, nil
}

// ForgeToken reads the token of f's tokenFile. Errors name the file, never what
// it holds.
func (f GitForge) ForgeToken() (string, error) {
	b, err := os.ReadFile(f.TokenFile)
	if err != nil {
		return "", fmt.Errorf("forge %s: tokenFile: %w", f.Prefix, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("forge %s: tokenFile %s is empty", f.Prefix, f.TokenFile)
	}
	return tok, nil
}
