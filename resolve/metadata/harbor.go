package metadata

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// Harbor's artifacts API (api/v2.0/swagger.yaml, operation listArtifacts):
//
//	GET {base}/api/v2.0/projects/{project}/repositories/{repository}/artifacts?with_tag=true&...&page=N&page_size=100&sort=-push_time
//
// The repository (the path after the project) is URL-encoded twice (a/b ->
// a%252Fb), as the swagger asks. The answer is a JSON array of artifacts, with a
// Link header (rel="next") and X-Total-Count. Each artifact gives its digest,
// manifest_media_type, push_time, tags[] (name, push_time), annotations (the
// manifest's), for an image extra_attrs (the config's os, architecture and
// created), for an index references[] (child_digest, platform). One record per
// tag; untagged artifacts are left out.
//
// Build time: for an image, the manifest's org.opencontainers.image.created
// annotation, else extra_attrs.created (the config's), exactly as the OCI
// protocol reads it; for an index, its annotation, else zero in the listing
// (its children are not listed): BuildTime (resolve.BuildTimer) reads it for
// the few candidates that need it from the artifacts of its image manifests, a
// request each. Platforms: an index's references (attestations left
// out); for an image, extra_attrs' os and architecture. Harbor does not record
// an image config's variant: an image of architecture arm (whose variants v6
// and v7 differ) gets no Platforms (read through the OCI protocol), and one of
// amd64 or arm64 is taken to have the default variant.
//
// Authentication: Basic with the keychain's user name and password (a robot
// account), else anonymous.

// harborMaxPageSize is the largest page_size Harbor accepts.
const harborMaxPageSize = 100

// Harbor reads Harbor's artifacts API. It is safe for concurrent use.
type Harbor struct {
	c    apiClient
	base string
}

// NewHarbor returns a Harbor client; o.BaseURL "" is https://<o.Registry>.
func NewHarbor(o Options) (*Harbor, error) {
	def := ""
	if o.Registry != "" {
		def = "https://" + o.Registry
	}
	base, err := baseURL(resolve.MetadataHarbor, o.BaseURL, def)
	if err != nil {
		return nil, err
	}
	return &Harbor{c: newAPIClient(resolve.MetadataHarbor, o, harborMaxPageSize), base: base}, nil
}

// Name is resolve.MetadataHarbor.
func (h *Harbor) Name() string { return resolve.MetadataHarbor }

// target is the URL of repo's artifacts and the header that authenticates
// requests to it.
func (h *Harbor) target(ctx context.Context, repo name.Repository) (string, http.Header, error) {
	project, rp, ok := strings.Cut(repo.RepositoryStr(), "/")
	if !ok {
		return "", nil, fmt.Errorf("%s API: repository %s: Harbor repositories are project/name", h.Name(), repo)
	}
	cred, err := h.c.credential(ctx, repo)
	if err != nil {
		return "", nil, err
	}
	var hdr http.Header
	if cred != nil && cred.Username != "" {
		req := &http.Request{Header: http.Header{}}
		req.SetBasicAuth(cred.Username, cred.Password)
		hdr = req.Header
	}
	path := fmt.Sprintf("%s/api/v2.0/projects/%s/repositories/%s/artifacts", h.base, url.PathEscape(project),
		url.PathEscape(url.PathEscape(rp)))
	return path, hdr, nil
}

// ListTagRecords lists every tag of repo (project/repository...).
func (h *Harbor) ListTagRecords(ctx context.Context, repo name.Repository) ([]resolve.TagRecord, error) {
	path, hdr, err := h.target(ctx, repo)
	if err != nil {
		return nil, err
	}
	p, err := h.c.newPager(repo.String(), h.pageURL(path, 1))
	if err != nil {
		return nil, err
	}
	var out []resolve.TagRecord
	for n, cur, next := 1, "", h.pageURL(path, 1); next != ""; n++ {
		u, err := p.page(cur, next)
		if err != nil {
			return nil, err
		}
		var arts []harborArtifact
		header, err := p.get(ctx, u, hdr, &arts)
		if err != nil {
			return nil, err
		}
		for _, a := range arts {
			recs, err := h.records(p, u, a)
			if err != nil {
				return nil, err
			}
			out = append(out, recs...)
		}
		cur, next = u, h.next(header, path, n, len(arts))
	}
	return out, nil
}

// pageURL is the URL of the n-th page.
func (h *Harbor) pageURL(path string, n int) string {
	return fmt.Sprintf("%s?with_tag=true&with_label=false&with_scan_overview=false&with_signature=false"+
		"&with_immutable_status=false&with_accessory=false&page=%d&page_size=%d&sort=-push_time", path, n, h.c.pageSize)
}

// next is the URL of the page after the n-th (which listed count artifacts):
// the Link header's rel="next"; without one, from X-Total-Count; without that,
// the next page as long as pages are full. "" after the last.
func (h *Harbor) next(header http.Header, path string, n, count int) string {
	if l := nextLink(header); l != "" {
		return l
	}
	if header.Get("Link") != "" {
		return ""
	}
	if total, err := strconv.Atoi(header.Get("X-Total-Count")); err == nil {
		if n*h.c.pageSize < total && count > 0 {
			return h.pageURL(path, n+1)
		}
		return ""
	}
	if count >= h.c.pageSize {
		return h.pageURL(path, n+1)
	}
	return ""
}

type harborArtifact struct {
	Digest            string            `json:"digest"`
	MediaType         string            `json:"media_type"`
	ManifestMediaType string            `json:"manifest_media_type"`
	PushTime          string            `json:"push_time"`
	Annotations       map[string]string `json:"annotations"`
	ExtraAttrs        struct {
		OS           string          `json:"os"`
		Architecture string          `json:"architecture"`
		Variant      string          `json:"variant"`
		Created      json.RawMessage `json:"created"`
	} `json:"extra_attrs"`
	References []struct {
		ChildDigest string       `json:"child_digest"`
		Platform    *v1.Platform `json:"platform"`
	} `json:"references"`
	Tags []struct {
		Name     string `json:"name"`
		PushTime string `json:"push_time"`
	} `json:"tags"`
}

// records are the records of one artifact of the page u, one per tag.
func (h *Harbor) records(p *pager, u string, a harborArtifact) ([]resolve.TagRecord, error) {
	if len(a.Tags) == 0 {
		return nil, nil
	}
	base, err := h.artifact(u, a)
	if err != nil {
		return nil, err
	}
	out := make([]resolve.TagRecord, 0, len(a.Tags))
	for _, t := range a.Tags {
		if err := h.c.checkTag(u, t.Name); err != nil {
			return nil, err
		}
		if err := p.tag(u, t.Name); err != nil {
			return nil, err
		}
		rec := base
		rec.Tag = t.Name
		if pushed, err := h.time(u, t.PushTime); err != nil {
			return nil, err
		} else if !pushed.IsZero() {
			rec.Pushed = pushed
		}
		out = append(out, rec)
	}
	return out, nil
}

// artifact is what an artifact says, its tags apart.
func (h *Harbor) artifact(u string, a harborArtifact) (resolve.TagRecord, error) {
	var rec resolve.TagRecord
	var err error
	if rec.Digest, err = h.c.digestOf(u, a.Digest); err != nil {
		return rec, err
	}
	if rec.Pushed, err = h.time(u, a.PushTime); err != nil {
		return rec, err
	}
	rec.MediaType = types.MediaType(a.ManifestMediaType)
	if rec.MediaType == "" {
		rec.MediaType = types.MediaType(a.MediaType)
	}
	rec.Created = createdAnnotation(a.Annotations)
	if rec.MediaType.IsIndex() {
		entries := make([]platformEntry, 0, len(a.References))
		for _, r := range a.References {
			if r.Platform != nil {
				entries = append(entries, platformEntry{Platform: *r.Platform, Digest: r.ChildDigest})
			}
		}
		rec.Platforms, rec.PlatformManifests, err = h.c.runnable(u, entries)
		return rec, err
	}
	x := a.ExtraAttrs
	if x.Architecture != "arm" || x.Variant != "" {
		e := platformEntry{Platform: v1.Platform{OS: x.OS, Architecture: x.Architecture, Variant: x.Variant}, Digest: a.Digest}
		if rec.Platforms, rec.PlatformManifests, err = h.c.runnable(u, []platformEntry{e}); err != nil {
			return rec, err
		}
	}
	if rec.Created.IsZero() && rec.MediaType.IsImage() {
		rec.Created, err = h.created(u, x.Created)
	}
	return rec, err
}

// BuildTime is the build time of an index rec (of ListTagRecords) without a
// created annotation, as resolve's inspect computes it for prefer, from
// Harbor's artifacts of its image manifests (GET {artifacts}/{digest}): the
// image's created annotation, else its config's created. The candidates are the
// runnable manifests that satisfy one of prefer (else all runnable ones): each
// is read, and ok is true only when they all give the same non-zero time, so
// that the answer does not depend on which of them inspect would pick. An
// image's build time came with the listing: ok is false for an image without
// one. ok is false too when the API cannot answer (the resolver then uses the
// OCI protocol); err is only the context's.
func (h *Harbor) BuildTime(ctx context.Context, repo name.Repository, rec resolve.TagRecord, prefer []resolve.Platform) (time.Time, bool, error) {
	if !rec.Created.IsZero() {
		return rec.Created, true, nil
	}
	if !rec.MediaType.IsIndex() || len(rec.PlatformManifests) == 0 || len(rec.PlatformManifests) != len(rec.Platforms) {
		return time.Time{}, false, nil
	}
	path, hdr, err := h.target(ctx, repo)
	if err != nil {
		return time.Time{}, false, nil
	}
	var created time.Time
	for _, d := range candidates(rec, prefer) {
		c, err := h.imageCreated(ctx, path, hdr, d)
		if err != nil || c.IsZero() || (!created.IsZero() && !c.Equal(created)) {
			if ctx.Err() != nil {
				return time.Time{}, false, ctx.Err()
			}
			if err != nil {
				h.c.log.Debug("metadata API: build time not read", "api", h.Name(), "repository", repo.String(), "error", err)
			}
			return time.Time{}, false, nil
		}
		created = c
	}
	return created, true, nil
}

// candidates are the manifests of rec inspect may pick for prefer: those whose
// platform satisfies one of prefer, else all.
func candidates(rec resolve.TagRecord, prefer []resolve.Platform) []v1.Hash {
	var out []v1.Hash
	for i, p := range rec.Platforms {
		if slices.ContainsFunc(prefer, p.Satisfies) {
			out = append(out, rec.PlatformManifests[i])
		}
	}
	if len(out) == 0 {
		return rec.PlatformManifests
	}
	return out
}

// imageCreated reads the image artifact d: its created annotation, else its
// config's created.
func (h *Harbor) imageCreated(ctx context.Context, path string, hdr http.Header, d v1.Hash) (time.Time, error) {
	u := path + "/" + d.String() + "?with_tag=false&with_label=false&with_scan_overview=false&with_signature=false" +
		"&with_immutable_status=false&with_accessory=false"
	var a harborArtifact
	if _, err := h.c.getJSON(ctx, u, hdr, &a); err != nil {
		return time.Time{}, err
	}
	if a.Digest != d.String() {
		return time.Time{}, h.c.malformed(u, "artifact %q answered for %s", resolve.Truncate(a.Digest, 80), d)
	}
	if mt := types.MediaType(a.ManifestMediaType); !mt.IsImage() {
		return time.Time{}, h.c.malformed(u, "artifact %s is a %q, not an image", d, resolve.Truncate(string(mt), 80))
	}
	if c := createdAnnotation(a.Annotations); !c.IsZero() {
		return c, nil
	}
	return h.created(u, a.ExtraAttrs.Created)
}

// created parses extra_attrs.created: a time, or null when the config has none.
func (h *Harbor) created(u string, raw json.RawMessage) (time.Time, error) {
	var s *string
	if len(raw) == 0 {
		return time.Time{}, nil
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return time.Time{}, h.c.malformed(u, "extra_attrs.created: %v", err)
	}
	return h.time(u, deref(s))
}

// time parses a Harbor time; Go's zero time (never pulled) is zero.
func (h *Harbor) time(u, s string) (time.Time, error) {
	t, err := h.c.parseTime(u, s)
	if err != nil || t.Year() <= 1 {
		return time.Time{}, err
	}
	return t, nil
}

// createdAnnotation is a manifest's org.opencontainers.image.created, parsed as
// resolve's inspect does (RFC 3339; a value that does not parse is none).
func createdAnnotation(annotations map[string]string) time.Time {
	if v, ok := annotations["org.opencontainers.image.created"]; ok {
		if t, err := time.Parse(time.RFC3339, v); err == nil {
			return t.UTC()
		}
	}
	return time.Time{}
}
