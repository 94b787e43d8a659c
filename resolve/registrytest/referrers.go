package registrytest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// serveReferrers answers GET /v2/<repo>/referrers/<digest>: 404 without the
// referrers API (WithoutReferrers), else the inner registry's list with each
// entry's artifactType as the distribution spec defines it (the manifest's
// artifactType, else its config's media type; go-containerregistry's registry
// knows only the latter), sorted by digest, filtered by ?artifactType=.
func (s *Server) serveReferrers(w http.ResponseWriter, r *http.Request) {
	if s.cfg.noReferrers {
		writeError(w, r, http.StatusNotFound, "NOT_FOUND", "page not found", nil)
		return
	}
	rec, err := s.innerDo(http.MethodGet, r.URL.Path, nil, nil)
	if err != nil {
		writeError(w, r, http.StatusInternalServerError, "UNKNOWN", err.Error(), nil)
		return
	}
	if rec.Code != http.StatusOK {
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
		return
	}
	var idx v1.IndexManifest
	if err := json.Unmarshal(rec.Body.Bytes(), &idx); err != nil {
		writeError(w, r, http.StatusInternalServerError, "UNKNOWN", err.Error(), nil)
		return
	}
	repo := strings.TrimPrefix(r.URL.Path[:strings.LastIndex(r.URL.Path, "/referrers/")], "/v2/")
	filter := r.URL.Query().Get("artifactType")
	kept := idx.Manifests[:0]
	for _, d := range idx.Manifests {
		if at := s.artifactType(repo, d.Digest); at != "" {
			d.ArtifactType = at
		}
		if filter == "" || d.ArtifactType == filter {
			kept = append(kept, d)
		}
	}
	idx.Manifests = kept
	sort.Slice(idx.Manifests, func(i, j int) bool { return idx.Manifests[i].Digest.String() < idx.Manifests[j].Digest.String() })
	b, err := json.Marshal(idx)
	if err != nil {
		writeError(w, r, http.StatusInternalServerError, "UNKNOWN", err.Error(), nil)
		return
	}
	h := w.Header()
	h.Set("Content-Type", string(types.OCIImageIndex))
	h.Set("Docker-Distribution-API-Version", "registry/2.0")
	h.Set("Content-Length", fmt.Sprint(len(b)))
	if filter != "" {
		h.Set("OCI-Filters-Applied", "artifactType")
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// artifactType is the artifactType field of a stored manifest, "" when it has
// none or cannot be read.
func (s *Server) artifactType(repo string, d v1.Hash) string {
	rec, err := s.innerDo(http.MethodGet, "/v2/"+repo+"/manifests/"+d.String(), nil, nil)
	if err != nil || rec.Code != http.StatusOK {
		return ""
	}
	var m struct {
		ArtifactType string `json:"artifactType"`
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &m)
	return m.ArtifactType
}
