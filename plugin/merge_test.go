package plugin

import (
	"reflect"
	"strings"
	"testing"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

func TestLoadPolicyParameters(t *testing.T) {
	cases := []struct {
		name   string
		file   string
		params Parameters
		check  func(t *testing.T, pol *AppPolicy)
	}{
		{
			name:   "image-list string, bare entries get derived aliases",
			params: Parameters{ps("image-list", "web=ghcr.io/org/web:~1.2, nginx:>=1.25, quay.io/org/my.tool")},
			check: func(t *testing.T, pol *AppPolicy) {
				var aliases []string
				for _, ip := range pol.Images {
					aliases = append(aliases, ip.Alias)
				}
				if !reflect.DeepEqual(aliases, []string{"my_tool", "nginx", "web"}) {
					t.Errorf("aliases %q", aliases)
				}
				if c := img(t, pol, "nginx").Spec.Constraint; c != ">=1.25" {
					t.Errorf("nginx constraint %q", c)
				}
				web := img(t, pol, "web")
				if web.Written != "ghcr.io/org/web" || web.Spec.Constraint != "~1.2" ||
					web.Source["image"] != `parameter "image-list"` || web.Source["constraint"] != `parameter "image-list"` {
					t.Errorf("web = %+v", web)
				}
			},
		},
		{
			name:   "image-list array keeps commas in constraints",
			params: Parameters{pa("image-list", "web=ghcr.io/org/web:>=1.2, <2", "", "api=ghcr.io/org/api")},
			check: func(t *testing.T, pol *AppPolicy) {
				if c := img(t, pol, "web").Spec.Constraint; c != ">=1.2, <2" {
					t.Errorf("constraint %q", c)
				}
				img(t, pol, "api")
			},
		},
		{
			name:   "every per-alias key, string forms",
			params: Parameters{ps("image-list", "web=ghcr.io/org/web"), ps("web.update-strategy", "newest-build"), ps("web.allow-tags", "glob:v*"), ps("web.ignore-tags", "*-rc*,*-dirty"), ps("web.platforms", "linux/amd64,linux/arm64"), ps("web.pin-digest", "TRUE")},
			check: func(t *testing.T, pol *AppPolicy) {
				web := img(t, pol, "web")
				want := resolve.PolicySpec{Strategy: "newest-build", AllowTags: "glob:v*", IgnoreTags: []string{"*-rc*,*-dirty"}, Platforms: []string{"linux/amd64,linux/arm64"}, PinDigest: true}
				if !reflect.DeepEqual(web.Spec, want) {
					t.Errorf("spec %+v\nwant %+v", web.Spec, want)
				}
				if len(web.Policy.IgnoreTags()) != 2 || len(web.Policy.Platforms()) != 2 {
					t.Errorf("policy %+v", web.Policy)
				}
				if web.Source["strategy"] != `parameter "web.update-strategy"` || web.Source["pinDigest"] != `parameter "web.pin-digest"` {
					t.Errorf("source %v", web.Source)
				}
			},
		},
		{
			name:   "array forms",
			params: Parameters{pa("image-list", "web=ghcr.io/org/web"), pa("web.ignore-tags", "*-rc*", "regexp:^dev-(a|b)$"), pa("web.platforms", "linux/amd64", "linux/arm/v7"), ps("web.pin-digest", "false")},
			check: func(t *testing.T, pol *AppPolicy) {
				web := img(t, pol, "web")
				if len(web.Policy.IgnoreTags()) != 2 || resolve.PlatformStrings(web.Policy.Platforms())[1] != "linux/arm/v7" || web.Spec.PinDigest {
					t.Errorf("policy %+v", web.Policy)
				}
			},
		},
		{
			name:   "file beats application-wide parameter, which fills the rest",
			file:   "images:\n  web:\n    image: nginx\n    strategy: alphabetical\n  api:\n    image: ghcr.io/org/api\n",
			params: Parameters{ps("update-strategy", "numeric"), pa("platforms", "linux/arm64"), ps("pin-digest", "true")},
			check: func(t *testing.T, pol *AppPolicy) {
				web, api := img(t, pol, "web"), img(t, pol, "api")
				if web.Policy.Strategy() != resolve.Alphabetical || api.Policy.Strategy() != resolve.Numeric {
					t.Errorf("strategies %q %q", web.Policy.Strategy(), api.Policy.Strategy())
				}
				if !web.Spec.PinDigest || !api.Spec.PinDigest || len(web.Policy.Platforms()) != 1 {
					t.Errorf("web %+v", web.Spec)
				}
				if api.Source["strategy"] != `parameter "update-strategy" (all images)` {
					t.Errorf("source %v", api.Source)
				}
			},
		},
		{
			name:   "image-list entry replaces the file's image and constraint; other file fields and aliases stay",
			file:   fullFile,
			params: Parameters{ps("image-list", "web=registry.example.com/team/web-next, extra=ghcr.io/org/extra:^3")},
			check: func(t *testing.T, pol *AppPolicy) {
				if len(pol.Images) != 3 {
					t.Fatalf("images %+v", pol.Images)
				}
				web := img(t, pol, "web")
				if web.Written != "registry.example.com/team/web-next" || web.Spec.Constraint != "" || web.Spec.AllowTags != `regexp:^1\.` {
					t.Errorf("web %+v", web)
				}
				if web.Source["constraint"] != `parameter "image-list"` || web.Source["allowTags"] != "file .argocd-image-resolver.yaml key images.web.allowTags" {
					t.Errorf("source %v", web.Source)
				}
				if img(t, pol, "worker").Written != "ghcr.io/org/worker" {
					t.Error("worker changed")
				}
			},
		},
		{
			name:   "file alias without image gets it from image-list",
			file:   "images:\n  web:\n    strategy: newest-build\n",
			params: Parameters{ps("image-list", "web=ghcr.io/org/web")},
			check: func(t *testing.T, pol *AppPolicy) {
				if web := img(t, pol, "web"); web.Policy.Strategy() != resolve.NewestBuild || web.Written != "ghcr.io/org/web" {
					t.Errorf("web %+v", web)
				}
			},
		},
		{
			name:   "slash alias, addressed with _ or /",
			params: Parameters{ps("image-list", "argoproj/argocd=quay.io/argoproj/argocd"), ps("argoproj_argocd.update-strategy", "newest-build"), ps("argoproj/argocd.allow-tags", "regexp:^v2")},
			check: func(t *testing.T, pol *AppPolicy) {
				ip := img(t, pol, "argoproj_argocd")
				if ip.Policy.Strategy() != resolve.NewestBuild || ip.Spec.AllowTags != "regexp:^v2" {
					t.Errorf("%+v", ip.Spec)
				}
			},
		},
		{
			name:   "deprecated names warn",
			params: Parameters{ps("image-list", "web=nginx, api=ghcr.io/org/api"), ps("web.update-strategy", "latest"), ps("api.tag-match", "regexp:^v1")},
			check: func(t *testing.T, pol *AppPolicy) {
				if img(t, pol, "web").Policy.Strategy() != resolve.NewestBuild || img(t, pol, "api").Spec.AllowTags != "regexp:^v1" {
					t.Errorf("%+v", pol.Images)
				}
				want := []string{
					`parameter "api.tag-match": tag-match is deprecated; use "api.allow-tags"`,
					`parameter "web.update-strategy": update-strategy "latest" is deprecated; use "newest-build"`,
				}
				if !reflect.DeepEqual(pol.Warnings, want) {
					t.Errorf("warnings %q", pol.Warnings)
				}
			},
		},
		{
			name:   "same repository, equal policies",
			params: Parameters{ps("image-list", "a=nginx:~1.25, b=docker.io/library/nginx:~1.25")},
			check: func(t *testing.T, pol *AppPolicy) {
				if len(pol.Images) != 2 {
					t.Fatalf("images %+v", pol.Images)
				}
				repo := img(t, pol, "b").Repo
				if got := pol.ForRepo(repo); got == nil || got.Alias != "a" {
					t.Errorf("ForRepo = %+v", got)
				}
			},
		},
		{
			name: "global and helm parameters",
			params: Parameters{
				ps("pin-mode", "off"), pa("values-files", "values.yaml", " ", "values-prod.yaml"),
				pm("helm-parameters", map[string]string{"image.tag": "1.0"}), ps("values", "replicas: 2\n"),
			},
			check: func(t *testing.T, pol *AppPolicy) {
				want := HelmParams{ValuesFiles: []string{"values.yaml", "values-prod.yaml"}, Parameters: map[string]string{"image.tag": "1.0"}, Values: "replicas: 2\n"}
				if pol.PinMode != PinOff || !reflect.DeepEqual(pol.Helm, want) {
					t.Errorf("pin %q helm %+v", pol.PinMode, pol.Helm)
				}
			},
		},
		{
			name:   "pin settings",
			params: Parameters{ps("image-list", "web=nginx"), ps("pin-mode", "use"), ps("pin-target", "helmvalues:values-prod.yaml"), ps("pin-branch", "image-pins"), ps("web.helm.image-tag", "web.image.tag")},
			check: func(t *testing.T, pol *AppPolicy) {
				if pol.PinMode != PinUse || pol.Pins.Target.String() != "helmvalues:values-prod.yaml" || pol.Pins.Target.File() != "values-prod.yaml" || pol.Pins.Branch != "image-pins" {
					t.Errorf("pins %q %v %q", pol.PinMode, pol.Pins.Target, pol.Pins.Branch)
				}
			},
		},
		{
			name:   "pin-mode write defaults to the pins file",
			params: Parameters{ps("pin-mode", "write")},
			check: func(t *testing.T, pol *AppPolicy) {
				if pol.PinMode != PinWrite || pol.Pins.Target.File() != ".argocd-image-resolver.pins.yaml" || pol.Pins.Branch != "" {
					t.Errorf("pins %q %v %q", pol.PinMode, pol.Pins.Target, pol.Pins.Branch)
				}
			},
		},
		{
			name:   "refresh off opts the app out",
			params: Parameters{ps("refresh", " off ")},
			check: func(t *testing.T, pol *AppPolicy) {
				if pol.Refresh != RefreshOff {
					t.Errorf("refresh %q, want off", pol.Refresh)
				}
			},
		},
		{
			name:   "refresh empty or hard follows the sidecar",
			params: Parameters{ps("refresh", "")},
			check: func(t *testing.T, pol *AppPolicy) {
				if pol.Refresh != RefreshHard {
					t.Errorf("refresh %q, want hard", pol.Refresh)
				}
			},
		},
		{
			name:   "values-files as a comma-separated string",
			params: Parameters{ps("values-files", "a.yaml, b.yaml")},
			check: func(t *testing.T, pol *AppPolicy) {
				if pol.PinMode != PinOff || !reflect.DeepEqual(pol.Helm.ValuesFiles, []string{"a.yaml", "b.yaml"}) {
					t.Errorf("%+v", pol)
				}
			},
		},
		{
			name:   "empty pin-mode is off; empty image-list is none",
			params: Parameters{ps("pin-mode", ""), ps("image-list", " , ")},
			check: func(t *testing.T, pol *AppPolicy) {
				if pol.PinMode != PinOff || len(pol.Images) != 0 {
					t.Errorf("%+v", pol)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pol, err := LoadPolicy(appDir(t, tc.file), tc.params)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, pol)
		})
	}
}

func TestLoadPolicyAliasParameterBeatsFile(t *testing.T) {
	pol, err := LoadPolicy(appDir(t, fullFile), Parameters{ps("web.update-strategy", "alphabetical"), ps("web.allow-tags", "any"), ps("update-strategy", "numeric")})
	if err == nil {
		t.Fatalf("semver constraint from the file with alphabetical should fail, got %+v", pol)
	}
	assertErr(t, err, `file .argocd-image-resolver.yaml key images.web.constraint (line 5), with update-strategy "alphabetical" from parameter "web.update-strategy": invalid value "~1.2"`, "accepted: no constraint with update-strategy alphabetical")

	pol, err = LoadPolicy(appDir(t, fullFile), Parameters{ps("image-list", "web=registry.example.com/team/web"), ps("web.update-strategy", "alphabetical"), ps("web.allow-tags", "any")})
	if err != nil {
		t.Fatal(err)
	}
	web := img(t, pol, "web")
	if web.Policy.Strategy() != resolve.Alphabetical || web.Spec.AllowTags != "any" || web.Source["strategy"] != `parameter "web.update-strategy"` ||
		web.Source["ignoreTags"] != "file .argocd-image-resolver.yaml key images.web.ignoreTags" {
		t.Errorf("web %+v", web)
	}
	if img(t, pol, "worker").Policy.Strategy() != resolve.NewestBuild {
		t.Error("worker strategy changed")
	}
}

func TestLoadPolicyParameterErrors(t *testing.T) {
	cases := []struct {
		name   string
		file   string
		params Parameters
		want   []string
		lines  int // number of problems reported; 0: do not check
	}{
		{name: "unknown parameter", params: Parameters{ps("image-lst", "web=nginx")},
			want: []string{`parameter "image-lst": unknown parameter; did you mean "image-list"?`, "accepted: image-list, pin-mode, pin-target, pin-branch, pin-push, pin-pr-group, refresh, values-files, helm-parameters, values", "<alias>.update-strategy"}},
		{name: "unknown alias", params: Parameters{ps("image-list", "web=nginx, worker=ghcr.io/o/w"), ps("wbe.update-strategy", "semver")},
			want: []string{`parameter "wbe.update-strategy": unknown alias "wbe"; did you mean "web"?`, "aliases: web, worker", "declare aliases in parameter image-list"}},
		{name: "alias parameter with no aliases", params: Parameters{ps("web.update-strategy", "semver")},
			want: []string{`parameter "web.update-strategy": unknown alias "web"`, "no aliases are declared"}},
		{name: "unknown key", params: Parameters{ps("image-list", "web=nginx"), ps("web.update-stratgy", "semver")},
			want: []string{`parameter "web.update-stratgy": unknown key "update-stratgy"; did you mean "update-strategy"?`, "accepted: <alias>.update-strategy, <alias>.allow-tags"}},
		{name: "bad strategy", params: Parameters{ps("image-list", "web=nginx"), ps("web.update-strategy", "fastest")},
			want: []string{`parameter "web.update-strategy": invalid value "fastest" (accepted: semver (default), newest-build, digest, alphabetical, numeric (old names: latest, name))`}},
		{name: "bad application-wide strategy", params: Parameters{ps("update-strategy", "fastest")},
			want: []string{`parameter "update-strategy" (all images): invalid value "fastest" (accepted: semver (default), newest-build`}},
		{name: "bad allow-tags", params: Parameters{ps("image-list", "web=nginx"), ps("web.allow-tags", "v1.*")},
			want: []string{`parameter "web.allow-tags": invalid value "v1.*" (accepted: regexp:EXPR, glob:PATTERN or any)`}},
		{name: "bad allow-tags regexp", params: Parameters{ps("image-list", "web=nginx"), ps("web.allow-tags", "regexp:(")},
			want: []string{`parameter "web.allow-tags": invalid value "regexp:(": error parsing regexp`, "accepted: regexp:EXPR"}},
		{name: "bad ignore-tags", params: Parameters{ps("image-list", "web=nginx"), pa("web.ignore-tags", "ok", "[")},
			want: []string{`parameter "web.ignore-tags": invalid value "["`, "accepted: globs"}},
		{name: "bad platforms", params: Parameters{ps("image-list", "web=nginx"), ps("web.platforms", "linux/amd64,arm64")},
			want: []string{`parameter "web.platforms": invalid value "arm64" (accepted: os/arch[/variant]`}},
		{name: "bad pin-digest", params: Parameters{ps("image-list", "web=nginx"), ps("web.pin-digest", "yes")},
			want: []string{`parameter "web.pin-digest": invalid value "yes" (accepted: true or false)`}},
		{name: "bad pin-mode", params: Parameters{ps("pin-mode", "on")},
			want: []string{`parameter "pin-mode": invalid value "on" (accepted: off (resolve at every render), write`}},
		{name: "bad pin-target", params: Parameters{ps("pin-mode", "use"), ps("pin-target", "git")},
			want: []string{`parameter "pin-target": invalid value "git" (accepted: pins`}},
		{name: "pin-target outside the app", params: Parameters{ps("pin-mode", "write"), ps("pin-target", "helmvalues:../values.yaml")},
			want: []string{`parameter "pin-target"`, "../values.yaml"}},
		{name: "bad pin-branch", params: Parameters{ps("pin-mode", "write"), ps("pin-branch", "pins..x")},
			want: []string{`parameter "pin-branch": invalid value "pins..x"`, "a git branch name"}},
		{name: "helm keys with another target", params: Parameters{ps("image-list", "web=nginx"), ps("pin-mode", "use"), ps("web.helm.image-tag", "image.tag")},
			want: []string{`parameter "web.helm.image-tag": names a key of a Helm values file`}},
		{name: "helm key of an unknown alias", params: Parameters{ps("image-list", "web=nginx"), ps("pin-mode", "use"), ps("pin-target", "helmvalues:values.yaml"), ps("api.helm.image-tag", "image.tag")},
			want: []string{`parameter "api.helm.image-tag": unknown alias "api"`}},
		{name: "bad constraint", params: Parameters{ps("image-list", "web=nginx:~1.2.x.y")},
			want: []string{`parameter "image-list" (web constraint): invalid value "~1.2.x.y"`, "accepted: a semver range"}},
		{name: "digest needs a constraint", params: Parameters{ps("image-list", "web=nginx"), ps("web.update-strategy", "digest")},
			want: []string{`parameter "image-list" (web constraint), with update-strategy "digest" from parameter "web.update-strategy": invalid value ""`, "accepted: the tag to follow"}},
		{name: "newest-build takes no constraint (policy file)", file: "images:\n  web:\n    image: nginx\n    constraint: \"1.2\"\n", params: Parameters{ps("update-strategy", "newest-build")},
			want: []string{`file .argocd-image-resolver.yaml key images.web.constraint (line 4), with update-strategy "newest-build" from parameter "update-strategy" (all images): invalid value "1.2"`, "accepted: no constraint with update-strategy newest-build"}},
		{name: "image-list bad alias", params: Parameters{ps("image-list", "my.app=nginx")},
			want: []string{`parameter "image-list": entry "my.app=nginx": invalid alias: alias "my.app"`, "accepted: alias=repository[:constraint]"}},
		{name: "image-list bad repository", params: Parameters{ps("image-list", "web=Not/Valid")},
			want: []string{`parameter "image-list" (entry "web=Not/Valid"): invalid value "Not/Valid"`, "accepted: repository[:constraint]"}},
		{name: "image-list digest", params: Parameters{pa("image-list", "web=nginx@sha256:0000000000000000000000000000000000000000000000000000000000000000")},
			want: []string{`parameter "image-list" (entry "web=nginx@sha256:`, "use update-strategy digest"}},
		{name: "image-list empty repository", params: Parameters{ps("image-list", "web=")},
			want: []string{`parameter "image-list" (entry "web="): invalid value ""`}},
		{name: "image-list duplicate alias", params: Parameters{pa("image-list", "web=nginx", "web=ghcr.io/o/web")},
			want: []string{`parameter "image-list": entries "web=nginx" and "web=ghcr.io/o/web" both have alias "web"`, "accepted: unique aliases"}},
		{name: "image-list derived aliases collide", params: Parameters{ps("image-list", "ghcr.io/a/web, ghcr.io/b/web")},
			want: []string{`entries "ghcr.io/a/web" and "ghcr.io/b/web" both have alias "web" (derived from the repository's last path segment; write alias=repository`}},
		{name: "image-list errors hide unknown-alias noise", params: Parameters{ps("image-list", "web=Bad"), ps("web.update-strategy", "semver")},
			want: []string{`parameter "image-list" (entry "web=Bad")`}, lines: 1},
		{name: "image-list as a map", params: Parameters{pm("image-list", map[string]string{"web": "nginx"})},
			want: []string{`parameter "image-list": is a map, expected a string or an array (accepted: alias=repository[:constraint]`}},
		{name: "strategy as an array", params: Parameters{ps("image-list", "web=nginx"), pa("web.update-strategy", "semver")},
			want: []string{`parameter "web.update-strategy": is an array, expected a string (accepted: semver`}},
		{name: "helm-parameters as a string", params: Parameters{ps("helm-parameters", "a=b")},
			want: []string{`parameter "helm-parameters": is a string, expected a map (accepted: a map of Helm parameter name to value)`}},
		{name: "helm-parameters empty name", params: Parameters{pm("helm-parameters", map[string]string{" ": "b"})},
			want: []string{`parameter "helm-parameters": an empty name`}},
		{name: "values as an array", params: Parameters{pa("values", "a: 1")},
			want: []string{`parameter "values": is an array, expected a string`}},
		{name: "values-files as a map", params: Parameters{pm("values-files", nil)},
			want: []string{`parameter "values-files": is a map, expected an array or a string`}},
		{name: "tag-match with allow-tags", params: Parameters{ps("image-list", "web=nginx"), ps("web.allow-tags", "any"), ps("web.tag-match", "any")},
			want: []string{`parameter "web.tag-match": alias "web" is also configured by parameter "web.allow-tags"`}},
		{name: "one alias spelled two ways", params: Parameters{ps("image-list", "a/b=nginx"), ps("a/b.update-strategy", "semver"), ps("a_b.update-strategy", "semver")},
			want: []string{`alias "a_b" is also configured by parameter "a/b.update-strategy"`}},
		{name: "same repository, different policies", params: Parameters{ps("image-list", "a=nginx:~1.25, b=docker.io/library/nginx:~1.26")},
			want: []string{`aliases "a" (parameter "image-list") and "b" (parameter "image-list") both name repository docker.io/library/nginx with different policies`, "accepted: one alias per repository, or equal policies"}},
		{name: "file alias with no image", file: "images:\n  web:\n    strategy: semver\n",
			want: []string{`file .argocd-image-resolver.yaml key images.web (line 2): alias "web" has no image`, "accepted: key images.web.image in .argocd-image-resolver.yaml, or an entry web=repository[:constraint] in parameter image-list"}},
		{name: "bad file value overridden by a parameter is still reported", file: "images:\n  web:\n    image: nginx\n    strategy: fastest\n", params: Parameters{ps("web.update-strategy", "semver")},
			want: []string{`file .argocd-image-resolver.yaml key images.web.strategy (line 4): invalid value "fastest" (accepted: semver`}},
		{name: "file constraint invalid", file: "images:\n  web:\n    image: nginx\n    constraint: \"~1.x.y.z\"\n",
			want: []string{`file .argocd-image-resolver.yaml key images.web.constraint (line 4): invalid value "~1.x.y.z"`, "accepted: a semver range"}},
		{name: "file digest strategy without constraint", file: "images:\n  web:\n    image: nginx\n    strategy: digest\n",
			want: []string{`file .argocd-image-resolver.yaml key images.web.constraint, with update-strategy "digest" from file .argocd-image-resolver.yaml key images.web.strategy (line 4): invalid value ""`, "accepted: the tag to follow"}},
		{name: "several problems, one line each", params: Parameters{ps("image-list", "web=nginx"), ps("web.update-strategy", "fastest"), ps("web.platforms", "x"), ps("image-lst", ""), ps("pin-mode", "x")},
			want: []string{`parameter "image-lst"`, `parameter "pin-mode"`, `parameter "web.platforms"`, `parameter "web.update-strategy"`}, lines: 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadPolicy(appDir(t, tc.file), tc.params)
			assertErr(t, err, tc.want...)
			if tc.lines > 0 {
				if n := len(strings.Split(err.Error(), "\n")); n != tc.lines {
					t.Errorf("%d lines, want %d:\n%v", n, tc.lines, err)
				}
			}
		})
	}
}

func TestLoadPolicyMigrationKeys(t *testing.T) {
	for _, key := range []string{"helm.image-name", "helm.image-tag", "helm.image-spec"} {
		t.Run(key+" without helmvalues", func(t *testing.T) {
			_, err := LoadPolicy(appDir(t, ""), Parameters{ps("image-list", "web=nginx"), ps("web."+key, "x")})
			assertErr(t, err, `parameter "web.`+key+`": names a key of a Helm values file, used only with pin-mode write or use and pin-target helmvalues:<path>`)
		})
	}
	for _, key := range []string{"kustomize.image-name", "force-update", "pull-secret"} {
		t.Run(key, func(t *testing.T) {
			_, err := LoadPolicy(appDir(t, ""), Parameters{ps("image-list", "web=nginx"), ps("web."+key, "x")})
			assertErr(t, err, `parameter "web.`+key+`": argocd-image-updater's <alias>.`+key+" is not", "remove the parameter")
		})
	}
	for key, want := range map[string]string{"write-back-target": "is named pin-target here", "git-branch": "is named pin-branch here"} {
		t.Run(key, func(t *testing.T) {
			_, err := LoadPolicy(appDir(t, ""), Parameters{ps(key, "x")})
			assertErr(t, err, `parameter "`+key+`": argocd-image-updater's `+key+" "+want, "remove the parameter")
		})
	}
	for _, key := range []string{"write-back-method", "git-repository", "git-commit-message", "force-update", "pull-secret"} {
		t.Run(key, func(t *testing.T) {
			_, err := LoadPolicy(appDir(t, ""), Parameters{ps(key, "x")})
			assertErr(t, err, `parameter "`+key+`": argocd-image-updater's `+key+" is not", "remove the parameter")
		})
	}
}

// TestLoadPolicyDirectoryParameters: directory-recurse, directory-include and
// directory-exclude, Argo CD's directory options, good and bad.
func TestLoadPolicyDirectoryParameters(t *testing.T) {
	good := []struct {
		name   string
		params Parameters
		want   DirectoryParams
	}{
		{"none: Argo CD's default", nil, DirectoryParams{}},
		{"recurse true", Parameters{ps("directory-recurse", "true")}, DirectoryParams{Recurse: true}},
		{"recurse any case, trimmed", Parameters{ps("directory-recurse", " TRUE ")}, DirectoryParams{Recurse: true}},
		{"recurse false", Parameters{ps("directory-recurse", "false")}, DirectoryParams{}},
		{"recurse empty is false", Parameters{ps("directory-recurse", "")}, DirectoryParams{}},
		{"include and exclude", Parameters{ps("directory-include", "*.yaml"), ps("directory-exclude", "{config.yaml,tests/*}")},
			DirectoryParams{Include: "*.yaml", Exclude: "{config.yaml,tests/*}"}},
		{"patterns trimmed", Parameters{ps("directory-include", " {a.yaml,b.yaml}\n")}, DirectoryParams{Include: "{a.yaml,b.yaml}"}},
		{"all three", Parameters{ps("directory-recurse", "true"), ps("directory-include", "apps/**"), ps("directory-exclude", "**/tests/*")},
			DirectoryParams{Recurse: true, Include: "apps/**", Exclude: "**/tests/*"}},
	}
	for _, tc := range good {
		t.Run(tc.name, func(t *testing.T) {
			pol, err := LoadPolicy(appDir(t, ""), tc.params)
			if err != nil {
				t.Fatal(err)
			}
			if pol.Directory != tc.want {
				t.Errorf("directory %+v, want %+v", pol.Directory, tc.want)
			}
		})
	}
	bad := []struct {
		name   string
		params Parameters
		want   []string
	}{
		{"recurse not a boolean", Parameters{ps("directory-recurse", "yes-please")},
			[]string{`parameter "directory-recurse": invalid value "yes-please" (accepted: true (read the subdirectories too) or false (the default: the files of the app directory itself), as Argo CD's directory.recurse)`}},
		{"recurse as an array", Parameters{pa("directory-recurse", "true")},
			[]string{`parameter "directory-recurse": is an array, expected a string (accepted: true`}},
		{"include does not compile", Parameters{ps("directory-include", "{a.yaml,b.yaml")},
			[]string{`parameter "directory-include": invalid value "{a.yaml,b.yaml": not a glob pattern: unclosed {`, "accepted: a glob matched against each file's path relative to the app directory"}},
		{"exclude does not compile", Parameters{ps("directory-exclude", "[a-")},
			[]string{`parameter "directory-exclude": invalid value "[a-": not a glob pattern`, "directory.exclude"}},
		{"exclude as a map", Parameters{pm("directory-exclude", map[string]string{"a": "b"})},
			[]string{`parameter "directory-exclude": is a map, expected a string`}},
		{"a misspelt name", Parameters{ps("directory-recurze", "true")},
			[]string{`parameter "directory-recurze": unknown parameter; did you mean "directory-recurse"?`}},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadPolicy(appDir(t, ""), tc.params)
			assertErr(t, err, tc.want...)
		})
	}
}
