package resolve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPolicySpecCompileErrors(t *testing.T) {
	tests := []struct {
		name      string
		spec      PolicySpec
		field     string
		wantParts []string
	}{
		{"unknown strategy", PolicySpec{Strategy: "fastest"}, "update-strategy", []string{`"fastest"`, "semver (default), newest-build"}},
		{"bad constraint", PolicySpec{Constraint: "~>1..2"}, "constraint", []string{`"~>1..2"`, "semver range"}},
		{"digest without tag", PolicySpec{Strategy: "digest"}, "constraint", []string{"the tag to follow"}},
		{"constraint with numeric", PolicySpec{Strategy: "numeric", Constraint: "1.x"}, "constraint", []string{"allow-tags"}},
		{"bad allow regexp", PolicySpec{AllowTags: "regexp:^(1"}, "allow-tags", []string{`"regexp:^(1"`, "missing closing )"}},
		{"allow without prefix", PolicySpec{AllowTags: "^1.*"}, "allow-tags", []string{"regexp:EXPR, glob:PATTERN or any"}},
		{"bad allow glob", PolicySpec{AllowTags: "glob:[a"}, "allow-tags", []string{"syntax error"}},
		{"bad ignore regexp", PolicySpec{IgnoreTags: []string{"regexp:*"}}, "ignore-tags", []string{"missing argument"}},
		{"bad ignore glob", PolicySpec{IgnoreTags: []string{"ok,[x"}}, "ignore-tags", []string{"syntax error"}},
		{"platform without arch", PolicySpec{Platforms: []string{"linux"}}, "platforms", []string{`"linux"`, "os/arch[/variant]"}},
		{"platform too long", PolicySpec{Platforms: []string{"linux/arm/v7/x"}}, "platforms", []string{`"linux/arm/v7/x"`}},
		{"platform upper case", PolicySpec{Platforms: []string{"Linux/AMD64"}}, "platforms", []string{`"Linux/AMD64"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.spec.Compile()
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Fatalf("Compile() error = %v, want *InputError", err)
			}
			if ie.Field != tt.field || ie.Policy != PolicyField(tt.field) {
				t.Errorf("field = %q, policy field %q, want %q", ie.Field, ie.Policy, tt.field)
			}
			if relabelled := new(InputError); !errors.As(WithField(err, "web.x"), &relabelled) || relabelled.Policy != ie.Policy {
				t.Errorf("WithField lost the policy field: %+v", relabelled)
			}
			for _, part := range tt.wantParts {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("error %q does not contain %q", err, part)
				}
			}
		})
	}
}

func TestParseStrategy(t *testing.T) {
	tests := []struct {
		in      string
		want    Strategy
		warning bool
	}{
		{"", Semver, false}, {"semver", Semver, false}, {"newest-build", NewestBuild, false},
		{"digest", Digest, false}, {"alphabetical", Alphabetical, false}, {"numeric", Numeric, false},
		{"latest", NewestBuild, true}, {"name", Alphabetical, true},
	}
	for _, tt := range tests {
		got, warn, err := ParseStrategy(tt.in)
		if err != nil || got != tt.want || (warn != "") != tt.warning {
			t.Errorf("ParseStrategy(%q) = %q, %q, %v; want %q, warning %v", tt.in, got, warn, err, tt.want, tt.warning)
		}
	}
}

func TestTagFilters(t *testing.T) {
	tests := []struct {
		allow  string
		ignore []string
		tag    string
		want   bool
	}{
		{"", nil, "anything", true},
		{"any", nil, "anything", true},
		{"regexp:^1\\.", nil, "1.2.3", true},
		{"regexp:^1\\.", nil, "2.0.0", false},
		{"glob:1.*", nil, "1.2.3", true},
		{"glob:1.*", nil, "v1.2", false},
		{"", []string{"*-rc*, latest"}, "1.0-rc1", false},
		{"", []string{"*-rc*, latest"}, "latest", false},
		{"", []string{"*-rc*, latest"}, "1.0", true},
		{"", []string{"regexp:^(dev|test)-"}, "dev-42", false},
		{"", []string{"regexp:^(dev|test)-"}, "prod-42", true},
		{"", []string{"glob:nightly*"}, "nightly-1", false},
	}
	for _, tt := range tests {
		p := PolicySpec{AllowTags: tt.allow, IgnoreTags: tt.ignore}.MustCompile()
		if got, _ := p.allowed(tt.tag); got != tt.want {
			t.Errorf("allow %q ignore %q: allowed(%q) = %v, want %v", tt.allow, tt.ignore, tt.tag, got, tt.want)
		}
	}
}

func TestStrategyOrder(t *testing.T) {
	noMeta := func(context.Context, []string) (map[string]*TagInfo, error) {
		t.Fatal("strategy asked for metadata it does not need")
		return nil, nil
	}
	tests := []struct {
		name string
		spec PolicySpec
		tags []string
		want []string
	}{
		{"semver highest first, v prefix, no prereleases",
			PolicySpec{}, []string{"1.2.0", "v1.10.0", "1.9.9", "2.0.0-rc.1", "latest", "1.3"},
			[]string{"v1.10.0", "1.9.9", "1.3", "1.2.0"}},
		{"semver constraint",
			PolicySpec{Constraint: "~1.2"}, []string{"1.2.0", "1.2.7", "1.3.0", "1.1.9"},
			[]string{"1.2.7", "1.2.0"}},
		{"semver prerelease only when asked",
			PolicySpec{Constraint: ">=2.0.0-0"}, []string{"1.9.0", "2.0.0-rc.1", "2.0.0-rc.2", "2.0.0"},
			[]string{"2.0.0", "2.0.0-rc.2", "2.0.0-rc.1"}},
		{"semver equal versions break ties by tag string",
			PolicySpec{}, []string{"1.2", "v1.2.0", "1.2.0"},
			[]string{"v1.2.0", "1.2.0", "1.2"}},
		{"alphabetical is byte order",
			PolicySpec{Strategy: "alphabetical"}, []string{"b", "a", "B", "10", "9"},
			[]string{"b", "a", "B", "9", "10"}},
		{"numeric is numeric, not lexical",
			PolicySpec{Strategy: "numeric"}, []string{"9", "10", "100", "x1", "-3", "1.5", "007", "7"},
			[]string{"100", "10", "9", "7", "007"}},
		{"digest follows the constraint tag",
			PolicySpec{Strategy: "digest", Constraint: "stable"}, []string{"stable", "latest"},
			[]string{"stable"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.spec.MustCompile()
			got, _, err := p.order.order(context.Background(), tt.tags, noMeta)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("order = %v, want %v", got, tt.want)
			}
		})
	}
}

func FuzzPolicySpec(f *testing.F) {
	f.Add("semver", "~1.2", "regexp:^1", "*-rc*", "linux/arm64")
	f.Add("digest", "latest", "glob:*", "regexp:(", "linux/arm/v7")
	f.Add("newest-build", "", "any", "", "linux/amd64")
	f.Add("latest", "", "regexp:^v", "*-dirty", "")
	f.Add("numeric", "", "", "", "")
	f.Add("alphabetical", "", "glob:[", "", "")
	f.Fuzz(func(t *testing.T, strategy, constraint, allow, ignore, platforms string) {
		p, err := PolicySpec{Strategy: strategy, Constraint: constraint, AllowTags: allow,
			IgnoreTags: []string{ignore}, Platforms: []string{platforms}}.Compile()
		if err != nil {
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Fatalf("error is not an *InputError: %v", err)
			}
			return
		}
		p.allowed(constraint)
		if p.Strategy() == "" || p.order == nil {
			t.Fatalf("compiled policy without a strategy: %+v", p)
		}
		// Strategies that order by build time ask for metadata: give them some.
		meta := func(_ context.Context, tags []string) (map[string]*TagInfo, error) {
			out := map[string]*TagInfo{}
			for i, tag := range tags {
				out[tag] = &TagInfo{Created: time.Unix(int64(i), 0)}
			}
			return out, nil
		}
		if _, _, err := p.order.order(context.Background(), []string{constraint, allow, "1.0.0"}, meta); err != nil {
			t.Fatalf("order: %v", err)
		}
	})
}

func TestPlatformJSONRoundTrip(t *testing.T) {
	in := struct {
		Platforms []Platform `json:"platforms"`
	}{[]Platform{{OS: "linux", Arch: "arm", Variant: "v7"}, {OS: "linux", Arch: "amd64"}}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"platforms":["linux/arm/v7","linux/amd64"]}`; string(b) != want {
		t.Errorf("JSON = %s, want %s", b, want)
	}
	out := in
	out.Platforms = nil
	if err := json.Unmarshal(b, &out); err != nil || !slices.Equal(out.Platforms, in.Platforms) {
		t.Errorf("round trip = %v, %v; want %v", out.Platforms, err, in.Platforms)
	}
	if err := json.Unmarshal([]byte(`{"platforms":["linux"]}`), &out); err == nil || !strings.Contains(err.Error(), "os/arch[/variant]") {
		t.Errorf("bad platform decoded without a clear error: %v", err)
	}
}

// The digest strategy's tag goes into the manifest URL path: anything but a tag
// is bad input, named with the field, the value (quoted, truncated when long) and
// what is accepted, before anything is sent.
func TestDigestConstraintIsATag(t *testing.T) {
	long := strings.Repeat("a", 129)
	for _, bad := range []string{"../../x", "a/b", "%2e%2e", "..", ".hidden", "-x", "a b", "a\nb", "x?y=1", "x#f", long, strings.Repeat("é", 300)} {
		_, err := PolicySpec{Strategy: "digest", Constraint: bad}.Compile()
		var ie *InputError
		if !errors.As(err, &ie) || ie.Policy != FieldConstraint || ie.Field != "constraint" {
			t.Errorf("%q: err = %v, want an *InputError for the constraint", bad, err)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, "constraint: ") || !strings.Contains(msg, "accepted: the tag to follow") || !strings.Contains(msg, "up to 127") {
			t.Errorf("%q: message %q does not name the field and what is accepted", bad, msg)
		}
		if strings.ContainsAny(msg, "\n\r") || len(msg) > 500 {
			t.Errorf("%q: message not one bounded line (%d bytes): %q", bad, len(msg), msg)
		}
		if len(bad) < 100 && !strings.Contains(msg, strings.Trim(fmt.Sprintf("%q", bad), `"`)) {
			t.Errorf("%q: message %q does not quote the value", bad, msg)
		}
	}
	if _, err := (PolicySpec{Strategy: "digest", Constraint: long}).Compile(); err == nil ||
		!strings.Contains(err.Error(), "(129 characters)") || strings.Contains(err.Error(), long) {
		t.Errorf("a 129-character tag: %v, want it refused, truncated and its length said", err)
	}
	if _, err := (PolicySpec{Strategy: "digest", Constraint: ""}).Compile(); err == nil {
		t.Error("empty tag accepted")
	}
	for _, good := range []string{"latest", "v1.2.3", "1.0_rc-1", "_x", strings.Repeat("a", 128)} {
		if _, err := (PolicySpec{Strategy: "digest", Constraint: good}).Compile(); err != nil {
			t.Errorf("%q: %v", good, err)
		}
	}
}

func TestCheckReference(t *testing.T) {
	sha := "sha256:" + strings.Repeat("ab", 32)
	for s, want := range map[string]bool{
		"latest": true, sha: true, "sha512:" + strings.Repeat("0", 128): true,
		"sha256:" + strings.Repeat("A", 64): false, "sha256:abc": false, "sha256:" + strings.Repeat("ab", 32) + "/..": false,
		"../x": false, "": false, "a/b": false, strings.Repeat("a", 129): false,
	} {
		if got := CheckReference(s) == nil; got != want {
			t.Errorf("CheckReference(%q) accepted %v, want %v", s, got, want)
		}
	}
	if CheckDigest("latest") == nil || CheckTag(sha) == nil {
		t.Error("a tag taken for a digest or the reverse")
	}
}

// Image references from the image list and from manifests are parsed strictly:
// no path tricks reach a repository, a tag or a digest.
func TestImageReferencesRefusePathTricks(t *testing.T) {
	for _, s := range []string{
		"registry.test/../../x", "registry.test/a/../b", "registry.test/a/%2e%2e/b", "registry.test/a//b",
		"registry.test/a/./b", "registry.test/A/b", "registry.test/a?x=1", "registry.test/a#f", "registry.test/a b",
		"registry.test/app@sha256:../../x", "../../x",
	} {
		var ie *InputError
		if _, _, _, err := ParseImageSpec(s); !errors.As(err, &ie) {
			t.Errorf("ParseImageSpec(%q): %v, want an *InputError", s, err)
		}
		if img, err := ParseImage(s + ":1.0"); !errors.As(err, &ie) {
			t.Errorf("ParseImage(%q): %+v, %v, want an *InputError", s+":1.0", img, err)
		}
	}
	// A constraint holding a path is no tag: refused by the digest strategy, and
	// no semver range either.
	_, _, constraint, err := ParseImageSpec("registry.test/app:..%2f..%2fx")
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []string{"digest", "semver"} {
		if _, err := (PolicySpec{Strategy: st, Constraint: constraint}).Compile(); err == nil {
			t.Errorf("%s: constraint %q accepted", st, constraint)
		}
	}
	for _, s := range []string{"registry.test/app:../x", "registry.test/app:a/b", "registry.test/app@sha256:abc", "registry.test/app:%2e%2e"} {
		if img, err := ParseImage(s); err == nil {
			t.Errorf("ParseImage(%q) = %+v, want an error", s, img)
		}
	}
}

// The resolve command reads argocd-image-updater's spellings of the filter
// functions as the plugin does (resolve.ParseAllowTags folds them).
func TestFilterFunctionsAnyCase(t *testing.T) {
	allow, err := ParseAllowTags(`RegExp:^1\.`)
	if err != nil || !allow.Match("1.2") || allow.Match("2.0") {
		t.Errorf("RegExp: %v, %v", allow, err)
	}
	if m, err := ParseAllowTags("ANY"); err != nil || !m.Match("dev") {
		t.Errorf("ANY: %v, %v", m, err)
	}
	ignore, err := ParseIgnoreTags("GLOB:*-rc*, latest")
	if err != nil || len(ignore) != 2 || !ignore[0].Match("1.0-rc1") || !ignore[1].Match("latest") {
		t.Errorf("GLOB: %v, %v", ignore, err)
	}
}
