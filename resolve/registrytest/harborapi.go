package registrytest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Harbor's artifacts API (api/v2.0/swagger.yaml, operation listArtifacts) as
// the resolver reads it:
//
//	GET /api/v2.0/projects/{project}/repositories/{repository}/artifacts?page=N&page_size=M&sort=-push_time&with_tag=true
//
// counted as APIPage, and GET .../artifacts/{digest} (getArtifact, any
// manifest's artifact, an index's children included), counted as APIArtifact. The repository is URL-encoded twice when it holds a slash
// (a/b -> a%252Fb); encoded once, the route does not match (404). The answer is
// a JSON array of artifacts, one per digest a tag points at (an index's children
// are not listed apart), with the headers X-Total-Count and Link (rel="prev",
// rel="next", relative URLs). page_size is at most 100 (default 10); sort is
// -push_time (the default), push_time, name or -name. An image artifact's
// extra_attrs carry the config's os, architecture, created, author and config
// (no variant, as Harbor's image processor); an index's references carry each
// child's digest and platform. annotations are the manifest's.
//
// The project/repository is Registry's repository of that path. WithAPIAuth
// requires Basic credentials (a robot account); anonymous requests get 401.

// HarborAPI starts Harbor's API answering from s, closed when the test ends.
func (s *Server) HarborAPI(t testing.TB, opts ...APIOption) *APIServer {
	t.Helper()
	return newAPIServer(t, s, apiVendor{name: "harbor", defaultLimit: 10, route: harborRoute, serve: serveHarbor,
		errorBody: func(status int, msg string) any {
			code := strings.ToUpper(strings.ReplaceAll(http.StatusText(status), " ", "_"))
			return map[string]any{"errors": []map[string]string{{"code": code, "message": msg}}}
		}}, opts)
}

// harborRoute classifies a Harbor API request; the repository must be encoded
// twice (its escaped path segment holds %252F, never %2F).
func harborRoute(r *http.Request) (APIKind, string) {
	const prefix = "/api/v2.0/projects/"
	p := r.URL.EscapedPath()
	if r.Method != http.MethodGet || !strings.HasPrefix(p, prefix) {
		return APIOther, ""
	}
	elems := strings.Split(strings.TrimPrefix(p, prefix), "/")
	kind := APIPage
	if len(elems) == 5 && elems[4] != "" {
		kind, elems = APIArtifact, elems[:4]
	}
	if len(elems) != 4 || elems[1] != "repositories" || elems[3] != "artifacts" {
		return APIOther, ""
	}
	project, err1 := url.PathUnescape(elems[0])
	once, err2 := url.PathUnescape(elems[2])
	if err1 != nil || err2 != nil || strings.Contains(once, "/") {
		return APIOther, ""
	}
	repo, err := url.PathUnescape(once)
	if err != nil || project == "" || repo == "" {
		return APIOther, ""
	}
	return kind, project + "/" + repo
}

func serveHarbor(a *APIServer, w http.ResponseWriter, r *http.Request, repo string, f *APIFault) {
	if a.cfg.auth && !a.basicOK(r) {
		w.Header().Set("WWW-Authenticate", `Basic realm="harbor"`)
		a.Error(w, http.StatusUnauthorized, "unauthorized")
		return
	}
	if ref := path.Base(r.URL.Path); ref != "artifacts" {
		serveHarborArtifact(a, w, repo, ref)
		return
	}
	tags, ok := a.describe(w, repo)
	if !ok {
		return
	}
	arts, err := harborArtifacts(a, repo, tags)
	if err != nil {
		a.Error(w, http.StatusInternalServerError, err.Error())
		return
	}
	if err := sortHarbor(arts, r.URL.Query().Get("sort")); err != nil {
		a.Error(w, http.StatusBadRequest, err.Error())
		return
	}
	size, page := a.pageSize(r, "page_size"), pageNumber(r, "page")
	items, more := pageOf(arts, page, size)
	var links []string
	if page > 1 {
		links = append(links, fmt.Sprintf(`<%s>; rel="prev"`, harborPageURL(r, page-1, size)))
	}
	next := ""
	if more {
		next = harborPageURL(r, page+1, size)
	}
	if f != nil && f.NextURL != "" {
		next = f.NextURL
	}
	if f != nil && f.NextLoop {
		next = harborPageURL(r, page, size)
	}
	if next != "" {
		links = append(links, fmt.Sprintf(`<%s>; rel="next"`, next))
	}
	if len(links) > 0 {
		w.Header().Set("Link", strings.Join(links, " , "))
	}
	w.Header().Set("X-Total-Count", strconv.Itoa(len(arts)))
	writeJSON(w, http.StatusOK, items)
}

// serveHarborArtifact answers GET .../artifacts/{digest} (getArtifact): the
// artifact of any manifest of repo, an index's children included (no tags).
func serveHarborArtifact(a *APIServer, w http.ResponseWriter, repo, digest string) {
	body, mt, err := a.Registry.manifest(repo, digest)
	if err != nil || !strings.HasPrefix(digest, "sha256:") {
		a.Error(w, http.StatusNotFound, fmt.Sprintf("artifact %s@%s not found", repo, digest))
		return
	}
	art, err := harborArtifactCached(a, repo, TagDescription{Digest: digest, MediaType: mt, Size: int64(len(body))}, 1)
	if err != nil {
		a.Error(w, http.StatusInternalServerError, err.Error())
		return
	}
	// Pushed with the newest tag that holds it.
	tags, _ := a.Registry.Describe(repo)
	var pushed time.Time
	for _, td := range tags {
		holds := td.Digest == digest
		for _, m := range td.Manifests {
			holds = holds || m.Digest == digest
		}
		if holds && td.Pushed.After(pushed) {
			pushed = td.Pushed
		}
	}
	art.PushTime = harborTime(pushed)
	writeJSON(w, http.StatusOK, art)
}

// harborPageURL is the relative URL of another page, as Harbor's Link writes it.
func harborPageURL(r *http.Request, page, size int) string {
	q := r.URL.Query()
	q.Set("page", strconv.Itoa(page))
	q.Set("page_size", strconv.Itoa(size))
	return r.URL.EscapedPath() + "?" + q.Encode()
}

// sortHarbor orders artifacts as Harbor's sort parameter says.
func sortHarbor(arts []harborArtifact, sort string) error {
	var cmp func(x, y harborArtifact) int
	switch sort {
	case "", "-push_time":
		cmp = func(x, y harborArtifact) int { return strings.Compare(y.PushTime, x.PushTime) }
	case "push_time":
		cmp = func(x, y harborArtifact) int { return strings.Compare(x.PushTime, y.PushTime) }
	case "name", "-name":
		cmp = func(x, y harborArtifact) int { return strings.Compare(x.Tags[0].Name, y.Tags[0].Name) }
		if sort == "-name" {
			cmp = func(x, y harborArtifact) int { return strings.Compare(y.Tags[0].Name, x.Tags[0].Name) }
		}
	default:
		return fmt.Errorf("bad sort %q", sort)
	}
	slices.SortStableFunc(arts, func(x, y harborArtifact) int {
		if c := cmp(x, y); c != 0 {
			return c
		}
		return x.ID - y.ID
	})
	return nil
}

type harborArtifact struct {
	ID                int                       `json:"id"`
	Type              string                    `json:"type"`
	MediaType         string                    `json:"media_type"`
	ManifestMediaType string                    `json:"manifest_media_type"`
	ArtifactType      string                    `json:"artifact_type"`
	ProjectID         int                       `json:"project_id"`
	RepositoryID      int                       `json:"repository_id"`
	RepositoryName    string                    `json:"repository_name"`
	Digest            string                    `json:"digest"`
	Size              int64                     `json:"size"`
	Icon              string                    `json:"icon"`
	PushTime          string                    `json:"push_time"`
	PullTime          string                    `json:"pull_time"`
	ExtraAttrs        map[string]any            `json:"extra_attrs"`
	Annotations       map[string]string         `json:"annotations"`
	References        []harborReference         `json:"references"`
	Tags              []harborTag               `json:"tags"`
	AdditionLinks     map[string]map[string]any `json:"addition_links"`
	Labels            []any                     `json:"labels"`
	Accessories       []any                     `json:"accessories"`
}

type harborTag struct {
	ID           int    `json:"id"`
	RepositoryID int    `json:"repository_id"`
	ArtifactID   int    `json:"artifact_id"`
	Name         string `json:"name"`
	PushTime     string `json:"push_time"`
	PullTime     string `json:"pull_time"`
	Immutable    bool   `json:"immutable"`
}

type harborReference struct {
	ParentID    int               `json:"parent_id"`
	ChildID     int               `json:"child_id"`
	ChildDigest string            `json:"child_digest"`
	Platform    *v1.Platform      `json:"platform"`
	Annotations map[string]string `json:"annotations"`
	URLs        []string          `json:"urls"`
}

// harborTime is Harbor's time format: RFC 3339, milliseconds, UTC.
func harborTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// harborArtifacts groups tags by digest into artifacts (tags in Describe's
// order); an artifact's push time is its newest tag's.
func harborArtifacts(a *APIServer, repo string, tags []TagDescription) ([]harborArtifact, error) {
	var arts []harborArtifact
	byDigest := map[string]int{}
	for _, td := range tags {
		i, ok := byDigest[td.Digest]
		if !ok {
			art, err := harborArtifactCached(a, repo, td, len(arts)+1)
			if err != nil {
				return nil, err
			}
			i, byDigest[td.Digest] = len(arts), len(arts)
			arts = append(arts, art)
		}
		art := &arts[i]
		art.Tags = append(art.Tags, harborTag{ID: 1000 + len(art.Tags) + i*100, RepositoryID: 1, ArtifactID: art.ID, Name: td.Tag,
			PushTime: harborTime(td.Pushed), PullTime: harborTime(time.Time{})})
		if p := harborTime(td.Pushed); p > art.PushTime {
			art.PushTime = p
		}
	}
	return arts, nil
}

// harborArtifactCached is harborArtifactOf, read once per repository and
// digest.
func harborArtifactCached(a *APIServer, repo string, td TagDescription, id int) (harborArtifact, error) {
	key := "harbor|" + repo + "|" + td.Digest
	if v, ok := a.byDigest.Load(key); ok {
		art := v.(harborArtifact)
		art.ID = id
		art.References = slices.Clone(art.References)
		for i := range art.References {
			art.References[i].ParentID, art.References[i].ChildID = id, 10000*id+i
		}
		return art, nil
	}
	art, err := harborArtifactOf(a.Registry, repo, td, id)
	if err == nil {
		// Stored without tags and push time, which harborArtifacts adds.
		a.byDigest.Store(key, art)
	}
	return art, err
}

func harborArtifactOf(s *Server, repo string, td TagDescription, id int) (harborArtifact, error) {
	project, name, _ := strings.Cut(repo, "/")
	a := harborArtifact{ID: id, Type: "IMAGE", MediaType: td.MediaType, ManifestMediaType: td.MediaType,
		ProjectID: 1, RepositoryID: 1, RepositoryName: repo, Digest: td.Digest, Size: td.Size,
		Icon: "sha256:0048162a053eef4d4ce3fe7518615bef084403614f8bca43b40ae2e762e11e06", PullTime: harborTime(time.Time{}),
		AdditionLinks: map[string]map[string]any{}}
	self := "/api/v2.0/projects/" + project + "/repositories/" + url.PathEscape(url.PathEscape(name)) + "/artifacts/" + td.Digest
	body, _, err := s.manifest(repo, td.Digest)
	if err != nil {
		return a, err
	}
	if types.MediaType(td.MediaType).IsIndex() {
		idx, err := v1.ParseIndexManifest(strings.NewReader(string(body)))
		if err != nil {
			return a, err
		}
		a.Annotations = idx.Annotations
		for i, m := range idx.Manifests {
			a.References = append(a.References, harborReference{ParentID: id, ChildID: 10000*id + i, ChildDigest: m.Digest.String(),
				Platform: m.Platform, Annotations: m.Annotations})
		}
		return a, nil
	}
	m, err := v1.ParseManifest(strings.NewReader(string(body)))
	if err != nil {
		return a, err
	}
	a.Annotations, a.MediaType = m.Annotations, string(m.Config.MediaType)
	a.AdditionLinks["build_history"] = map[string]any{"absolute": false, "href": self + "/additions/build_history"}
	cfg, err := s.configFile(repo, m.Config.Digest.String())
	if err != nil {
		return a, err
	}
	created := any(nil)
	if !cfg.Created.IsZero() {
		created = cfg.Created.Time.UTC().Format(time.RFC3339Nano)
	}
	a.ExtraAttrs = map[string]any{"architecture": cfg.Architecture, "os": cfg.OS, "created": created,
		"author": cfg.Author, "config": cfg.Config}
	return a, nil
}

// configFile reads an image config straight from the inner registry.
func (s *Server) configFile(repo, digest string) (*v1.ConfigFile, error) {
	rec, err := s.innerDo(http.MethodGet, "/v2/"+repo+"/blobs/"+digest, nil, nil)
	if err != nil {
		return nil, err
	}
	if rec.Code != http.StatusOK {
		return nil, fmt.Errorf("registrytest: config %s@%s: status %d", repo, digest, rec.Code)
	}
	var cfg v1.ConfigFile
	if err := json.Unmarshal(rec.Body.Bytes(), &cfg); err != nil {
		return nil, fmt.Errorf("registrytest: config %s@%s: %w", repo, digest, err)
	}
	return &cfg, nil
}
