package registrytest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Artifact Registry's dockerImages API (REST reference
// projects.locations.repositories.dockerImages, method list) as the resolver
// reads it:
//
//	GET /v1/projects/{project}/locations/{location}/repositories/{repository}/dockerImages?pageSize=N&pageToken=T
//
// counted as APIPage, its Repo "{project}/{repository}" (faults match that).
// The Artifact Registry repository holds Registry's repositories under
// {project}/{repository}/ (the images {project}/{repository}/{image}); none is
// 404 NOT_FOUND. The answer is {"dockerImages": [...], "nextPageToken"}: one
// DockerImage per manifest of every image of the repository, tagged or not (an
// index's children are listed apart, untagged), sorted by name, pageSize at
// most 1000 (default 100), nextPageToken opaque and absent on the last page. A
// DockerImage has name (the image URL-escaped, @digest), uri
// ({location}-docker.pkg.dev/{project}/{repository}/{image}@digest), tags,
// imageSizeBytes (a string), uploadTime and updateTime (the first and the last
// push of its tags, RFC 3339 with 9 fractional digits), mediaType, buildTime
// (an image's config created; absent for an index) and, for an index,
// imageManifests (per child its architecture, os, variant, digest, mediaType).
// Empty fields are left out, as Google's JSON mapping of protobuf does. Errors
// are {"error": {"code", "message", "status"}}.
//
// WithAPIAuth(user, token) requires Authorization: Bearer <token> (the user is
// not checked: Google's keychain gives oauth2accesstoken); a missing or other
// token is 401 UNAUTHENTICATED. APIFault.NextLoop makes nextPageToken the
// page's own token; NextURL does not apply (pages are named by tokens).

// GARAPI starts Artifact Registry's API answering from s, closed when the test
// ends.
func (s *Server) GARAPI(t testing.TB, opts ...APIOption) *APIServer {
	t.Helper()
	opts = append([]APIOption{WithAPIMaxPageSize(1000)}, opts...)
	return newAPIServer(t, s, apiVendor{name: "gar", defaultLimit: 100, route: garRoute, serve: serveGAR,
		errorBody: garError}, opts)
}

// garError is Google's error JSON.
func garError(status int, msg string) any {
	codes := map[int]string{400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
		404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}
	code, ok := codes[status]
	if !ok {
		code = "UNKNOWN"
	}
	return map[string]any{"error": map[string]any{"code": status, "message": msg, "status": code}}
}

// garRoute classifies an Artifact Registry API request.
func garRoute(r *http.Request) (APIKind, string) {
	elems := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if r.Method != http.MethodGet || len(elems) != 8 || elems[0] != "v1" || elems[1] != "projects" ||
		elems[3] != "locations" || elems[5] != "repositories" || elems[7] != "dockerImages" ||
		elems[2] == "" || elems[4] == "" || elems[6] == "" {
		return APIOther, ""
	}
	return APIPage, elems[2] + "/" + elems[6]
}

func serveGAR(a *APIServer, w http.ResponseWriter, r *http.Request, repo string, f *APIFault) {
	if a.cfg.auth && r.Header.Get("Authorization") != "Bearer "+a.cfg.pass && !a.bearerOK(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="https://accounts.google.com/"`)
		a.Error(w, http.StatusUnauthorized, "Request had invalid authentication credentials. Expected OAuth 2 access token.")
		return
	}
	location := strings.Split(r.URL.Path, "/")[5]
	images, err := garImages(a.Registry, location, repo)
	if err != nil {
		a.Error(w, http.StatusInternalServerError, err.Error())
		return
	}
	if len(images) == 0 {
		a.Error(w, http.StatusNotFound, "Requested entity was not found.")
		return
	}
	token := r.URL.Query().Get("pageToken")
	start, ok := cloudOffset(token)
	if !ok {
		a.Error(w, http.StatusBadRequest, "Invalid page token.")
		return
	}
	size := a.pageSize(r, "pageSize")
	end := min(start+size, len(images))
	body := garListAnswer{DockerImages: images[min(start, end):end]}
	if end < len(images) {
		body.NextPageToken = cloudToken(end)
	}
	if f != nil && f.NextLoop {
		body.NextPageToken = cloudToken(start)
	}
	writeJSON(w, http.StatusOK, body)
}

type garListAnswer struct {
	DockerImages  []garDockerImage `json:"dockerImages,omitempty"`
	NextPageToken string           `json:"nextPageToken,omitempty"`
}

type garDockerImage struct {
	Name           string             `json:"name"`
	URI            string             `json:"uri"`
	Tags           []string           `json:"tags,omitempty"`
	ImageSizeBytes string             `json:"imageSizeBytes"`
	UploadTime     string             `json:"uploadTime"`
	MediaType      string             `json:"mediaType"`
	BuildTime      string             `json:"buildTime,omitempty"`
	UpdateTime     string             `json:"updateTime"`
	ImageManifests []garImageManifest `json:"imageManifests,omitempty"`
}

type garImageManifest struct {
	Architecture string `json:"architecture,omitempty"`
	OS           string `json:"os,omitempty"`
	Variant      string `json:"variant,omitempty"`
	Digest       string `json:"digest"`
	MediaType    string `json:"mediaType"`
}

// garTime is Google's timestamp format: RFC 3339, UTC, 9 fractional digits.
func garTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000000Z") }

// garImages lists the DockerImages of the Artifact Registry repository
// project/repository (repo), sorted by name.
func garImages(s *Server, location, repo string) ([]garDockerImage, error) {
	repos, err := s.catalog(repo + "/")
	if err != nil {
		return nil, err
	}
	project, repository, _ := strings.Cut(repo, "/")
	var out []garDockerImage
	for _, path := range repos {
		tags, err := s.Describe(path)
		if err != nil {
			return nil, err
		}
		image := strings.TrimPrefix(path, repo+"/")
		for _, ci := range cloudImages(tags) {
			d := garDockerImage{
				Name: fmt.Sprintf("projects/%s/locations/%s/repositories/%s/dockerImages/%s@%s",
					project, location, repository, url.PathEscape(image), ci.Digest),
				URI:  fmt.Sprintf("%s-docker.pkg.dev/%s@%s", location, path, ci.Digest),
				Tags: ci.Tags, ImageSizeBytes: strconv.FormatInt(ci.Size, 10), MediaType: ci.MediaType,
				UploadTime: garTime(ci.FirstPushed), UpdateTime: garTime(ci.LastPushed),
			}
			if ci.Index {
				for _, m := range ci.Manifests {
					im := garImageManifest{Digest: m.Digest, MediaType: m.MediaType}
					if m.Platform != nil {
						im.OS, im.Architecture, im.Variant = m.Platform.OS, m.Platform.Architecture, m.Platform.Variant
					}
					d.ImageManifests = append(d.ImageManifests, im)
				}
			} else if !ci.Self.Created.IsZero() {
				d.BuildTime = garTime(ci.Self.Created)
			}
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(x, y garDockerImage) int { return strings.Compare(x.Name, y.Name) })
	return out, nil
}

// ---- shared by the cloud registries' APIs (GAR, ACR, ECR) ----

// cloudImage is one manifest of a repository as the cloud registries list
// their images: a digest with its tags (none for an index's child not tagged
// itself) and the first and last push of those tags (an untagged child's: its
// indexes').
type cloudImage struct {
	Digest, MediaType       string
	Size                    int64
	Tags                    []string
	FirstPushed, LastPushed time.Time
	// Index: the manifest is an index, whose children are Manifests.
	Index     bool
	Manifests []ManifestDescription
	// Self describes an image manifest (its platform, config created).
	Self ManifestDescription
}

// cloudImages groups Describe's tags by digest, adding the children of indexes
// that are not tagged themselves, sorted by digest.
func cloudImages(tags []TagDescription) []cloudImage {
	byDigest := map[string]*cloudImage{}
	note := func(digest string, pushed time.Time) *cloudImage {
		ci := byDigest[digest]
		if ci == nil {
			ci = &cloudImage{Digest: digest, FirstPushed: pushed, LastPushed: pushed}
			byDigest[digest] = ci
		}
		if pushed.Before(ci.FirstPushed) {
			ci.FirstPushed = pushed
		}
		if pushed.After(ci.LastPushed) {
			ci.LastPushed = pushed
		}
		return ci
	}
	for _, td := range tags {
		ci := note(td.Digest, td.Pushed)
		ci.Tags = append(ci.Tags, td.Tag)
		ci.MediaType, ci.Size = td.MediaType, td.Size
		ci.Index = types.MediaType(td.MediaType).IsIndex()
		if ci.Index {
			ci.Manifests = td.Manifests
			for _, m := range td.Manifests {
				child := note(m.Digest, td.Pushed)
				child.MediaType, child.Size, child.Self = m.MediaType, m.Size, m
			}
		} else if len(td.Manifests) > 0 {
			ci.Self = td.Manifests[0]
		}
	}
	out := make([]cloudImage, 0, len(byDigest))
	for _, ci := range byDigest {
		out = append(out, *ci)
	}
	slices.SortFunc(out, func(x, y cloudImage) int { return strings.Compare(x.Digest, y.Digest) })
	return out
}

// catalog lists Registry's repositories whose name starts with prefix, sorted.
func (s *Server) catalog(prefix string) ([]string, error) {
	rec, err := s.innerDo(http.MethodGet, "/v2/_catalog?n=100000", nil, nil)
	if err != nil {
		return nil, err
	}
	if rec.Code != http.StatusOK {
		return nil, fmt.Errorf("registrytest: catalog: status %d", rec.Code)
	}
	var c struct {
		Repositories []string `json:"repositories"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &c); err != nil {
		return nil, fmt.Errorf("registrytest: catalog: %w", err)
	}
	var out []string
	for _, r := range c.Repositories {
		if strings.HasPrefix(r, prefix) {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out, nil
}

// cloudToken is the opaque page token of an offset.
func cloudToken(offset int) string {
	return base64.RawURLEncoding.EncodeToString([]byte("offset=" + strconv.Itoa(offset)))
}

// cloudOffset reads a page token ("" is the first page).
func cloudOffset(token string) (int, bool) {
	if token == "" {
		return 0, true
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return 0, false
	}
	s, ok := strings.CutPrefix(string(raw), "offset=")
	n, err := strconv.Atoi(s)
	return n, ok && err == nil && n >= 0
}
