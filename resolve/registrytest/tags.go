package registrytest

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"sync/atomic"
)

type tagList struct {
	Name string   `json:"name"`
	Tags []string `json:"tags"`
}

// serveTags answers GET /v2/<repo>/tags/list with distribution's pagination:
// tags sorted, `last` exclusive, at most min(n, page size) per page, and a
// Link header to the next page when more tags follow.
func (s *Server) serveTags(w http.ResponseWriter, r *http.Request, repo string) {
	q := r.URL.Query()
	n := -1
	if _, ok := q["n"]; ok {
		v, err := strconv.Atoi(q.Get("n"))
		if s.cfg.rejectPageSize || err != nil || v < 0 {
			writeError(w, r, http.StatusBadRequest, "PAGINATION_NUMBER_INVALID",
				"invalid number of results requested", map[string]string{"n": q.Get("n")})
			return
		}
		n = v
	}

	tags, ok := s.allTags(w, r, repo)
	if !ok {
		return
	}

	if last := q.Get("last"); last != "" {
		i := sort.SearchStrings(tags, last)
		if i < len(tags) && tags[i] == last {
			i++
		}
		tags = tags[i:]
	}

	limit := -1
	if s.cfg.pageSize > 0 {
		limit = s.cfg.pageSize
	}
	if n >= 0 && (limit < 0 || n < limit) {
		limit = n
	}
	more := false
	if limit >= 0 && len(tags) > limit {
		tags = tags[:limit]
		more = limit > 0
	}
	if tags == nil {
		tags = []string{}
	}

	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	if more {
		v := url.Values{}
		if !s.cfg.rejectPageSize {
			v.Set("n", strconv.Itoa(limit))
		}
		v.Set("last", tags[len(tags)-1])
		next := url.URL{Path: r.URL.Path, RawQuery: v.Encode()}
		w.Header().Set("Link", fmt.Sprintf("<%s>; rel=\"next\"", next.String()))
	}
	body, _ := json.Marshal(tagList{Name: repo, Tags: tags})
	body = append(body, '\n')
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// sortedTags is a repository's sorted tag list as of a count of writes.
type sortedTags struct {
	writes uint64
	tags   []string
}

// writeCounter counts the writes of the inner registry as they begin and end.
type writeCounter struct {
	h http.Handler
	n *atomic.Uint64
}

func (c writeCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		c.n.Add(1)
		defer c.n.Add(1)
	}
	c.h.ServeHTTP(w, r)
}

// allTags is the full, sorted list of repo from the inner registry, listed again
// only after a write (a 100,000-tag list is paged through without listing and
// sorting it for every page); false when it answered w with an error.
func (s *Server) allTags(w http.ResponseWriter, r *http.Request, repo string) ([]string, bool) {
	writes := s.writes.Load()
	s.tagsMu.Lock()
	c, ok := s.tagLists[repo]
	s.tagsMu.Unlock()
	if ok && c.writes == writes {
		return c.tags, true
	}
	rec, err := s.innerDo(http.MethodGet, "/v2/"+repo+"/tags/list", nil, nil)
	if err != nil {
		writeError(w, r, http.StatusInternalServerError, "UNKNOWN", err.Error(), nil)
		return nil, false
	}
	if rec.Code != http.StatusOK {
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
		return nil, false
	}
	var all tagList
	if err := json.Unmarshal(rec.Body.Bytes(), &all); err != nil {
		writeError(w, r, http.StatusInternalServerError, "UNKNOWN", err.Error(), nil)
		return nil, false
	}
	sort.Strings(all.Tags)
	s.tagsMu.Lock()
	if s.tagLists == nil {
		s.tagLists = map[string]sortedTags{}
	}
	s.tagLists[repo] = sortedTags{writes: writes, tags: all.Tags}
	s.tagsMu.Unlock()
	return all.Tags, true
}

// TagsBody is a tags/list answer body listing tags as given, without checking
// them: for a Fault.Body that serves tags no registry would accept on push.
func TagsBody(repo string, tags ...string) []byte {
	if tags == nil {
		tags = []string{}
	}
	b, _ := json.Marshal(tagList{Name: repo, Tags: tags})
	return append(b, '\n')
}

// GzipBomb returns a gzip stream that expands to a valid tags/list body of at
// least expanded bytes (one tag, then that much JSON whitespace), about a
// thousandth of that compressed, for a Fault.Body with the header
// Content-Encoding: gzip. A client that reads it whole holds expanded bytes.
func GzipBomb(repo string, expanded int64) []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	head, _ := json.Marshal(repo)
	fmt.Fprintf(zw, `{"name":%s,"tags":["bomb"`, head)
	spaces := bytes.Repeat([]byte{' '}, 64<<10)
	for n := int64(0); n < expanded; n += int64(len(spaces)) {
		_, _ = zw.Write(spaces)
	}
	_, _ = io.WriteString(zw, "]}\n")
	_ = zw.Close()
	return buf.Bytes()
}
