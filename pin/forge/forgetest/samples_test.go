package forgetest

import (
	"encoding/json"
	"io/fs"
	"net/http"
	"strings"
	"testing"
)

// TestSamples: every recorded answer names its documentation page, a
// status, and JSON (or text) to answer.
func TestSamples(t *testing.T) {
	names, err := fs.Glob(testdata, "testdata/*.json")
	if err != nil || len(names) == 0 {
		t.Fatalf("no samples: %v", err)
	}
	for _, name := range names {
		s := load(strings.TrimSuffix(strings.TrimPrefix(name, "testdata/"), ".json"))
		if s.Status < 200 || s.Status > 599 {
			t.Errorf("%s: status %d", name, s.Status)
		}
		if s.Text == "" && !json.Valid(s.Answer) {
			t.Errorf("%s: the answer is not JSON", name)
		}
	}
}

// TestUnauthorized: a wrong token gets the documented 401, still counted.
func TestUnauthorized(t *testing.T) {
	g := NewGitHub(t)
	g.AddRepo("o/r")
	l := NewGitLab(t)
	l.AddProject("g/r")
	for _, tc := range []struct {
		url, header, value, route string
		count                     func(string) int
	}{
		{g.URL + "/repos/o/r/pulls", "Authorization", "Bearer wrong", GitHubListPulls, g.Count},
		{g.EnterpriseURL + "/repos/o/r/pulls", "Authorization", "token wrong", GitHubListPulls, g.Count},
		{l.URL + "/api/v4/projects/g%2Fr/merge_requests", "PRIVATE-TOKEN", "wrong", GitLabListMRs, l.Count},
	} {
		req, _ := http.NewRequest(http.MethodGet, tc.url, nil)
		req.Header.Set(tc.header, tc.value)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: %d, want 401", tc.url, resp.StatusCode)
		}
	}
	if g.Count(GitHubListPulls) != 2 || l.Count(GitLabListMRs) != 1 {
		t.Errorf("counts %d, %d; want 2, 1", g.Count(GitHubListPulls), l.Count(GitLabListMRs))
	}
}
