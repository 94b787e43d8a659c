package plugin

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestAnnounceWithoutFile(t *testing.T) {
	out, err := Announce("", appDir(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	var anns []ParameterAnnouncement
	if err := json.Unmarshal(out, &anns); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, a := range anns {
		names = append(names, a.Name)
	}
	want := []string{"image-list", "update-strategy", "allow-tags", "ignore-tags", "platforms", "pin-digest",
		"verify-identity", "verify-issuer", "verify-key", "pin-mode", "pin-target", "pin-branch", "pin-push", "pin-pr-group", "refresh", "values-files", "helm-parameters", "values",
		"directory-recurse", "directory-include", "directory-exclude"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("names %q\nwant  %q", names, want)
	}
	if anns[0].CollectionType != "array" || anns[0].Array != nil {
		t.Errorf("image-list %+v", anns[0])
	}
	if !bytes.HasPrefix(out, []byte(`[{"name":"image-list","title":"Images","tooltip":`)) {
		t.Errorf("output starts %.80s", out)
	}
	if bytes.HasSuffix(out, []byte("\n")) {
		t.Error("trailing newline")
	}
}

func TestAnnounceFromFile(t *testing.T) {
	dir := appDir(t, fullFile+"  api:\n    image: ghcr.io/org/api:>=1.0, <2\n    verify:\n      identity: 'regexp:^https://github.com/org/api/'\n      issuer: https://token.actions.githubusercontent.com\n")
	anns, err := Announcements("", dir)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]ParameterAnnouncement{}
	var names []string
	for _, a := range anns {
		byName[a.Name] = a
		names = append(names, a.Name)
	}
	var want []string
	keys := []string{"update-strategy", "allow-tags", "ignore-tags", "platforms", "pin-digest", "verify-identity", "verify-issuer", "verify-key"}
	want = append(want, "image-list")
	want = append(want, keys...)
	for _, alias := range []string{"api", "web", "worker"} {
		for _, k := range keys {
			want = append(want, alias+"."+k)
		}
	}
	want = append(want, "pin-mode", "pin-target", "pin-branch", "pin-push", "pin-pr-group", "refresh", "values-files", "helm-parameters", "values",
		"directory-recurse", "directory-include", "directory-exclude")
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("names %q\nwant  %q", names, want)
	}
	checks := []struct {
		name string
		want ParameterAnnouncement
	}{
		{"image-list", ParameterAnnouncement{CollectionType: "array", ItemType: "string",
			Array: []string{"api=ghcr.io/org/api:>=1.0, <2", "web=registry.example.com/team/web:~1.2", "worker=ghcr.io/org/worker"}}},
		{"web.update-strategy", ParameterAnnouncement{CollectionType: "string", ItemType: "string", String: "semver"}},
		{"worker.update-strategy", ParameterAnnouncement{CollectionType: "string", ItemType: "string", String: "newest-build"}},
		{"web.allow-tags", ParameterAnnouncement{CollectionType: "string", ItemType: "string", String: `regexp:^1\.`}},
		{"worker.ignore-tags", ParameterAnnouncement{CollectionType: "array", ItemType: "string", Array: []string{"*-dirty", "latest"}}},
		{"web.platforms", ParameterAnnouncement{CollectionType: "array", ItemType: "string", Array: []string{"linux/amd64", "linux/arm64"}}},
		{"worker.pin-digest", ParameterAnnouncement{CollectionType: "string", ItemType: "boolean", String: "true"}},
		{"api.verify-identity", ParameterAnnouncement{CollectionType: "string", ItemType: "string", String: "regexp:^https://github.com/org/api/"}},
		{"api.verify-issuer", ParameterAnnouncement{CollectionType: "string", ItemType: "string", String: "https://token.actions.githubusercontent.com"}},
		{"api.verify-key", ParameterAnnouncement{CollectionType: "string", ItemType: "string"}},
		{"web.verify-identity", ParameterAnnouncement{CollectionType: "string", ItemType: "string"}},
		{"web.pin-digest", ParameterAnnouncement{CollectionType: "string", ItemType: "boolean", String: "false"}},
		{"pin-mode", ParameterAnnouncement{CollectionType: "string", ItemType: "string", String: "off"}},
		{"pin-push", ParameterAnnouncement{CollectionType: "string", ItemType: "string"}},
		{"pin-pr-group", ParameterAnnouncement{CollectionType: "string", ItemType: "string"}},
		{"refresh", ParameterAnnouncement{CollectionType: "string", ItemType: "string", String: "hard"}},
		{"helm-parameters", ParameterAnnouncement{CollectionType: "map", ItemType: "string"}},
		{"values-files", ParameterAnnouncement{CollectionType: "array", ItemType: "string"}},
		{"directory-recurse", ParameterAnnouncement{CollectionType: "string", ItemType: "boolean", String: "false"}},
		{"directory-include", ParameterAnnouncement{CollectionType: "string", ItemType: "string"}},
		{"directory-exclude", ParameterAnnouncement{CollectionType: "string", ItemType: "string"}},
	}
	for _, c := range checks {
		got := byName[c.name]
		got.Name, got.Title, got.Tooltip = "", "", ""
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s = %+v\nwant %+v", c.name, got, c.want)
		}
	}
	if tip := byName["web.update-strategy"].Tooltip; !strings.Contains(tip, "semver (default), newest-build, digest, alphabetical, numeric") {
		t.Errorf("tooltip %q", tip)
	}
	if tip := byName["pin-mode"].Tooltip; !strings.Contains(tip, "Accepted: off (") || strings.Contains(tip, "write:") {
		t.Errorf("tooltip %q", tip)
	}
	if title := byName["web.platforms"].Title; title != "web: platforms" {
		t.Errorf("title %q", title)
	}
	for name, want := range map[string][]string{
		"directory-recurse":   {"true (read the subdirectories too) or false (the default", "directory.recurse", "Plain-YAML apps only"},
		"directory-include":   {"relative to the app directory", "directory.include", "{*.yaml,*.yml}", "Plain-YAML apps only"},
		"directory-exclude":   {"wins over the include pattern", "directory.exclude"},
		"api.verify-identity": {"Exact, or regexp:EXPR", "verify-issuer", "unsigned or otherwise signed tags are skipped"},
		"api.verify-issuer":   {"https://token.actions.githubusercontent.com"},
		"api.verify-key":      {"trust.keys", "never key material"},
	} {
		for _, w := range want {
			if tip := byName[name].Tooltip; !strings.Contains(tip, w) {
				t.Errorf("%s tooltip %q lacks %q", name, tip, w)
			}
		}
	}
	if title := byName["api.verify-key"].Title; title != "api: signed by (key name)" {
		t.Errorf("title %q", title)
	}

	// Deterministic.
	a, _ := Announce("", dir)
	b, _ := Announce("", dir)
	if !bytes.Equal(a, b) {
		t.Error("output differs between runs")
	}
	// Prefilled values read back as parameters give the same policy.
	var params Parameters
	for _, ann := range anns {
		switch {
		case ann.Array != nil:
			params = append(params, Parameter{Name: ann.Name, Kind: KindArray, Array: ann.Array})
		case ann.String != "":
			params = append(params, Parameter{Name: ann.Name, Kind: KindString, String: ann.String})
		}
	}
	fromFile, err := LoadPolicy(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	fromParams, err := LoadPolicy(appDir(t, ""), params)
	if err != nil {
		t.Fatal(err)
	}
	for i := range fromFile.Images {
		f, p := fromFile.Images[i], fromParams.Images[i]
		if f.Alias != p.Alias || f.Written != p.Written || f.Policy.String() != p.Policy.String() ||
			(f.Policy.Trust() == nil) != (f.Alias != "api") {
			t.Errorf("round trip: %+v\n!= %+v", f, p)
		}
	}
}

func TestAnnounceBrokenFile(t *testing.T) {
	for _, file := range []string{
		"images:\n  web:\n    image: nginx\n    strategy: fastest\n",
		"images:\n  web: [\n",
		"images:\n  web:\n    strategy: semver\n",
	} {
		_, err := Announce("", appDir(t, file))
		assertErr(t, err, "file .argocd-image-resolver.yaml")
	}
}

// pin-push and pin-pr-group are announced with their accepted values and
// defaults, prefilled with the effective values where they apply, and the
// prefilled pin settings read back as parameters give the same pins.
func TestAnnouncePinPush(t *testing.T) {
	cases := []struct {
		name        string
		file        string
		push, group string // prefilled
	}{
		{"pins off", "images: {}\n", "", ""},
		{"pins on", "pinMode: write\n", "direct", ""},
		{"pull request per app", "pinMode: use\npinPush: pull-request\n", "pull-request", "app"},
		{"pull request per repository", "pinMode: use\npinPush: pull-request\npinPRGroup: repository\n", "pull-request", "repository"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := appDir(t, tc.file)
			anns, err := Announcements("", dir)
			if err != nil {
				t.Fatal(err)
			}
			byName := map[string]ParameterAnnouncement{}
			var params Parameters
			for _, a := range anns {
				byName[a.Name] = a
				if strings.HasPrefix(a.Name, "pin-") && a.String != "" {
					params = append(params, ps(a.Name, a.String))
				}
			}
			push, group := byName["pin-push"], byName["pin-pr-group"]
			if push.String != tc.push || group.String != tc.group {
				t.Errorf("prefilled pin-push %q pin-pr-group %q, want %q %q", push.String, group.String, tc.push, tc.group)
			}
			for _, w := range []string{"Accepted: direct (the default", "or pull-request (", "git.forges"} {
				if !strings.Contains(push.Tooltip, w) {
					t.Errorf("pin-push tooltip %q lacks %q", push.Tooltip, w)
				}
			}
			for _, w := range []string{"Accepted: app (the default", "or repository (", "image-resolver/<app>", "with pin-push pull-request"} {
				if !strings.Contains(group.Tooltip, w) {
					t.Errorf("pin-pr-group tooltip %q lacks %q", group.Tooltip, w)
				}
			}
			fromFile, err := LoadPolicy(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			fromParams, err := LoadPolicy(appDir(t, ""), params)
			if err != nil {
				t.Fatalf("prefilled values %v read back: %v", params, err)
			}
			if fromFile.PinMode != fromParams.PinMode || fromFile.Pins.Push != fromParams.Pins.Push || fromFile.Pins.PRGroup != fromParams.Pins.PRGroup {
				t.Errorf("read back: %q %+v, want %q %+v", fromParams.PinMode, fromParams.Pins, fromFile.PinMode, fromFile.Pins)
			}
		})
	}
}
