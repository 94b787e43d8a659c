package registrytest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Docker Hub's API (https://docs.docker.com/reference/api/hub/latest/) as the
// resolver reads it:
//
//   - POST /v2/auth/token {"identifier","secret"} -> {"access_token"} (and the
//     deprecated POST /v2/users/login {"username","password"} -> {"token"}),
//     counted as APILogin;
//   - GET /v2/namespaces/{namespace}/repositories/{repository}/tags?page=N&page_size=M,
//     counted as APIPage: {"count","next","previous","results":[tag...]}, newest
//     last_updated first (ordering=name, -name, last_updated also accepted),
//     page_size at most 100 (default 10), next an absolute URL or null, a page
//     past the last answered 404.
//
// The repository namespace/repository is Registry's repository of that path
// (official images: library/<name>). Listing tags is not a pull: the pulls are
// Registry's ManifestGet count.

// DockerHubAPI starts Docker Hub's API answering from s, closed when the test
// ends. WithAPIAuth makes the tags pages require a token from the login
// endpoints (issued for those credentials); without it they are anonymous.
func (s *Server) DockerHubAPI(t testing.TB, opts ...APIOption) *APIServer {
	t.Helper()
	return newAPIServer(t, s, apiVendor{name: "dockerhub", defaultLimit: 10, route: hubRoute, serve: serveHub,
		errorBody: func(status int, msg string) any {
			return map[string]any{"message": msg, "errinfo": map[string]any{}}
		}}, opts)
}

// hubRoute classifies a Docker Hub API request.
func hubRoute(r *http.Request) (APIKind, string) {
	switch p := r.URL.Path; {
	case r.Method == http.MethodPost && (p == "/v2/auth/token" || p == "/v2/users/login"):
		return APILogin, ""
	case r.Method == http.MethodGet && strings.HasPrefix(p, "/v2/namespaces/") && strings.HasSuffix(p, "/tags"):
		elems := strings.Split(strings.TrimSuffix(strings.TrimPrefix(p, "/v2/namespaces/"), "/tags"), "/")
		if len(elems) == 3 && elems[1] == "repositories" && elems[0] != "" && elems[2] != "" {
			return APIPage, elems[0] + "/" + elems[2]
		}
	}
	return APIOther, ""
}

func serveHub(a *APIServer, w http.ResponseWriter, r *http.Request, repo string, f *APIFault) {
	if r.Method == http.MethodPost {
		serveHubLogin(a, w, r)
		return
	}
	if a.cfg.auth && !a.bearerOK(r) {
		a.Error(w, http.StatusUnauthorized, "authentication required")
		return
	}
	tags, ok := a.describe(w, repo)
	if !ok {
		return
	}
	if err := sortHub(tags, r.URL.Query().Get("ordering")); err != nil {
		a.Error(w, http.StatusBadRequest, err.Error())
		return
	}
	size, page := a.pageSize(r, "page_size"), pageNumber(r, "page")
	items, more := pageOf(tags, page, size)
	if page > 1 && len(items) == 0 {
		a.Error(w, http.StatusNotFound, "object not found")
		return
	}
	body := hubPage{Count: len(tags), Results: make([]hubTag, 0, len(items))}
	for i, td := range items {
		body.Results = append(body.Results, hubTagOf(td, (page-1)*size+i+1))
	}
	if more {
		body.Next = hubPageURL(a, r, page+1, size)
	}
	if page > 1 {
		body.Previous = hubPageURL(a, r, page-1, size)
	}
	if f != nil && f.NextURL != "" {
		body.Next = &f.NextURL
	}
	if f != nil && f.NextLoop {
		body.Next = hubPageURL(a, r, page, size)
	}
	writeJSON(w, http.StatusOK, body)
}

// serveHubLogin answers both login endpoints.
func serveHubLogin(a *APIServer, w http.ResponseWriter, r *http.Request) {
	var in struct {
		Identifier string `json:"identifier"`
		Secret     string `json:"secret"`
		Username   string `json:"username"`
		Password   string `json:"password"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&in); err != nil {
		a.Error(w, http.StatusBadRequest, "malformed request body")
		return
	}
	user, pass := in.Identifier, in.Secret
	if r.URL.Path == "/v2/users/login" {
		user, pass = in.Username, in.Password
	}
	if user == "" || pass == "" || (a.cfg.auth && (user != a.cfg.user || pass != a.cfg.pass)) {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"detail": "Incorrect authentication credentials",
			"message": "Incorrect authentication credentials", "errinfo": map[string]any{}})
		return
	}
	tok := a.IssueToken()
	if r.URL.Path == "/v2/users/login" {
		writeJSON(w, http.StatusOK, map[string]string{"token": tok})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"access_token": tok})
}

// sortHub orders tags as Hub's ordering parameter says (default -last_updated).
func sortHub(tags []TagDescription, ordering string) error {
	switch ordering {
	case "", "-last_updated":
		sortByPushed(tags)
	case "last_updated":
		sortByPushed(tags)
		for i, j := 0, len(tags)-1; i < j; i, j = i+1, j-1 {
			tags[i], tags[j] = tags[j], tags[i]
		}
	case "name":
		// Describe sorts by tag already.
	case "-name":
		for i, j := 0, len(tags)-1; i < j; i, j = i+1, j-1 {
			tags[i], tags[j] = tags[j], tags[i]
		}
	default:
		return fmt.Errorf("invalid ordering %q", ordering)
	}
	return nil
}

// hubPageURL is the absolute URL of another page of the same listing.
func hubPageURL(a *APIServer, r *http.Request, page, size int) *string {
	q := url.Values{}
	for k, v := range r.URL.Query() {
		q[k] = v
	}
	q.Set("page", strconv.Itoa(page))
	q.Set("page_size", strconv.Itoa(size))
	u := a.URL + r.URL.Path + "?" + q.Encode()
	return &u
}

type hubPage struct {
	Count    int      `json:"count"`
	Next     *string  `json:"next"`
	Previous *string  `json:"previous"`
	Results  []hubTag `json:"results"`
}

type hubTag struct {
	Creator             int        `json:"creator"`
	ID                  int        `json:"id"`
	Images              []hubImage `json:"images"`
	LastUpdated         string     `json:"last_updated"`
	LastUpdater         int        `json:"last_updater"`
	LastUpdaterUsername string     `json:"last_updater_username"`
	Name                string     `json:"name"`
	Repository          int        `json:"repository"`
	FullSize            int64      `json:"full_size"`
	V2                  bool       `json:"v2"`
	TagStatus           string     `json:"tag_status"`
	TagLastPulled       *string    `json:"tag_last_pulled"`
	TagLastPushed       string     `json:"tag_last_pushed"`
	MediaType           string     `json:"media_type"`
	ContentType         string     `json:"content_type"`
	Digest              string     `json:"digest"`
}

type hubImage struct {
	Architecture string  `json:"architecture"`
	Features     string  `json:"features"`
	Variant      *string `json:"variant"`
	Digest       string  `json:"digest"`
	OS           string  `json:"os"`
	OSFeatures   string  `json:"os_features"`
	OSVersion    *string `json:"os_version"`
	Size         int64   `json:"size"`
	Status       string  `json:"status"`
	LastPulled   *string `json:"last_pulled"`
	LastPushed   string  `json:"last_pushed"`
}

// hubTime is Hub's time format: RFC 3339, microseconds, UTC.
func hubTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z") }

func hubTagOf(td TagDescription, id int) hubTag {
	pushed := hubTime(td.Pushed)
	t := hubTag{Creator: 1, ID: id, Images: []hubImage{}, LastUpdated: pushed, LastUpdater: 1,
		LastUpdaterUsername: "registrytest", Name: td.Tag, Repository: 1, V2: true, TagStatus: "active",
		TagLastPushed: pushed, MediaType: td.MediaType, ContentType: "image", Digest: td.Digest}
	for _, m := range td.Manifests {
		img := hubImage{Architecture: "unknown", OS: "unknown", Digest: m.Digest, Size: m.Size, Status: "active",
			LastPushed: pushed}
		if p := m.Platform; p != nil {
			img.Architecture, img.OS, img.Features = p.Architecture, p.OS, strings.Join(p.Features, ",")
			if p.Variant != "" {
				img.Variant = &p.Variant
			}
			if p.OSVersion != "" {
				img.OSVersion = &p.OSVersion
			}
		}
		t.FullSize += m.Size
		t.Images = append(t.Images, img)
	}
	return t
}
