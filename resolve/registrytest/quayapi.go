package registrytest

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Quay's tags API (quay/quay endpoints/api/tag.py, operation listRepoTags) as
// the resolver reads it:
//
//	GET /api/v1/repository/{namespace}/{repository}/tag/?limit=M&page=N&onlyActiveTags=true
//
// counted as APIPage: {"tags": [tag], "page": N, "has_additional": bool}, the
// newest start_ts first; limit is at most 100 (default 50). Each tag has name,
// reversion, start_ts (Unix seconds of its push), manifest_digest,
// is_manifest_list, size and last_modified (start_ts as an RFC 1123 date). No
// platform, media type or build time. An APIFault's NextLoop serves the first
// page again for every page, has_additional still true.
//
// WithAPIAuth requires `Authorization: Bearer <secret>` (an OAuth application
// token); anonymous or wrong tokens get 401.

// QuayAPI starts Quay's API answering from s, closed when the test ends.
func (s *Server) QuayAPI(t testing.TB, opts ...APIOption) *APIServer {
	t.Helper()
	var a *APIServer
	a = newAPIServer(t, s, apiVendor{name: "quay", defaultLimit: 50, route: quayRoute, serve: serveQuay,
		errorBody: func(status int, msg string) any {
			kind := quayErrorTypes[status]
			if kind == "" {
				kind = strings.ToLower(strings.ReplaceAll(http.StatusText(status), " ", "_"))
			}
			return map[string]any{"detail": msg, "error_message": msg, "error_type": kind, "title": kind,
				"type": a.URL + "/api/v1/error/" + kind, "status": status}
		}}, opts)
	return a
}

// quayErrorTypes are Quay's error_type values by status (endpoints/exception.py).
var quayErrorTypes = map[int]string{400: "invalid_request", 401: "invalid_token", 403: "insufficient_scope", 404: "not_found"}

// quayRoute classifies a Quay API request.
func quayRoute(r *http.Request) (APIKind, string) {
	const prefix, suffix = "/api/v1/repository/", "/tag/"
	p := r.URL.Path
	if r.Method != http.MethodGet || !strings.HasPrefix(p, prefix) || !strings.HasSuffix(p, suffix) {
		return APIOther, ""
	}
	repo := strings.TrimSuffix(strings.TrimPrefix(p, prefix), suffix)
	if !strings.Contains(repo, "/") || strings.HasPrefix(repo, "/") || strings.HasSuffix(repo, "/") {
		return APIOther, ""
	}
	return APIPage, repo
}

func serveQuay(a *APIServer, w http.ResponseWriter, r *http.Request, repo string, f *APIFault) {
	if a.cfg.auth && r.Header.Get("Authorization") != "Bearer "+a.cfg.pass {
		a.Error(w, http.StatusUnauthorized, "Requires authentication")
		return
	}
	tags, ok := a.describe(w, repo)
	if !ok {
		return
	}
	sortByPushed(tags) // start_ts desc; ties by name
	size, page := a.pageSize(r, "limit"), pageNumber(r, "page")
	served := page
	if f != nil && f.NextLoop {
		served = 1
	}
	items, more := pageOf(tags, served, size)
	if f != nil && f.NextLoop {
		more = true
	}
	body := quayPage{Tags: make([]quayTag, 0, len(items)), Page: page, HasAdditional: more}
	for _, td := range items {
		body.Tags = append(body.Tags, quayTag{Name: td.Tag, StartTS: td.Pushed.Unix(), ManifestDigest: td.Digest,
			IsManifestList: types.MediaType(td.MediaType).IsIndex(), Size: td.Size,
			LastModified: td.Pushed.UTC().Format(quayDate)})
	}
	writeJSON(w, http.StatusOK, body)
}

// quayDate is Quay's format_date: RFC 1123 with a numeric zone written -0000.
const quayDate = "Mon, 02 Jan 2006 15:04:05 -0000"

type quayPage struct {
	Tags          []quayTag `json:"tags"`
	Page          int       `json:"page"`
	HasAdditional bool      `json:"has_additional"`
}

type quayTag struct {
	Name           string `json:"name"`
	Reversion      bool   `json:"reversion"`
	StartTS        int64  `json:"start_ts"`
	ManifestDigest string `json:"manifest_digest"`
	IsManifestList bool   `json:"is_manifest_list"`
	Size           int64  `json:"size"`
	LastModified   string `json:"last_modified"`
}
