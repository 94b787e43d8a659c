package registrytest_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// metaSeed seeds repo with n single-image tags 1.0.0 ... (created a minute
// apart).
func metaSeed(t *testing.T, s *registrytest.Server, repo string, n int) {
	t.Helper()
	sc := &registrytest.Scenario{Repositories: map[string]*registrytest.Repository{repo: {
		Generate: &registrytest.Generate{Count: n, Format: "1.0.%d", Created: "2026-01-01T00:00:00Z", Interval: "1m",
			Platforms: []string{"linux/amd64"}}}}}
	if err := s.SeedScenario(sc); err != nil {
		t.Fatal(err)
	}
}

// metaGet sends a request with an optional Authorization and returns the
// answer; v, when not nil, receives its JSON body.
func metaGet(t *testing.T, method, u, auth, body string, v any) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if v != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s %s: %v: %s", method, u, err, b)
		}
	}
	return resp
}

func TestShapeDiff(t *testing.T) {
	for _, c := range []struct {
		name, sample, answer string
		free                 []string
		want                 []string
	}{
		{name: "same", sample: `{"a":1,"b":"x","c":[{"d":true}]}`, answer: `{"b":"y","a":2,"c":[{"d":false},{"d":true}]}`},
		{name: "type", sample: `{"a":1}`, answer: `{"a":"1"}`, want: []string{"a: string in the answer, number in the sample"}},
		{name: "missing and extra", sample: `{"a":1}`, answer: `{"b":1}`,
			want: []string{"a: missing in the answer", "b: not in the sample"}},
		{name: "nested array element", sample: `{"r":[{"n":"x"}]}`, answer: `{"r":[{"n":"x"},{"n":1}]}`,
			want: []string{"(element 1) r[].n: number in the answer, string in the sample"}},
		{name: "null sample accepts anything", sample: `{"a":null}`, answer: `{"a":{"x":1}}`},
		{name: "null answer for object or array", sample: `{"a":{"x":1},"b":[1]}`, answer: `{"a":null,"b":null}`},
		{name: "null answer for a string", sample: `{"a":"x"}`, answer: `{"a":null}`,
			want: []string{"a: null in the answer, string in the sample"}},
		{name: "element of its kind", sample: `[{"k":"image","x":{"os":"linux"},"r":null},{"k":"index","x":null,"r":[{"d":"s"}]}]`,
			answer: `[{"k":"index","x":null,"r":[{"d":1}]}]`,
			want:   []string{"(element 0) (element 0) [].r[].d: number in the answer, string in the sample"}},
		{name: "free map", sample: `{"m":{"a":"x"}}`, answer: `{"m":{"a":"y","b":"z"}}`, free: []string{"m"}},
		{name: "free map value type", sample: `{"m":{"a":"x"}}`, answer: `{"m":{"a":1}}`, free: []string{"m"},
			want: []string{"m.a: number in the answer, string in the sample"}},
		{name: "empty sample array", sample: `{"a":[]}`, answer: `{"a":[1,"x"]}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := registrytest.ShapeDiff([]byte(c.sample), []byte(c.answer), c.free...)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
		})
	}
	if _, err := registrytest.ShapeDiff([]byte(`{`), []byte(`{}`)); err == nil {
		t.Error("a malformed sample: no error")
	}
}

// TestAPIServer_Faults: Skip, Times, Status with Retry-After, Body and Header;
// the counters and the request log.
func TestAPIServer_Faults(t *testing.T) {
	s := registrytest.New(t)
	metaSeed(t, s, "team/web", 3)
	a := s.DockerHubAPI(t)
	a.Inject(registrytest.APIFault{Kind: registrytest.APIPage, Status: http.StatusTooManyRequests, RetryAfter: "9", Skip: 1, Times: 2})
	a.Inject(registrytest.APIFault{Kind: registrytest.APIPage, Repo: "team/other", Body: []byte("{not json")})
	a.Inject(registrytest.APIFault{Kind: registrytest.APIPage, Header: http.Header{"X-Extra": {"1"}}})
	u := a.URL + "/v2/namespaces/team/repositories/web/tags"
	var want []int
	for i := range 5 {
		resp := metaGet(t, http.MethodGet, u, "", "", nil)
		want = append(want, resp.StatusCode)
		if i == 1 && resp.Header.Get("Retry-After") != "9" {
			t.Errorf("request %d: Retry-After %q", i, resp.Header.Get("Retry-After"))
		}
		if i >= 3 && resp.Header.Get("X-Extra") != "1" {
			t.Errorf("request %d: the Header fault did not apply", i)
		}
	}
	if w := []int{200, 429, 429, 200, 200}; !equalInts(want, w) {
		t.Errorf("statuses %v, want %v", want, w)
	}
	resp := metaGet(t, http.MethodGet, a.URL+"/v2/namespaces/team/repositories/other/tags", "", "", nil)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("malformed body fault: status %d", resp.StatusCode)
	}
	if n := a.Count(registrytest.APIPage); n != 6 {
		t.Errorf("Count(page) = %d, want 6", n)
	}
	reqs := a.Requests()
	if len(reqs) != 6 || !reqs[1].Fault || reqs[1].Status != 429 || reqs[0].Status != 200 || reqs[5].Repo != "team/other" {
		t.Errorf("request log %+v", reqs)
	}
	metaGet(t, http.MethodGet, a.URL+"/nowhere", "", "", nil)
	if got := a.Counts(); got[registrytest.APIOther] != 1 || a.Total() != 7 {
		t.Errorf("counts %v, total %d", got, a.Total())
	}
	a.ResetCounts()
	a.ClearFaults()
	if a.Total() != 0 || len(a.Requests()) != 0 || len(a.Counts()) != 0 {
		t.Error("ResetCounts left counts")
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
