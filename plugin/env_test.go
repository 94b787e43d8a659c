package plugin

import (
	"reflect"
	"strings"
	"testing"
)

func mapLookup(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestEnvFromEnviron(t *testing.T) {
	environ := []string{
		"ARGOCD_APP_NAME=team-a_web",
		"ARGOCD_APP_NAMESPACE=web-prod",
		"ARGOCD_APP_REVISION=0123456789abcdef0123456789abcdef01234567",
		"ARGOCD_APP_REVISION_SHORT=0123456",
		"ARGOCD_APP_REVISION_SHORT_8=01234567",
		"ARGOCD_APP_SOURCE_REPO_URL=https://git.example.com/team/apps.git",
		"ARGOCD_APP_SOURCE_PATH=apps/web",
		"ARGOCD_APP_SOURCE_TARGET_REVISION=main",
		"KUBE_VERSION=v1.31.0",
		"KUBE_API_VERSIONS=v1, apps/v1,,batch/v1",
		"ARGOCD_APP_PROJECT_NAME=team-a",
		"ARGOCD_ENV_FOO=bar",
		"ARGOCD_ENV_EMPTY=",
		"ARGOCD_ENV_EQ=a=b",
		`ARGOCD_APP_PARAMETERS=[{"name":"image-list","string":"web=ghcr.io/org/web:~1.2"},{"array":["a","b"],"name":"x"},{"map":{"k":"v"},"name":"y"}]`,
		"PARAM_IMAGE_LIST=ignored",
		"IMAGE_RESOLVER_DEFAULT_PLATFORMS=linux/arm64", // the operator's configuration, not the app's environment
		"PATH=/usr/bin",
		"malformed",
	}
	e, err := EnvFromEnviron(environ)
	if err != nil {
		t.Fatal(err)
	}
	want := &Env{
		AppName:              "team-a_web",
		AppShortName:         "web",
		AppControlNamespace:  "team-a",
		AppNamespace:         "web-prod",
		Revision:             "0123456789abcdef0123456789abcdef01234567",
		RevisionShort:        "0123456",
		RevisionShort8:       "01234567",
		SourceRepoURL:        "https://git.example.com/team/apps.git",
		SourcePath:           "apps/web",
		SourceTargetRevision: "main",
		KubeVersion:          "v1.31.0",
		KubeAPIVersions:      []string{"v1", "apps/v1", "batch/v1"},
		ProjectName:          "team-a",
		Vars:                 map[string]string{"FOO": "bar", "EMPTY": "", "EQ": "a=b"},
		Parameters: Parameters{
			{Name: "image-list", Kind: KindString, String: "web=ghcr.io/org/web:~1.2"},
			{Name: "x", Kind: KindArray, Array: []string{"a", "b"}},
			{Name: "y", Kind: KindMap, Map: map[string]string{"k": "v"}},
		},
	}
	if !reflect.DeepEqual(e, want) {
		t.Errorf("got  %+v\nwant %+v", e, want)
	}
}

func TestEnvFrom(t *testing.T) {
	cases := []struct {
		name    string
		env     map[string]string
		check   func(t *testing.T, e *Env)
		wantErr []string
	}{
		{
			name: "empty environment",
			env:  map[string]string{},
			check: func(t *testing.T, e *Env) {
				if !reflect.DeepEqual(e, &Env{}) {
					t.Errorf("got %+v, want zero Env", e)
				}
			},
		},
		{
			name: "app in control-plane namespace",
			env:  map[string]string{"ARGOCD_APP_NAME": "web"},
			check: func(t *testing.T, e *Env) {
				if e.AppName != "web" || e.AppShortName != "web" || e.AppControlNamespace != "" {
					t.Errorf("got %q %q %q", e.AppName, e.AppShortName, e.AppControlNamespace)
				}
			},
		},
		{
			name: "app in another namespace",
			env:  map[string]string{"ARGOCD_APP_NAME": "apps-ns_my-app"},
			check: func(t *testing.T, e *Env) {
				if e.AppName != "apps-ns_my-app" || e.AppShortName != "my-app" || e.AppControlNamespace != "apps-ns" {
					t.Errorf("got %q %q %q", e.AppName, e.AppShortName, e.AppControlNamespace)
				}
			},
		},
		{
			name: "streamed",
			env:  map[string]string{"ARGOCD_APP_REVISION": "streamed"},
			check: func(t *testing.T, e *Env) {
				if !e.Streamed {
					t.Error("Streamed is false")
				}
			},
		},
		{
			name: "commit is not streamed",
			env:  map[string]string{"ARGOCD_APP_REVISION": "0123456789abcdef0123456789abcdef01234567"},
			check: func(t *testing.T, e *Env) {
				if e.Streamed {
					t.Error("Streamed is true")
				}
			},
		},
		{
			name: "parameters null",
			env:  map[string]string{"ARGOCD_APP_PARAMETERS": "null"},
			check: func(t *testing.T, e *Env) {
				if e.Parameters != nil {
					t.Errorf("Parameters = %+v", e.Parameters)
				}
			},
		},
		{
			name: "parameters absent, PARAM_ ignored",
			env:  map[string]string{"PARAM_IMAGE_LIST": "web=nginx"},
			check: func(t *testing.T, e *Env) {
				if e.Parameters != nil {
					t.Errorf("Parameters = %+v", e.Parameters)
				}
			},
		},
		{
			name: "empty KUBE_API_VERSIONS",
			env:  map[string]string{"KUBE_API_VERSIONS": ""},
			check: func(t *testing.T, e *Env) {
				if e.KubeAPIVersions != nil {
					t.Errorf("KubeAPIVersions = %q", e.KubeAPIVersions)
				}
			},
		},
		{
			name:    "malformed parameters",
			env:     map[string]string{"ARGOCD_APP_PARAMETERS": `[{"name":"image-list","string":`},
			wantErr: []string{"ARGOCD_APP_PARAMETERS", "malformed JSON", "accepted: a JSON array"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, err := EnvFrom(mapLookup(tc.env))
			if tc.wantErr != nil {
				assertErr(t, err, tc.wantErr...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, e)
		})
	}
}

func TestEnvFromVarsFromProcess(t *testing.T) {
	t.Setenv("ARGOCD_ENV_PLUGIN_TEST_VAR", "x")
	e, err := EnvFrom(mapLookup(map[string]string{"ARGOCD_ENV_PLUGIN_TEST_VAR": "from-lookup"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := e.Vars["PLUGIN_TEST_VAR"]; got != "from-lookup" {
		t.Errorf("Vars[PLUGIN_TEST_VAR] = %q, want the lookup's value", got)
	}
}

func TestParseParameters(t *testing.T) {
	s := func(name, v string) Parameter { return Parameter{Name: name, Kind: KindString, String: v} }
	cases := []struct {
		name    string
		raw     string
		want    Parameters
		wantErr []string
	}{
		{name: "absent", raw: "", want: nil},
		{name: "blank", raw: "  \n", want: nil},
		{name: "null", raw: "null", want: nil},
		{name: "empty array", raw: "[]", want: Parameters{}},
		{name: "argo cd format", raw: `[{"name":"image-list","string":"web=ghcr.io/org/web:~1.2"},{"array":["a"],"name":"x"},{"map":{"k":"v"},"name":"y"}]`,
			want: Parameters{
				s("image-list", "web=ghcr.io/org/web:~1.2"),
				{Name: "x", Kind: KindArray, Array: []string{"a"}},
				{Name: "y", Kind: KindMap, Map: map[string]string{"k": "v"}},
			}},
		{name: "empty string value", raw: `[{"name":"a","string":""}]`, want: Parameters{s("a", "")}},
		{name: "empty array and map", raw: `[{"array":[],"name":"a"},{"map":{},"name":"b"}]`,
			want: Parameters{{Name: "a", Kind: KindArray, Array: []string{}}, {Name: "b", Kind: KindMap, Map: map[string]string{}}}},
		{name: "null array and map (older Argo CD)", raw: `[{"array":null,"name":"a"},{"map":null,"name":"b"}]`,
			want: Parameters{{Name: "a", Kind: KindArray, Array: []string{}}, {Name: "b", Kind: KindMap, Map: map[string]string{}}}},
		{name: "malformed", raw: `[{"name":"a",}]`, wantErr: []string{"ARGOCD_APP_PARAMETERS: malformed JSON", "accepted:"}},
		{name: "not an array", raw: `{"name":"a","string":"b"}`, wantErr: []string{"ARGOCD_APP_PARAMETERS: malformed JSON", "accepted: a JSON array"}},
		{name: "trailing data", raw: `[] []`, wantErr: []string{"ARGOCD_APP_PARAMETERS: malformed JSON: data after the array"}},
		{name: "no name", raw: `[{"string":"a"}]`, wantErr: []string{"ARGOCD_APP_PARAMETERS: entry 0 has no name", `accepted: a JSON array of {"name": NAME`}},
		{name: "empty name", raw: `[{"name":"","string":"a"}]`, wantErr: []string{"entry 0 has an empty name"}},
		{name: "null name", raw: `[{"name":null,"string":"a"}]`, wantErr: []string{"entry 0: name is not a string"}},
		{name: "numeric name", raw: `[{"name":1,"string":"a"}]`, wantErr: []string{"entry 0: name is not a string"}},
		{name: "null entry", raw: `[null]`, wantErr: []string{"entry 0 is null"}},
		{name: "no value", raw: `[{"name":"a"}]`, wantErr: []string{`entry 0 ("a") has no value`, "exactly one of"}},
		{name: "two values", raw: `[{"array":["x"],"name":"a","string":"x"}]`, wantErr: []string{`ARGOCD_APP_PARAMETERS: entry 0 ("a") has 2 values (array, string)`, "exactly one of"}},
		{name: "three values", raw: `[{"array":[],"map":{},"name":"a","string":""}]`, wantErr: []string{`has 3 values (array, map, string)`}},
		{name: "duplicate names", raw: `[{"name":"a","string":"1"},{"name":"b","string":"2"},{"map":{},"name":"a"}]`,
			wantErr: []string{`ARGOCD_APP_PARAMETERS: entries 0 and 2 both have name "a"`, "unique names"}},
		{name: "unknown key", raw: `[{"name":"a","strng":"1"}]`, wantErr: []string{`entry 0 ("a") has unknown key "strng"`}},
		{name: "string not a string", raw: `[{"name":"a","string":1}]`, wantErr: []string{`entry 0 ("a"): string is not a JSON string`}},
		{name: "null string", raw: `[{"name":"a","string":null}]`, wantErr: []string{`entry 0 ("a"): string is null`}},
		{name: "array of numbers", raw: `[{"array":[1],"name":"a"}]`, wantErr: []string{`entry 0 ("a"): array is not a list of strings`}},
		{name: "map of lists", raw: `[{"map":{"k":[]},"name":"a"}]`, wantErr: []string{`entry 0 ("a"): map is not an object of strings`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseParameters(tc.raw)
			if tc.wantErr != nil {
				assertErr(t, err, tc.wantErr...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %#v\nwant %#v", got, tc.want)
			}
		})
	}
}

func TestParametersGetNamesValues(t *testing.T) {
	ps := Parameters{
		{Name: "b", Kind: KindArray, Array: []string{"1", "2"}},
		{Name: "a", Kind: KindString, String: "x"},
		{Name: "c", Kind: KindMap, Map: map[string]string{"k": "v"}},
	}
	if p, ok := ps.Get("a"); !ok || p.String != "x" {
		t.Errorf("Get(a) = %+v, %v", p, ok)
	}
	if _, ok := ps.Get("z"); ok {
		t.Error("Get(z) found")
	}
	if got := ps.Names(); !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Errorf("Names() = %q", got)
	}
	if got := ps[0].Values(); !reflect.DeepEqual(got, []string{"1", "2"}) {
		t.Errorf("Values() = %q", got)
	}
	if got := ps[1].Values(); !reflect.DeepEqual(got, []string{"x"}) {
		t.Errorf("Values() = %q", got)
	}
	if got := ps[2].Values(); got != nil {
		t.Errorf("Values() of a map = %q", got)
	}
}

// assertErr checks that err is non-nil, one line per problem, and contains each want.
func assertErr(t *testing.T, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", want)
	}
	msg := err.Error()
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q\ndoes not contain %q", msg, w)
		}
	}
}

func FuzzParameters(f *testing.F) {
	for _, seed := range []string{
		"", "null", "[]", "{", `[{"name":"a"}]`,
		`[{"name":"image-list","string":"web=ghcr.io/org/web:~1.2"},{"array":["a"],"name":"x"},{"map":{"k":"v"},"name":"y"}]`,
		`[{"array":["web=nginx:>=1.2 <2","api=ghcr.io/o/api"],"name":"image-list"},{"name":"web.update-strategy","string":"latest"},{"array":["linux/amd64"],"name":"platforms"}]`,
		`[{"name":"image-list","string":"a/b=nginx, nginx"},{"name":"a_b.tag-match","string":"regexp:^1"},{"name":"pin-mode","string":"use"},{"map":{"a":"b"},"name":"helm-parameters"}]`,
		`[{"name":"image-list","string":"web=nginx"},{"name":"verify-issuer","string":"https://token.actions.githubusercontent.com"},{"name":"web.verify-identity","string":"regexp:^https://github.com/org/"},{"name":"verify-key","string":"release"}]`,
	} {
		f.Add(seed)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, raw string) {
		ps, err := ParseParameters(raw)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("multi-line error %q", err)
			}
			return
		}
		pol, err := LoadPolicy(dir, ps)
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "parameter ") && !strings.HasPrefix(line, "aliases ") {
					t.Errorf("error line %q names no parameter", line)
				}
			}
			return
		}
		for _, ip := range pol.Images {
			if ip.Policy == nil || ip.Alias == "" || ip.Written == "" {
				t.Errorf("incomplete image policy %+v", ip)
			}
		}
	})
}
