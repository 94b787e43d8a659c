package webhook

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// The grammars of the OCI distribution spec for the parts of a reference, and a
// registry host as it appears in one (name[:port], or a bracketed IPv6 address).
var (
	pathComponent = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$`)
	tagGrammar    = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`)
	digestGrammar = regexp.MustCompile(`^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$`)
	hexGrammar    = regexp.MustCompile(`^[a-f0-9]+$`)
	hostGrammar   = regexp.MustCompile(`^(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*|\[[0-9a-f:.]+\])(?::[0-9]{1,5})?$`)
)

// maxRepository is the longest repository path accepted, the limit distribution
// enforces on a name.
const maxRepository = 255

// dockerHub is the canonical name of Docker Hub's registry; dockerHubAliases are
// the other names a payload may give it.
const dockerHub = "docker.io"

var dockerHubAliases = map[string]bool{
	"docker.io":               true,
	"index.docker.io":         true,
	"registry-1.docker.io":    true,
	"registry.hub.docker.com": true,
}

// newEvent validates and normalises the parts of a pushed reference into an
// Event (without its Kind): the registry host lower case, Docker Hub as
// "docker.io" with official images under "library/", and a tag that is really a
// digest (Harbor names an untagged push by its digest) moved to Digest.
func newEvent(registry, repository, tag, digest string) (Event, error) {
	reg, err := normalizeRegistry(registry)
	if err != nil {
		return Event{}, err
	}
	repo, err := normalizeRepository(reg, repository)
	if err != nil {
		return Event{}, err
	}
	if strings.Contains(tag, ":") { // no tag has a colon: this one is a digest
		if digest != "" && digest != tag {
			return Event{}, fmt.Errorf("tag %s is a digest other than the digest %s", quote(tag), quote(digest))
		}
		tag, digest = "", tag
	}
	if tag != "" && !tagGrammar.MatchString(tag) {
		return Event{}, fmt.Errorf("tag %s breaks the OCI tag grammar", quote(tag))
	}
	if digest != "" {
		if err := checkDigest(digest); err != nil {
			return Event{}, err
		}
	}
	return Event{Registry: reg, Repository: repo, Tag: tag, Digest: digest}, nil
}

// normalizeRegistry lower-cases host and checks it is a host[:port]; "" stays "".
func normalizeRegistry(host string) (string, error) {
	if host == "" {
		return "", nil
	}
	h := strings.ToLower(host)
	if dockerHubAliases[h] {
		return dockerHub, nil
	}
	if len(h) > 261 || !hostGrammar.MatchString(h) {
		return "", fmt.Errorf("registry host %s is not a host[:port]", quote(host))
	}
	return h, nil
}

// normalizeRepository checks repo against the OCI name grammar and puts a Docker
// Hub official image (a single component) under "library/".
func normalizeRepository(registry, repo string) (string, error) {
	if repo == "" {
		return "", errors.New("no repository")
	}
	if registry == dockerHub && !strings.Contains(repo, "/") {
		repo = "library/" + repo
	}
	if len(repo) > maxRepository {
		return "", fmt.Errorf("repository %s is longer than %d characters", quote(repo), maxRepository)
	}
	for _, c := range strings.Split(repo, "/") {
		if !pathComponent.MatchString(c) {
			return "", fmt.Errorf("repository %s breaks the OCI name grammar", quote(repo))
		}
	}
	return repo, nil
}

// checkDigest checks d against the OCI digest grammar, with the registered
// algorithms' encodings: 64 hex digits for sha256, 128 for sha512.
func checkDigest(d string) error {
	if !digestGrammar.MatchString(d) {
		return fmt.Errorf("digest %s breaks the OCI digest grammar", quote(d))
	}
	alg, enc, _ := strings.Cut(d, ":")
	want := map[string]int{"sha256": 64, "sha512": 128}[alg]
	if want != 0 && (len(enc) != want || !hexGrammar.MatchString(enc)) {
		return fmt.Errorf("digest %s is not %d lower-case hex digits of %s", quote(d), want, alg)
	}
	return nil
}

// looksLikeDigest reports whether s names a digest rather than a tag.
func looksLikeDigest(s string) bool { return strings.Contains(s, ":") }

// splitReference splits "host/repo[:tag][@digest]" (an optional http(s)://
// before it) into its parts, unvalidated.
func splitReference(ref string) (host, repo, tag, digest string, err error) {
	rest := strings.TrimPrefix(strings.TrimPrefix(ref, "https://"), "http://")
	host, rest, ok := strings.Cut(rest, "/")
	if !ok || host == "" || rest == "" {
		return "", "", "", "", fmt.Errorf("reference %s does not name a registry host and a repository", quote(ref))
	}
	if i := strings.IndexByte(rest, '@'); i >= 0 {
		rest, digest = rest[:i], rest[i+1:]
	}
	if i := strings.LastIndexByte(rest, ':'); i > strings.LastIndexByte(rest, '/') {
		rest, tag = rest[:i], rest[i+1:]
	}
	return host, rest, tag, digest, nil
}

// urlHost is the host[:port] of an absolute http(s) URL, or "" when s is not one.
func urlHost(s string) string {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return ""
	}
	return u.Host
}

// quote quotes s for an error message, cut to 128 bytes: payload values are
// named, never copied whole.
func quote(s string) string {
	const limit = 128
	if len(s) > limit {
		return strconv.Quote(s[:limit]) + "..."
	}
	return strconv.Quote(s)
}
