package metadata

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// The helpers below are shared by every metadata API client of the package:
// bounded JSON requests, errors that carry the API's answer (never a
// credential), pagination bounds and the check of a next-page URL.

// APIError is an answer of a metadata API that cannot be used: an error status,
// a body that is not the JSON expected, or a request that failed. It carries
// the API's status and a short excerpt of its answer, cleaned of every
// credential the client sent (resolve.DefaultRedactor), one line.
type APIError struct {
	API    string // the API's name (resolve.MetadataDockerHub, ...)
	Method string // GET, POST
	URL    string // the request's URL, without credentials (RedactURL)
	Status int    // the HTTP status; 0 when no answer came
	Body   string // a cleaned excerpt of the answer's body
	// RetryAfter is the answer's Retry-After (a 429 or 503), zero if none.
	RetryAfter time.Duration
	Err        error // the cause: a transport or decoding error, or nil
}

func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s API: %s %s", e.API, e.Method, e.URL)
	if e.Status != 0 {
		fmt.Fprintf(&b, ": status %d", e.Status)
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": %s", resolve.CleanRegistryText(e.Err.Error()))
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %s)", e.RetryAfter)
	}
	if e.Body != "" {
		fmt.Fprintf(&b, ": %s", e.Body)
	}
	return b.String()
}

func (e *APIError) Unwrap() error { return e.Err }

// LimitError is a listing the client stopped reading: over a bound of Options
// (MaxPages, MaxTags, MaxPageBytes) or hostile pagination (a next page on
// another host, a page already read, a tag listed twice).
type LimitError struct {
	API        string
	Repository string // the repository as written
	// Limit is what was hit: "pages", "tags", "bytes per page", "link loop",
	// "foreign link" or "repeated tag".
	Limit string
	Max   int64  // the bound; 0 for hostile pagination
	URL   string // the page or link concerned, without credentials
}

func (e *LimitError) Error() string {
	where := fmt.Sprintf("%s API, repository %s", e.API, e.Repository)
	switch e.Limit {
	case "link loop":
		return fmt.Sprintf("%s: next page links back to a page already read (%s); not following it", where, e.URL)
	case "foreign link":
		return fmt.Sprintf("%s: next page is on another host or scheme (%s); not following it", where, e.URL)
	case "repeated tag":
		return fmt.Sprintf("%s: a page lists a tag already listed (%s); not reading further", where, e.URL)
	case "bytes per page":
		return fmt.Sprintf("%s: a page is over the cap of %d bytes (%s)", where, e.Max, e.URL)
	}
	return fmt.Sprintf("%s: listing is over the cap of %d %s", where, e.Max, e.Limit)
}

// maxErrorExcerpt bounds the excerpt of an error answer kept in an APIError.
const maxErrorExcerpt = 512

// apiClient carries one API's requests: its name, transport and bounds.
type apiClient struct {
	api          string
	hc           *http.Client
	keychain     authn.Keychain
	maxPages     int
	maxTags      int
	maxPageBytes int64
	pageSize     int
	log          *slog.Logger
}

// newAPIClient applies the defaults of Options: http.DefaultTransport, the
// resolver's tag list bounds and the API's maximum page size maxPageSize.
func newAPIClient(api string, o Options, maxPageSize int) apiClient {
	c := apiClient{api: api, keychain: o.Keychain, maxPages: o.MaxPages, maxTags: o.MaxTags,
		maxPageBytes: o.MaxPageBytes, pageSize: o.PageSize, log: o.Log}
	rt := o.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	// Redirects are not followed: a redirect is an API answer to report.
	c.hc = &http.Client{Transport: rt, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
	if c.maxPages <= 0 {
		c.maxPages = resolve.DefaultMaxTagPages
	}
	if c.maxTags <= 0 {
		c.maxTags = resolve.DefaultMaxTags
	}
	if c.maxPageBytes <= 0 {
		c.maxPageBytes = resolve.DefaultMaxTagPageBytes
	}
	if c.pageSize <= 0 || c.pageSize > maxPageSize {
		c.pageSize = maxPageSize
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	return c
}

// baseURL returns base, else def, without a trailing slash; it must be an
// absolute http(s) URL without user information.
func baseURL(api, base, def string) (string, error) {
	if base == "" {
		base = def
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%s API: base URL %q: not an absolute http(s) URL", api, RedactURL(base))
	}
	if u.User != nil {
		return "", fmt.Errorf("%s API: base URL %q: holds credentials; give them through the credentials source", api, RedactURL(base))
	}
	return strings.TrimSuffix(base, "/"), nil
}

// credential returns the keychain's credential for repo (anonymous: nil). A
// credential's values are registered with resolve.DefaultRedactor, so that an
// answer quoting them is redacted.
func (c *apiClient) credential(ctx context.Context, repo name.Repository) (*authn.AuthConfig, error) {
	if c.keychain == nil {
		return nil, nil
	}
	a, err := authn.Resolve(ctx, c.keychain, repo)
	if err != nil {
		return nil, fmt.Errorf("%s API: credential for %s: %w", c.api, repo, err)
	}
	if a == nil || a == authn.Anonymous {
		return nil, nil
	}
	cfg, err := authn.Authorization(ctx, a)
	if err != nil {
		return nil, fmt.Errorf("%s API: credential for %s: %w", c.api, repo, err)
	}
	resolve.DefaultRedactor.AddAuthConfig(cfg)
	if *cfg == (authn.AuthConfig{}) {
		return nil, nil
	}
	return cfg, nil
}

// getJSON GETs u with the header hdr (authentication) and decodes its JSON
// answer into v. It returns the answer's header (Link, X-Total-Count).
func (c *apiClient) getJSON(ctx context.Context, u string, hdr http.Header, v any) (http.Header, error) {
	return c.doJSON(ctx, http.MethodGet, u, hdr, nil, v)
}

// postJSON POSTs in as JSON to u and decodes the JSON answer into out.
func (c *apiClient) postJSON(ctx context.Context, u string, hdr http.Header, in, out any) (http.Header, error) {
	body, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("%s API: POST %s: %w", c.api, RedactURL(u), err)
	}
	return c.doJSON(ctx, http.MethodPost, u, hdr, body, out)
}

// doJSON sends one request and decodes its answer, at most maxPageBytes read.
// Any status but 200 is an *APIError; so is a body that is not JSON.
func (c *apiClient) doJSON(ctx context.Context, method, u string, hdr http.Header, body []byte, v any) (http.Header, error) {
	apiErr := func(status int, err error) *APIError {
		return &APIError{API: c.api, Method: method, URL: RedactURL(u), Status: status, Err: err}
	}
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return nil, apiErr(0, err)
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	start := time.Now()
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, apiErr(0, unwrapURLError(err))
	}
	defer resp.Body.Close()
	c.log.Debug("metadata API request", "api", c.api, "method", method, "url", RedactURL(u),
		"status", resp.StatusCode, "duration", time.Since(start))
	if resp.StatusCode != http.StatusOK {
		e := apiErr(resp.StatusCode, nil)
		e.Body = excerpt(resp.Body)
		e.RetryAfter = retryAfter(resp.Header.Get("Retry-After"))
		return nil, e
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, c.maxPageBytes+1))
	if err != nil {
		return nil, apiErr(resp.StatusCode, fmt.Errorf("reading the answer: %w", err))
	}
	if int64(len(raw)) > c.maxPageBytes {
		return nil, &LimitError{API: c.api, Limit: "bytes per page", Max: c.maxPageBytes, URL: RedactURL(u)}
	}
	if err := json.Unmarshal(raw, v); err != nil {
		e := apiErr(resp.StatusCode, fmt.Errorf("malformed answer: %w", err))
		e.Body = resolve.DefaultRedactor.Clean(string(raw), 160)
		return nil, e
	}
	return resp.Header, nil
}

// unwrapURLError drops *url.Error's "Get <url>:" prefix: the URL is in the
// APIError already, credentials removed.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// excerpt reads a short, cleaned excerpt of an error answer.
func excerpt(r io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(r, resolve.MaxErrorBody))
	return resolve.DefaultRedactor.Clean(strings.TrimSpace(string(b)), maxErrorExcerpt)
}

// retryAfter parses a Retry-After value (seconds or an HTTP date).
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

// RedactURL returns u fit for an error or a log: without user information, and
// with the values of query parameters that may carry a secret (token,
// access_token, key, password, secret, signature, X-Amz-Credential, ...)
// replaced with resolve.Redacted.
func RedactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return resolve.CleanRegistryText(u)
	}
	p.User = nil
	if p.RawQuery != "" {
		q := p.Query()
		for k := range q {
			if secretParams[strings.ToLower(k)] {
				q[k] = []string{resolve.Redacted}
			}
		}
		p.RawQuery = q.Encode()
	}
	return resolve.CleanRegistryText(p.String())
}

// secretParams are query parameters that may carry a secret (lower case).
var secretParams = map[string]bool{
	"token": true, "access_token": true, "id_token": true, "refresh_token": true, "password": true, "passwd": true,
	"secret": true, "client_secret": true, "key": true, "api_key": true, "apikey": true, "sig": true, "signature": true,
	"credential": true, "auth": true, "authorization": true, "code": true,
	"x-amz-signature": true, "x-amz-credential": true, "x-amz-security-token": true,
}

// pager bounds one listing: pages, tags, the host its pages may be on and the
// pages and tags already read.
type pager struct {
	c     *apiClient
	repo  string
	first *url.URL
	seen  map[string]bool
	tags  map[string]bool
	pages int
}

// newPager starts a listing of repo (as written) whose first page is first.
func (c *apiClient) newPager(repo, first string) (*pager, error) {
	u, err := url.Parse(first)
	if err != nil {
		return nil, fmt.Errorf("%s API: first page %q: %w", c.api, RedactURL(first), err)
	}
	return &pager{c: c, repo: repo, first: u, seen: map[string]bool{}, tags: map[string]bool{}}, nil
}

// page checks the URL of the next page to read, given relative to the page
// cur ("" for the first): it must be on the first page's scheme and host, not
// read already, and within MaxPages. It returns the absolute URL.
func (p *pager) page(cur, next string) (string, error) {
	base := p.first
	if cur != "" {
		var err error
		if base, err = url.Parse(cur); err != nil {
			return "", fmt.Errorf("%s API: page %q: %w", p.c.api, RedactURL(cur), err)
		}
	}
	u, err := base.Parse(next)
	if err != nil {
		return "", &APIError{API: p.c.api, Method: http.MethodGet, URL: RedactURL(cur),
			Err: fmt.Errorf("next page %q: %w", RedactURL(next), err)}
	}
	// Query parameters in another order are the same page.
	u.RawQuery = u.Query().Encode()
	abs := u.String()
	switch {
	case u.Scheme != p.first.Scheme || u.Host != p.first.Host || u.User != nil:
		return "", p.limit("foreign link", 0, abs)
	case p.seen[abs]:
		return "", p.limit("link loop", 0, abs)
	case p.pages >= p.c.maxPages:
		return "", p.limit("pages", int64(p.c.maxPages), abs)
	}
	p.seen[abs] = true
	p.pages++
	return abs, nil
}

// tag counts one tag of the page u: it must be new and within MaxTags.
func (p *pager) tag(u, tag string) error {
	if p.tags[tag] {
		return p.limit("repeated tag", 0, u+" tag "+tag)
	}
	if len(p.tags) >= p.c.maxTags {
		return p.limit("tags", int64(p.c.maxTags), u)
	}
	p.tags[tag] = true
	return nil
}

// get reads the page u (checked by page) into v; a page over MaxPageBytes is a
// *LimitError naming the repository.
func (p *pager) get(ctx context.Context, u string, hdr http.Header, v any) (http.Header, error) {
	h, err := p.c.getJSON(ctx, u, hdr, v)
	var le *LimitError
	if errors.As(err, &le) && le.Repository == "" {
		le.Repository = p.repo
	}
	return h, err
}

func (p *pager) limit(what string, max int64, u string) *LimitError {
	return &LimitError{API: p.c.api, Repository: p.repo, Limit: what, Max: max, URL: RedactURL(u)}
}

// nextLink returns the target of an RFC 5988 Link header's rel="next", or "".
func nextLink(h http.Header) string {
	for _, v := range h.Values("Link") {
		for _, link := range strings.Split(v, ",") {
			target, params, ok := strings.Cut(strings.TrimSpace(link), ";")
			if !ok || !strings.HasPrefix(target, "<") || !strings.HasSuffix(target, ">") {
				continue
			}
			for _, param := range strings.Split(params, ";") {
				k, val, _ := strings.Cut(strings.TrimSpace(param), "=")
				if strings.EqualFold(k, "rel") && strings.Trim(val, `"`) == "next" {
					return strings.TrimSuffix(strings.TrimPrefix(target, "<"), ">")
				}
			}
		}
	}
	return ""
}

// ---- what the APIs say of a tag ----

// tagPattern is the OCI distribution spec's tag grammar.
var tagPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// malformed is an *APIError for an answer that parsed as JSON but says
// something impossible (a tag or digest that breaks the grammar).
func (c *apiClient) malformed(u, format string, args ...any) *APIError {
	return &APIError{API: c.api, Method: http.MethodGet, URL: RedactURL(u), Status: http.StatusOK,
		Err: fmt.Errorf("malformed answer: "+format, args...)}
}

// checkTag returns an error unless tag is a valid tag.
func (c *apiClient) checkTag(u, tag string) error {
	if !tagPattern.MatchString(tag) {
		return c.malformed(u, "tag %q is not a valid tag", resolve.Truncate(tag, 140))
	}
	return nil
}

// digestOf parses a digest the API gave; "" is the zero Hash.
func (c *apiClient) digestOf(u, s string) (v1.Hash, error) {
	if s == "" {
		return v1.Hash{}, nil
	}
	h, err := v1.NewHash(s)
	if err != nil {
		return v1.Hash{}, c.malformed(u, "digest %q: %v", resolve.Truncate(s, 140), err)
	}
	return h, nil
}

// platformEntry is one image manifest of a tag as an API lists it: its
// platform and digest ("" when the API does not give it).
type platformEntry struct {
	Platform v1.Platform
	Digest   string
}

// runnable returns a tag's runnable platforms as resolve's inspect computes
// them: attestations (unknown/unknown) and entries without os or architecture
// left out, normalised (resolve.PlatformOf), sorted and without duplicates; and
// in the same order the digests of their manifests, or nil when the API did not
// give every one or two manifests have the same platform (which one a platform
// stands for is then not known). nil, nil when none is runnable.
func (c *apiClient) runnable(u string, entries []platformEntry) ([]resolve.Platform, []v1.Hash, error) {
	type pair struct {
		p resolve.Platform
		d v1.Hash
	}
	var pairs []pair
	allDigests := true
	for _, e := range entries {
		p := resolve.PlatformOf(&e.Platform)
		if p.OS == "" || p.Arch == "" || p.IsUnknown() {
			continue
		}
		d, err := c.digestOf(u, e.Digest)
		if err != nil {
			return nil, nil, err
		}
		allDigests = allDigests && e.Digest != ""
		pairs = append(pairs, pair{p, d})
	}
	if len(pairs) == 0 {
		return nil, nil, nil
	}
	slices.SortStableFunc(pairs, func(a, b pair) int { return strings.Compare(a.p.String(), b.p.String()) })
	n := len(pairs)
	pairs = slices.CompactFunc(pairs, func(a, b pair) bool { return a.p == b.p })
	allDigests = allDigests && len(pairs) == n
	ps := make([]resolve.Platform, len(pairs))
	var ds []v1.Hash
	if allDigests {
		ds = make([]v1.Hash, len(pairs))
	}
	for i, x := range pairs {
		ps[i] = x.p
		if allDigests {
			ds[i] = x.d
		}
	}
	return ps, ds, nil
}

// parseTime parses an RFC 3339 time (UTC); "" is the zero time.
func (c *apiClient) parseTime(u, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, c.malformed(u, "time %q: %v", resolve.Truncate(s, 60), err)
	}
	return t.UTC(), nil
}
