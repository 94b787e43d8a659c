package metadata

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// Artifact Registry's dockerImages API (REST reference
// projects.locations.repositories.dockerImages, method list):
//
//	GET {base}/v1/projects/{project}/locations/{location}/repositories/{repository}/dockerImages?pageSize=1000&pageToken=...
//
// answers {"dockerImages": [DockerImage], "nextPageToken"}; pageSize is at most
// 1000 and the list has no filter parameter (orderBy only, whose values are not
// documented): it covers every image of the Artifact Registry repository, and the
// client keeps those whose uri is the image asked for. The registry host is
// {location}-docker.pkg.dev and the image path {project}/{repository}/{image}.
// A DockerImage is one manifest (one digest): name, uri (...@sha256:...),
// tags[], imageSizeBytes, uploadTime, mediaType, buildTime, updateTime and, for
// a multi-platform image, imageManifests[] (per child its architecture, os,
// variant, digest and mediaType). One record per tag; untagged images (an
// index's children among them) are left out.
//
// Pushed is uploadTime: when the manifest was uploaded, which is never before
// its build. Platforms: an index's imageManifests (attestations and nested
// indexes left out); nil for a single image, whose platform GAR does not list.
// Created stays zero: buildTime is the config's created of the image described,
// while resolve's inspect takes the manifest's org.opencontainers.image.created
// annotation first (which GAR does not show) and, for an index, its own
// annotation or the config of the child that satisfies the required platform;
// GAR cannot say either, so the build time is read through the OCI protocol.
//
// Authentication: Authorization: Bearer with an OAuth2 access token, the
// keychain's credential for the registry host (Google's keychain gives user
// oauth2accesstoken and the token as password; a registry token is used as
// is). Anonymous without a credential.

// DefaultGARURL is Artifact Registry's API.
const DefaultGARURL = "https://artifactregistry.googleapis.com"

// garMaxPageSize is the largest pageSize dockerImages.list accepts.
const garMaxPageSize = 1000

// garTokenUsers are the user names under which Google's credential helpers
// give an OAuth2 access token as the password.
var garTokenUsers = []string{"oauth2accesstoken", "_dcgcloud_token"}

// GAR reads Artifact Registry's dockerImages API. It is safe for concurrent
// use.
type GAR struct {
	c        apiClient
	base     string
	registry string
}

// NewGAR returns an Artifact Registry client (o.BaseURL "" for DefaultGARURL;
// o.Registry, {location}-docker.pkg.dev, names the location when the
// repositories asked for are written with another host).
func NewGAR(o Options) (*GAR, error) {
	base, err := baseURL(resolve.MetadataGAR, o.BaseURL, DefaultGARURL)
	if err != nil {
		return nil, err
	}
	return &GAR{c: newAPIClient(resolve.MetadataGAR, o, garMaxPageSize), base: base, registry: o.Registry}, nil
}

// Name is resolve.MetadataGAR.
func (g *GAR) Name() string { return resolve.MetadataGAR }

// garImage names one image: its Artifact Registry repository and path.
type garImage struct {
	location, project, repository string
	path                          string // {project}/{repository}/{image}
}

// parent is the dockerImages collection's parent resource.
func (i garImage) parent() string {
	return fmt.Sprintf("projects/%s/locations/%s/repositories/%s",
		url.PathEscape(i.project), url.PathEscape(i.location), url.PathEscape(i.repository))
}

// garLocation is the location of an Artifact Registry host
// {location}-docker.pkg.dev.
func garLocation(host string) (string, bool) {
	loc, ok := strings.CutSuffix(host, "-docker.pkg.dev")
	return loc, ok && loc != "" && !strings.ContainsAny(loc, "./:")
}

// garImageOf reads repo as {location}-docker.pkg.dev/{project}/{repository}/{image}.
func (g *GAR) garImageOf(repo name.Repository) (garImage, error) {
	loc, ok := garLocation(repo.RegistryStr())
	if !ok {
		loc, ok = garLocation(g.registry)
	}
	if !ok {
		return garImage{}, fmt.Errorf("%s API: repository %s: not on an Artifact Registry host ({location}-docker.pkg.dev)", g.Name(), repo)
	}
	parts := strings.SplitN(repo.RepositoryStr(), "/", 3)
	if len(parts) != 3 {
		return garImage{}, fmt.Errorf("%s API: repository %s: Artifact Registry images are {project}/{repository}/{image}", g.Name(), repo)
	}
	return garImage{location: loc, project: parts[0], repository: parts[1], path: repo.RepositoryStr()}, nil
}

// ListTagRecords lists every tag of repo, reading the whole Artifact Registry
// repository it is in.
func (g *GAR) ListTagRecords(ctx context.Context, repo name.Repository) ([]resolve.TagRecord, error) {
	img, err := g.garImageOf(repo)
	if err != nil {
		return nil, err
	}
	hdr, err := g.auth(ctx, repo)
	if err != nil {
		return nil, err
	}
	first := fmt.Sprintf("%s/v1/%s/dockerImages?pageSize=%d", g.base, img.parent(), g.c.pageSize)
	p, err := g.c.newPager(repo.String(), first)
	if err != nil {
		return nil, err
	}
	var out []resolve.TagRecord
	found := false
	for cur, next := "", first; next != ""; {
		u, err := p.page(cur, next)
		if err != nil {
			return nil, err
		}
		var page garPage
		if _, err := p.get(ctx, u, hdr, &page); err != nil {
			return nil, err
		}
		for _, d := range page.DockerImages {
			recs, mine, err := g.records(p, u, img, d)
			if err != nil {
				return nil, err
			}
			found = found || mine
			out = append(out, recs...)
		}
		cur, next = u, ""
		if page.NextPageToken != "" {
			next = first + "&pageToken=" + url.QueryEscape(page.NextPageToken)
		}
	}
	if !found {
		return nil, &APIError{API: g.Name(), Method: http.MethodGet, URL: RedactURL(first), Status: http.StatusOK,
			Err: fmt.Errorf("no image %s in the repository", img.path)}
	}
	return out, nil
}

// auth is the Authorization header of the keychain's credential for repo: an
// OAuth2 access token. nil: anonymous.
func (g *GAR) auth(ctx context.Context, repo name.Repository) (http.Header, error) {
	cred, err := g.c.credential(ctx, repo)
	if err != nil || cred == nil {
		return nil, err
	}
	tok := cred.RegistryToken
	for _, u := range garTokenUsers {
		if tok == "" && cred.Username == u {
			tok = cred.Password
		}
	}
	if tok == "" {
		return nil, fmt.Errorf("%s API: the credential for %s is not an OAuth2 access token (user %q; want %s, as the google credentials source gives)",
			g.Name(), repo, resolve.Truncate(cred.Username, 64), garTokenUsers[0])
	}
	return http.Header{"Authorization": {"Bearer " + tok}}, nil
}

type garPage struct {
	DockerImages  []garDockerImage `json:"dockerImages"`
	NextPageToken string           `json:"nextPageToken"`
}

type garDockerImage struct {
	Name           string             `json:"name"`
	URI            string             `json:"uri"`
	Tags           []string           `json:"tags"`
	MediaType      string             `json:"mediaType"`
	UploadTime     string             `json:"uploadTime"`
	ImageManifests []garImageManifest `json:"imageManifests"`
}

type garImageManifest struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Variant      string `json:"variant"`
	Digest       string `json:"digest"`
	MediaType    string `json:"mediaType"`
}

// records are the records of one DockerImage of the page u, one per tag, and
// whether it is an image of img at all.
func (g *GAR) records(p *pager, u string, img garImage, d garDockerImage) ([]resolve.TagRecord, bool, error) {
	path, digest, err := g.uri(u, d.URI)
	if err != nil || path != img.path {
		return nil, false, err
	}
	if len(d.Tags) == 0 {
		return nil, true, nil
	}
	base := resolve.TagRecord{MediaType: types.MediaType(d.MediaType)}
	if base.Digest, err = g.c.digestOf(u, digest); err != nil {
		return nil, true, err
	}
	if base.Pushed, err = g.c.parseTime(u, d.UploadTime); err != nil {
		return nil, true, err
	}
	if base.MediaType.IsIndex() {
		entries := make([]platformEntry, 0, len(d.ImageManifests))
		for _, m := range d.ImageManifests {
			if m.MediaType != "" && !types.MediaType(m.MediaType).IsImage() {
				continue // a nested index, as inspect leaves it out
			}
			entries = append(entries, platformEntry{Digest: m.Digest,
				Platform: v1.Platform{OS: m.OS, Architecture: m.Architecture, Variant: m.Variant}})
		}
		if base.Platforms, base.PlatformManifests, err = g.c.runnable(u, entries); err != nil {
			return nil, true, err
		}
	}
	out := make([]resolve.TagRecord, 0, len(d.Tags))
	for _, tag := range d.Tags {
		if err := g.c.checkTag(u, tag); err != nil {
			return nil, true, err
		}
		if err := p.tag(u, tag); err != nil {
			return nil, true, err
		}
		rec := base
		rec.Tag = tag
		rec.Platforms = cloneSlice(base.Platforms)
		rec.PlatformManifests = cloneSlice(base.PlatformManifests)
		out = append(out, rec)
	}
	return out, true, nil
}

// uri splits a DockerImage's uri, {host}/{path}@{digest}, into path and digest.
func (g *GAR) uri(u, uri string) (path, digest string, err error) {
	ref, digest, ok := strings.Cut(uri, "@")
	_, path, okHost := strings.Cut(ref, "/")
	if !ok || !okHost || path == "" || digest == "" {
		return "", "", g.c.malformed(u, "uri %q is not {host}/{image}@{digest}", resolve.Truncate(uri, 200))
	}
	return path, digest, nil
}

// cloneSlice copies s (nil stays nil), so that records do not share slices.
func cloneSlice[T any](s []T) []T {
	if s == nil {
		return nil
	}
	return append(make([]T, 0, len(s)), s...)
}
