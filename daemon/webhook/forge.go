package webhook

import (
	"errors"
	"net/http"
	"strings"
)

// githubPackage is the package of GitHub's package and registry_package events.
type githubPackage struct {
	Name        string `json:"name"`
	PackageType string `json:"package_type"`
	Ecosystem   string `json:"ecosystem"`
	Owner       struct {
		Login string `json:"login"`
	} `json:"owner"`
	PackageVersion *struct {
		Name              string `json:"name"` // a container's manifest digest
		PackageURL        string `json:"package_url"`
		ContainerMetadata *struct {
			Tag struct {
				Name   string `json:"name"`
				Digest string `json:"digest"`
			} `json:"tag"`
		} `json:"container_metadata"`
	} `json:"package_version"`
}

// parseGitHub reads GitHub's package and registry_package events (the one named
// by X-GitHub-Event, else whichever the body holds): a published container
// package version is a push to ghcr.io (or the registry of its package_url);
// ping, other events and actions, and other package types are not.
func parseGitHub(h http.Header, body []byte) ([]item, error) {
	id, event := h.Get("X-GitHub-Delivery"), h.Get("X-GitHub-Event")
	if event != "" && event != "package" && event != "registry_package" {
		return ignoredEvent(id, event, body)
	}
	var p struct {
		Action          string         `json:"action"`
		Package         *githubPackage `json:"package"`
		RegistryPackage *githubPackage `json:"registry_package"`
	}
	if err := decodeObject(body, &p); err != nil {
		return nil, err
	}
	pkg, key := p.Package, "package"
	if event == "registry_package" || (event == "" && pkg == nil) {
		pkg, key = p.RegistryPackage, "registry_package"
	}
	switch {
	case pkg == nil:
		return nil, errors.New("no " + key)
	case p.Action == "":
		return nil, errors.New("no action")
	case p.Action != "published":
		return []item{ignoredItem(id, "action %s", quote(p.Action))}, nil
	case !strings.EqualFold(pkg.PackageType, "container") && !strings.EqualFold(pkg.Ecosystem, "container"):
		return []item{ignoredItem(id, "a package of type %s", quote(pkg.PackageType))}, nil
	}
	it, err := githubItem(id, key, pkg)
	if err != nil {
		return nil, err
	}
	return []item{it}, nil
}

func githubItem(id, key string, pkg *githubPackage) (item, error) {
	if pkg.Name == "" || pkg.Owner.Login == "" {
		return item{}, errors.New("no " + key + ".name or " + key + ".owner.login")
	}
	v := pkg.PackageVersion
	if v == nil {
		return item{}, errors.New("no " + key + ".package_version")
	}
	var tag, digest string
	if cm := v.ContainerMetadata; cm != nil {
		tag, digest = cm.Tag.Name, cm.Tag.Digest
	}
	if digest == "" && looksLikeDigest(v.Name) {
		digest = v.Name
	}
	registry := "ghcr.io"
	if v.PackageURL != "" {
		host, _, _, _, err := splitReference(v.PackageURL)
		if err != nil {
			return item{}, err
		}
		registry = host
	}
	// The container registry takes owner and name in lower case only.
	return pushItem(id, registry, strings.ToLower(pkg.Owner.Login+"/"+pkg.Name), tag, digest)
}

// parseGitea reads Gitea's and Forgejo's package event: action created of a
// container package is a push (its version a tag, or a digest when untagged) to
// the host of the package's (else the repository's) html_url; deleted and other
// package types are not.
func parseGitea(h http.Header, body []byte) ([]item, error) {
	id := firstHeader(h, "X-Gitea-Delivery", "X-Forgejo-Delivery", "X-Gogs-Delivery")
	if event := firstHeader(h, "X-Gitea-Event", "X-Forgejo-Event", "X-Gogs-Event"); event != "" && event != "package" {
		return ignoredEvent(id, event, body)
	}
	var p struct {
		Action  string `json:"action"`
		Package *struct {
			Type    string `json:"type"`
			Name    string `json:"name"`
			Version string `json:"version"`
			HTMLURL string `json:"html_url"`
			Owner   struct {
				Login string `json:"login"`
			} `json:"owner"`
		} `json:"package"`
		Repository *struct {
			HTMLURL string `json:"html_url"`
		} `json:"repository"`
	}
	if err := decodeObject(body, &p); err != nil {
		return nil, err
	}
	pkg := p.Package
	switch {
	case pkg == nil:
		return nil, errors.New("no package")
	case p.Action == "":
		return nil, errors.New("no action")
	case p.Action != "created":
		return []item{ignoredItem(id, "action %s", quote(p.Action))}, nil
	case pkg.Type != "container":
		return []item{ignoredItem(id, "a package of type %s", quote(pkg.Type))}, nil
	case pkg.Name == "" || pkg.Owner.Login == "":
		return nil, errors.New("no package.name or package.owner.login")
	}
	host := urlHost(pkg.HTMLURL)
	if host == "" && p.Repository != nil {
		host = urlHost(p.Repository.HTMLURL)
	}
	it, err := pushItem(id, host, strings.ToLower(pkg.Owner.Login+"/"+pkg.Name), pkg.Version, "")
	if err != nil {
		return nil, err
	}
	return []item{it}, nil
}

// ignoredEvent is a forge's event of another type than packages: ignored, once
// its body is seen to be JSON.
func ignoredEvent(id, event string, body []byte) ([]item, error) {
	if err := decodeObject(body, &struct{}{}); err != nil {
		return nil, err
	}
	return []item{ignoredItem(id, "event %s", quote(event))}, nil
}

// firstHeader is the value of the first of names that h has.
func firstHeader(h http.Header, names ...string) string {
	for _, n := range names {
		if v := h.Get(n); v != "" {
			return v
		}
	}
	return ""
}
