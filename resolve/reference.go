package resolve

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// Image is a parsed image reference as written in a manifest or a policy.
type Image struct {
	// Written is the repository exactly as the user wrote it (no tag or digest), so a
	// rewrite keeps the host and path spelling of the source.
	Written string
	// Repo is the normalised repository (docker.io/library/nginx for nginx).
	Repo name.Repository
	Tag  string
	// Digest is "sha256:..." when the reference carries one.
	Digest string
}

// Key is the normalised repository name used to compare images: Docker Hub's aliases
// and the implicit library/ namespace are folded into one spelling.
func (i Image) Key() string { return RepoKey(i.Repo) }

// RepoKey returns the canonical comparison key of a repository.
func RepoKey(r name.Repository) string {
	host := r.RegistryStr()
	switch host {
	case name.DefaultRegistry, "docker.io", "registry-1.docker.io":
		host = "docker.io"
	}
	return host + "/" + r.RepositoryStr()
}

// String renders the image as it would be written: repository as written, then
// :tag and @digest when present.
func (i Image) String() string {
	s := i.Written
	if i.Tag != "" {
		s += ":" + i.Tag
	}
	if i.Digest != "" {
		s += "@" + i.Digest
	}
	return s
}

// ParseImage parses an image reference such as nginx, nginx:1.25,
// ghcr.io/org/app@sha256:..., or localhost:5000/team/app:v1@sha256:....
func ParseImage(s string) (Image, error) {
	const accepted = "[host[:port]/]path[:tag][@sha256:digest]"
	if s == "" || strings.TrimSpace(s) != s {
		return Image{}, &InputError{Field: "image", Value: s, Accepted: accepted}
	}
	rest, digest, hasDigest := strings.Cut(s, "@")
	repoPart, tag := splitTag(rest)
	repo, err := newRepository(repoPart)
	if err != nil {
		return Image{}, &InputError{Field: "image", Value: s, Accepted: accepted, Err: err}
	}
	img := Image{Written: repoPart, Repo: repo}
	if tag != "" || strings.HasSuffix(rest, ":") {
		if _, err := name.NewTag(repoPart+":"+tag, name.WeakValidation); err != nil {
			return Image{}, &InputError{Field: "image", Value: s, Accepted: accepted, Err: err}
		}
		img.Tag = tag
	}
	if hasDigest {
		if _, err := name.NewDigest(repoPart+"@"+digest, name.WeakValidation); err != nil {
			return Image{}, &InputError{Field: "image", Value: s, Accepted: accepted, Err: err}
		}
		img.Digest = digest
	}
	return img, nil
}

// ParseImageSpec parses an image-list entry value, repo[:constraint], as
// argocd-image-updater writes it. The constraint may hold characters a tag cannot
// (~1.2, >=1.0 <2), so it is split off after the last path segment's colon.
func ParseImageSpec(s string) (repo name.Repository, written, constraint string, err error) {
	const accepted = "repository[:constraint], e.g. ghcr.io/org/app:~1.2"
	if strings.TrimSpace(s) == "" {
		return name.Repository{}, "", "", &InputError{Field: "image", Value: s, Accepted: accepted}
	}
	if strings.Contains(s, "@") {
		return name.Repository{}, "", "", &InputError{Field: "image", Value: s, Accepted: accepted,
			Err: fmt.Errorf("a digest does not belong in an image-list entry; use update-strategy digest")}
	}
	written, constraint = splitTag(strings.TrimSpace(s))
	repo, err = newRepository(written)
	if err != nil {
		return name.Repository{}, "", "", &InputError{Field: "image", Value: s, Accepted: accepted, Err: err}
	}
	return repo, written, constraint, nil
}

// pathComponent is distribution's grammar for one repository path component.
var pathComponent = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$`)

// newRepository parses a repository name; go-containerregistry is lenient about
// path components (a//b), the distribution grammar is not.
func newRepository(s string) (name.Repository, error) {
	repo, err := name.NewRepository(s, name.WeakValidation)
	if err != nil {
		return name.Repository{}, err
	}
	for _, c := range strings.Split(repo.RepositoryStr(), "/") {
		if !pathComponent.MatchString(c) {
			return name.Repository{}, fmt.Errorf("repository path component %q is not lowercase letters, digits and separators", c)
		}
	}
	return repo, nil
}

// splitTag splits "host:port/path:tag" into repository and tag: the tag separator is
// the first colon after the last slash.
func splitTag(s string) (repo, tag string) {
	slash := strings.LastIndex(s, "/")
	if i := strings.Index(s[slash+1:], ":"); i >= 0 {
		i += slash + 1
		return s[:i], s[i+1:]
	}
	return s, ""
}
