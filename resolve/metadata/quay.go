package metadata

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// Quay's tags API (quay/quay endpoints/api/tag.py, operation listRepoTags;
// https://docs.quay.io/api/swagger/):
//
//	GET {base}/api/v1/repository/{namespace}/{repository}/tag/?limit=100&page=N&onlyActiveTags=true
//
// answers {"tags": [tag], "page": N, "has_additional": bool}, the newest first.
// Each tag gives its name, manifest_digest, is_manifest_list and start_ts (its
// push, Unix seconds; last_modified is the same time as a date). Quay gives no
// platforms, media type or build time: they stay zero (the resolver reads them
// through the OCI protocol).
//
// Authentication: `Authorization: Bearer <token>` when the keychain's
// credential is a token: an OAuth access token as the password of the user
// "$oauthtoken" (Quay's convention), or a registry or identity token. Any other
// credential (a robot account's user name and password) is not accepted by
// Quay's API: the requests are anonymous.

// DefaultQuayURL is quay.io's API.
const DefaultQuayURL = "https://quay.io"

// quayMaxPageSize is the largest limit Quay accepts.
const quayMaxPageSize = 100

// quayOAuthUser is the user name that marks a password as an OAuth token.
const quayOAuthUser = "$oauthtoken"

// Quay reads Quay's tags API. It is safe for concurrent use.
type Quay struct {
	c    apiClient
	base string
}

// NewQuay returns a Quay client; o.BaseURL "" is https://quay.io for quay.io
// (or no Registry), else https://<o.Registry> (Red Hat Quay).
func NewQuay(o Options) (*Quay, error) {
	def := DefaultQuayURL
	if o.Registry != "" && o.Registry != "quay.io" {
		def = "https://" + o.Registry
	}
	base, err := baseURL(resolve.MetadataQuay, o.BaseURL, def)
	if err != nil {
		return nil, err
	}
	return &Quay{c: newAPIClient(resolve.MetadataQuay, o, quayMaxPageSize), base: base}, nil
}

// Name is resolve.MetadataQuay.
func (q *Quay) Name() string { return resolve.MetadataQuay }

// ListTagRecords lists every active tag of repo (namespace/repository).
func (q *Quay) ListTagRecords(ctx context.Context, repo name.Repository) ([]resolve.TagRecord, error) {
	path := repo.RepositoryStr()
	if !strings.Contains(path, "/") {
		return nil, fmt.Errorf("%s API: repository %s: Quay repositories are namespace/name", q.Name(), repo)
	}
	hdr, err := q.auth(ctx, repo)
	if err != nil {
		return nil, err
	}
	segs := strings.Split(path, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	tagsURL := q.base + "/api/v1/repository/" + strings.Join(segs, "/") + "/tag/"
	pageURL := func(n int) string {
		return fmt.Sprintf("%s?limit=%d&page=%d&onlyActiveTags=true", tagsURL, q.c.pageSize, n)
	}
	p, err := q.c.newPager(repo.String(), pageURL(1))
	if err != nil {
		return nil, err
	}
	var out []resolve.TagRecord
	for n, cur, more := 1, "", true; more; n++ {
		u, err := p.page(cur, pageURL(n))
		if err != nil {
			return nil, err
		}
		var page quayPage
		if _, err := p.get(ctx, u, hdr, &page); err != nil {
			return nil, err
		}
		if page.Page != 0 && page.Page != n {
			return nil, q.c.malformed(u, "page %d answered for page %d", page.Page, n)
		}
		for _, t := range page.Tags {
			rec, err := q.record(p, u, t)
			if err != nil {
				return nil, err
			}
			out = append(out, rec)
		}
		cur, more = u, page.HasAdditional
	}
	return out, nil
}

// auth is the Authorization header for repo's credential, nil for anonymous.
func (q *Quay) auth(ctx context.Context, repo name.Repository) (http.Header, error) {
	cred, err := q.c.credential(ctx, repo)
	if err != nil || cred == nil {
		return nil, err
	}
	tok := cred.RegistryToken
	switch {
	case tok != "":
	case cred.Username == quayOAuthUser && cred.Password != "":
		tok = cred.Password
	case cred.IdentityToken != "":
		tok = cred.IdentityToken
	default:
		q.c.log.Debug("metadata API: credential is not a token; listing anonymously", "api", q.Name(), "repository", repo.String())
		return nil, nil
	}
	return http.Header{"Authorization": {"Bearer " + tok}}, nil
}

type quayPage struct {
	Tags          []quayTag `json:"tags"`
	Page          int       `json:"page"`
	HasAdditional bool      `json:"has_additional"`
}

type quayTag struct {
	Name           string `json:"name"`
	ManifestDigest string `json:"manifest_digest"`
	StartTS        *int64 `json:"start_ts"`
	LastModified   string `json:"last_modified"`
}

// quayDate is Quay's date format (format_date: RFC 1123, zone -0000).
const quayDate = "Mon, 02 Jan 2006 15:04:05 -0700"

// record is what one tag of the page u says.
func (q *Quay) record(p *pager, u string, t quayTag) (resolve.TagRecord, error) {
	if err := q.c.checkTag(u, t.Name); err != nil {
		return resolve.TagRecord{}, err
	}
	if err := p.tag(u, t.Name); err != nil {
		return resolve.TagRecord{}, err
	}
	rec := resolve.TagRecord{Tag: t.Name}
	var err error
	if rec.Digest, err = q.c.digestOf(u, t.ManifestDigest); err != nil {
		return rec, err
	}
	switch {
	case t.StartTS != nil && *t.StartTS > 0:
		rec.Pushed = time.Unix(*t.StartTS, 0).UTC()
	case t.LastModified != "":
		pushed, err := time.Parse(quayDate, t.LastModified)
		if err != nil {
			return rec, q.c.malformed(u, "last_modified %q: %v", resolve.Truncate(t.LastModified, 60), err)
		}
		rec.Pushed = pushed.UTC()
	}
	return rec, nil
}
