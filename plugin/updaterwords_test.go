package plugin

import (
	"strings"
	"testing"
)

// argocd-image-updater's spellings of allow-tags and ignore-tags functions are read
// as it reads them (case-insensitively), and filter tags the same way.
func TestUpdaterFilterSpellings(t *testing.T) {
	tests := []struct {
		name    string
		params  Parameters
		allowed []string
		refused []string
	}{
		{"ANY", Parameters{ps("web.allow-tags", "ANY")}, []string{"1.0", "dev"}, nil},
		{"Any, application-wide", Parameters{ps("allow-tags", "Any")}, []string{"1.0", "dev"}, nil},
		{"RegExp:", Parameters{ps("web.allow-tags", `RegExp:^1\.`)}, []string{"1.0", "1.2"}, []string{"2.0", "dev"}},
		{"Regexp: keeps the expression's case", Parameters{ps("web.allow-tags", `Regexp:^V1`)}, []string{"V1.0"}, []string{"v1.0"}},
		{"REGEXP:", Parameters{ps("web.allow-tags", `REGEXP:^[0-9]+$`)}, []string{"12"}, []string{"12a"}},
		{"Glob:", Parameters{ps("web.allow-tags", "Glob:1.*")}, []string{"1.0"}, []string{"2.0"}},
		{"ignore-tags Regexp:", Parameters{ps("web.ignore-tags", "Regexp:^dev-(a|b)$")}, []string{"dev-c", "1.0"}, []string{"dev-a", "dev-b"}},
		{"ignore-tags Glob: items", Parameters{pa("web.ignore-tags", "GLOB:*-rc*, latest", "Glob:nightly*")}, []string{"1.0"}, []string{"1.0-rc1", "latest", "nightly-3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			params := append(Parameters{ps("image-list", "web=ghcr.io/org/web")}, tt.params...)
			pol, err := buildPolicy(nil, params)
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			web := img(t, pol, "web")
			allowed := func(tag string) bool {
				if !web.Policy.AllowTags().Match(tag) {
					return false
				}
				for _, m := range web.Policy.IgnoreTags() {
					if m.Match(tag) {
						return false
					}
				}
				return true
			}
			for _, tag := range tt.allowed {
				if !allowed(tag) {
					t.Errorf("tag %q refused", tag)
				}
			}
			for _, tag := range tt.refused {
				if allowed(tag) {
					t.Errorf("tag %q allowed", tag)
				}
			}
		})
	}
}

func TestUpdaterFilterSpellingsStillChecked(t *testing.T) {
	for _, p := range []Parameter{ps("web.allow-tags", "RegExp:("), ps("web.allow-tags", "Any:x"), pa("web.ignore-tags", "Regexp:(")} {
		_, err := buildPolicy(nil, Parameters{ps("image-list", "web=nginx"), p})
		if err == nil || !strings.Contains(err.Error(), `parameter "`+p.Name+`"`) || !strings.Contains(err.Error(), "accepted:") {
			t.Errorf("%s=%v: err = %v, want an error naming the parameter and the accepted forms", p.Name, p.Values(), err)
		}
	}
}

// An image-list tag under a strategy that does not use one is ignored with a
// warning, as argocd-image-updater ignores it; where a strategy uses it, it is
// kept; in the policy file it stays an error.
func TestImageListTagIgnoredByStrategy(t *testing.T) {
	tests := []struct {
		name       string
		file       string
		params     Parameters
		constraint string
		warning    string // "" for none
		err        string
	}{
		{name: "newest-build", params: Parameters{ps("image-list", "app=org/app:latest"), ps("app.update-strategy", "newest-build")},
			warning: `parameter "image-list" (app constraint): "latest" is ignored with update-strategy newest-build (from parameter "app.update-strategy"), as argocd-image-updater ignores it; remove ":latest" from the entry`},
		{name: "old name latest, application-wide", params: Parameters{ps("image-list", "app=org/app:1.0"), ps("update-strategy", "latest")},
			warning: `"1.0" is ignored with update-strategy newest-build (from parameter "update-strategy" (all images))`},
		{name: "alphabetical", params: Parameters{ps("image-list", "app=org/app:main"), ps("app.update-strategy", "alphabetical")},
			warning: `"main" is ignored with update-strategy alphabetical`},
		{name: "name", params: Parameters{ps("image-list", "app=org/app:main"), ps("app.update-strategy", "name")},
			warning: `"main" is ignored with update-strategy alphabetical`},
		{name: "numeric", params: Parameters{ps("image-list", "app=org/app:1"), ps("app.update-strategy", "numeric")},
			warning: `"1" is ignored with update-strategy numeric`},
		{name: "digest uses it", params: Parameters{ps("image-list", "app=org/app:stable"), ps("app.update-strategy", "digest")}, constraint: "stable"},
		{name: "semver uses it", params: Parameters{ps("image-list", "app=org/app:~1.2")}, constraint: "~1.2"},
		{name: "policy file constraint stays an error", file: "images:\n  app:\n    image: org/app\n    strategy: newest-build\n    constraint: latest\n",
			err: `no constraint with update-strategy newest-build`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var pf *policyFile
			if tt.file != "" {
				var err error
				if pf, err = parsePolicyFile([]byte(tt.file)); err != nil {
					t.Fatal(err)
				}
			}
			pol, err := buildPolicy(pf, tt.params)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			app := img(t, pol, "app")
			if app.Spec.Constraint != tt.constraint || app.Policy.Constraint() != tt.constraint {
				t.Errorf("constraint %q (policy %q), want %q", app.Spec.Constraint, app.Policy.Constraint(), tt.constraint)
			}
			got := strings.Join(pol.Warnings, "\n")
			if tt.warning == "" && strings.Contains(got, "is ignored") {
				t.Errorf("warnings %q, want none about the tag", got)
			}
			if tt.warning != "" && !strings.Contains(got, tt.warning) {
				t.Errorf("warnings %q, want %q", got, tt.warning)
			}
			if _, ok := app.Source[SourceConstraint]; ok != (tt.constraint != "") {
				t.Errorf("source %v: constraint listed = %t", app.Source, ok)
			}
		})
	}
}
