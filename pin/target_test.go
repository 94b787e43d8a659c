package pin

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

var updateTargetGolden = flag.Bool("update-target-golden", false, "rewrite the golden files of the target tests in testdata")

const (
	targetDigestA = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	targetDigestB = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
	targetDigestC = "sha256:3333333333333333333333333333333333333333333333333333333333333333"
)

func parseTargetT(t testing.TB, s string, keys HelmKeys) Target {
	t.Helper()
	tg, err := ParseTarget(s, keys)
	if err != nil {
		t.Fatalf("ParseTarget(%q): %v", s, err)
	}
	return tg
}

func targetTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// targetPin is the pin the pipeline makes: Reference image:tag, @digest when pinned.
func targetPin(alias, image, tag, digest string, pinned bool) Pin {
	ref := image + ":" + tag
	if pinned {
		ref += "@" + digest
	}
	return Pin{Alias: alias, Image: image, Reference: ref, Tag: tag, Digest: digest}
}

func TestParseTarget(t *testing.T) {
	for _, tc := range []struct {
		in           string
		keys         HelmKeys
		str, file    string
		wantErr      []string // substrings of the error; nil for none
		inputErr     bool     // the error is a *resolve.InputError of in
		acceptedText string   // its Accepted contains this
	}{
		{in: "", str: "pins", file: PinsFile},
		{in: "pins", str: "pins", file: PinsFile},
		{in: " kustomization ", str: "kustomization", file: "kustomization.yaml"},
		{in: "helmvalues:values-prod.yaml", str: "helmvalues:values-prod.yaml", file: "values-prod.yaml"},
		{in: "helmvalues:./env//prod/values.yml", str: "helmvalues:./env//prod/values.yml", file: "env/prod/values.yml"},
		{in: "helmvalues:values.yaml", keys: HelmKeys{"web": {Tag: " image.tag ", Name: "image.repository"}, "api": {Spec: "api.image"}, "none": {}},
			str: "helmvalues:values.yaml", file: "values.yaml"},

		{in: "kustomize", wantErr: []string{`"kustomize"`, TargetAccepted}, inputErr: true, acceptedText: TargetAccepted},
		{in: "Pins", wantErr: []string{`"Pins"`}, inputErr: true, acceptedText: TargetAccepted},
		{in: "helmvalues", wantErr: []string{`"helmvalues"`, "needs the path"}, inputErr: true, acceptedText: ".yaml or .yml"},
		{in: "helmvalues:", wantErr: []string{`"helmvalues:"`, "the path is empty"}, inputErr: true, acceptedText: ".yaml or .yml"},
		{in: "helmvalues:/etc/values.yaml", wantErr: []string{`"helmvalues:/etc/values.yaml"`, "absolute"}, inputErr: true, acceptedText: "relative"},
		{in: "helmvalues:../values.yaml", wantErr: []string{`"helmvalues:../values.yaml"`, "leaves the app directory"}, inputErr: true, acceptedText: "inside it"},
		{in: "helmvalues:env/../../values.yaml", wantErr: []string{`"helmvalues:env/../../values.yaml"`, ".."}, inputErr: true},
		{in: "helmvalues:env/../values.yaml", wantErr: []string{"leaves the app directory"}, inputErr: true},
		{in: `helmvalues:env\values.yaml`, wantErr: []string{"backslash"}, inputErr: true},
		{in: "helmvalues:values.json", wantErr: []string{`"helmvalues:values.json"`, "not a .yaml or .yml file"}, inputErr: true, acceptedText: "ending in .yaml or .yml"},
		{in: "helmvalues:values", wantErr: []string{"not a .yaml or .yml file"}, inputErr: true},
		{in: "helmvalues:values.yaml", keys: HelmKeys{"web": {Tag: "image..tag"}}, wantErr: []string{`"web.helm.image-tag"`, `"image..tag"`, "e.g. image.tag"}},
		{in: "helmvalues:values.yaml", keys: HelmKeys{"web": {Spec: ".image"}}, wantErr: []string{`"web.helm.image-spec"`, `".image"`}},
		{in: "helmvalues:values.yaml", keys: HelmKeys{"web": {Tag: "image.tag", Name: "image."}}, wantErr: []string{`"web.helm.image-name"`}},
	} {
		t.Run(tc.in, func(t *testing.T) {
			tg, err := ParseTarget(tc.in, tc.keys)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				if tg.String() != tc.str || tg.File() != tc.file {
					t.Errorf("String %q File %q, want %q %q", tg.String(), tg.File(), tc.str, tc.file)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, target %v", tg)
			}
			for _, s := range tc.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			var ie *resolve.InputError
			if isIE := errors.As(err, &ie); isIE != tc.inputErr {
				t.Fatalf("InputError %v, want %v: %v", isIE, tc.inputErr, err)
			}
			if tc.inputErr && (ie.Value != tc.in || !strings.Contains(ie.Accepted, tc.acceptedText)) {
				t.Errorf("InputError value %q accepted %q, want %q and %q", ie.Value, ie.Accepted, tc.in, tc.acceptedText)
			}
			// Relabelled by the caller, it names the parameter.
			if tc.inputErr {
				if got := resolve.WithField(err, "parameter pin-target").Error(); !strings.HasPrefix(got, "parameter pin-target: ") {
					t.Errorf("relabelled %q", got)
				}
			}
		})
	}
}

// helmKeysTestdata are the keys of values.in.yaml's three images.
var helmKeysTestdata = HelmKeys{"web": {Tag: "image.tag", Name: "image.repository"}, "worker": {Spec: "worker.image"}, "api": {Tag: "api.image.tag"}}

func TestTargetRead(t *testing.T) {
	for _, tc := range []struct {
		name   string
		target Target
		file   string // in testdata; "" for nil content
		images map[string]string
		want   map[string]Pin
	}{
		{
			name: "pins", target: parseTargetT(t, "pins", nil), file: "pins.in.yaml",
			images: map[string]string{"web": "ghcr.io/org/web", "worker": "registry.example.com:5000/team/worker", "api": "ghcr.io/org/api"},
			want: map[string]Pin{
				"web": {Alias: "web", Image: "ghcr.io/org/web", Reference: "ghcr.io/org/web:1.2.3@" + targetDigestA, Tag: "1.2.3", Digest: targetDigestA,
					Policy: "semver ~1.2; platforms linux/amd64", Platforms: []string{"linux/amd64"}},
				// Edited by hand: only the reference counts.
				"worker": {Alias: "worker", Image: "registry.example.com:5000/team/worker", Reference: "registry.example.com:5000/team/worker:2.0.1", Tag: "2.0.1"},
			},
		},
		{name: "pins missing", target: parseTargetT(t, "", nil), images: map[string]string{"web": "ghcr.io/org/web"}, want: map[string]Pin{}},
		{
			name: "kustomization", target: parseTargetT(t, "kustomization", nil), file: "kustomization.in.yaml",
			images: map[string]string{"web": "ghcr.io/org/web", "worker": "registry.example.com/team/worker", "api": "ghcr.io/org/api", "sidecar": "sidecar"},
			want: map[string]Pin{
				"web": {Alias: "web", Image: "ghcr.io/org/web", Reference: "ghcr.io/org/web:1.2.2", Tag: "1.2.2"},
				// matched by newName: Kustomize renames worker to it
				"worker": {Alias: "worker", Image: "registry.example.com/team/worker", Reference: "registry.example.com/team/worker:2.0.0@" + targetDigestB, Tag: "2.0.0", Digest: targetDigestB},
				// sidecar's entry has no newTag: no pin
			},
		},
		{
			name: "kustomization by name", target: parseTargetT(t, "kustomization", nil), file: "kustomization.in.yaml",
			images: map[string]string{"bb": "busybox"},
			want:   map[string]Pin{"bb": {Alias: "bb", Image: "busybox", Reference: "busybox:1.36", Tag: "1.36"}},
		},
		{name: "kustomization missing", target: parseTargetT(t, "kustomization", nil), images: map[string]string{"web": "ghcr.io/org/web"}, want: map[string]Pin{}},
		{
			name: "helm default key", target: parseTargetT(t, "helmvalues:values.yaml", nil), file: "values.in.yaml",
			images: map[string]string{"web": "ghcr.io/org/web"},
			want:   map[string]Pin{"web": {Alias: "web", Image: "ghcr.io/org/web", Reference: "ghcr.io/org/web:1.2.2", Tag: "1.2.2"}},
		},
		{
			name: "helm keys", target: parseTargetT(t, "helmvalues:values.yaml", helmKeysTestdata), file: "values.in.yaml",
			images: map[string]string{"web": "ghcr.io/org/web", "worker": "ghcr.io/org/worker", "api": "ghcr.io/org/api"},
			want: map[string]Pin{
				"web":    {Alias: "web", Image: "ghcr.io/org/web", Reference: "ghcr.io/org/web:1.2.2", Tag: "1.2.2"},
				"worker": {Alias: "worker", Image: "ghcr.io/org/worker", Reference: "ghcr.io/org/worker:2.0.0", Tag: "2.0.0"},
				// api.image.tag is missing: no pin
			},
		},
		{
			// The name key says which image the tag is of (a mirror here).
			name: "helm name key", target: parseTargetT(t, "helmvalues:values.yaml", HelmKeys{"web": {Tag: "image.tag", Name: "image.repository"}}),
			images: map[string]string{"web": "mirror.example.com/org/web"}, file: "values.in.yaml",
			want: map[string]Pin{"web": {Alias: "web", Image: "mirror.example.com/org/web", Reference: "ghcr.io/org/web:1.2.2", Tag: "1.2.2"}},
		},
		{name: "helm missing", target: parseTargetT(t, "helmvalues:values.yaml", nil), images: map[string]string{"web": "ghcr.io/org/web"}, want: map[string]Pin{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var content []byte
			if tc.file != "" {
				content = targetTestdata(t, tc.file)
			}
			got, err := tc.target.Read(content, tc.images)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Read:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestTargetReadErrors(t *testing.T) {
	pins := parseTargetT(t, "pins", nil)
	kust := parseTargetT(t, "kustomization", nil)
	helm := parseTargetT(t, "helmvalues:values-prod.yaml", nil)
	web := map[string]string{"web": "ghcr.io/org/web"}
	for _, tc := range []struct {
		name    string
		target  Target
		content string
		images  map[string]string
		want    []string
	}{
		{"pins unknown key", pins, "pins:\n  web:\n    reference: ghcr.io/org/web:1\n    color: blue\n", web,
			[]string{PinsFile, "key pins.web.color (line 4)", "unknown key", "accepted: image, reference, tag, digest, policy, platforms"}},
		{"pins unknown top key", pins, "pin:\n  web: {}\n", web, []string{PinsFile, "key pin (line 1)", "unknown key", "accepted: pins"}},
		{"pins other image", pins, "pins:\n  web:\n    image: ghcr.io/org/web\n    reference: ghcr.io/org/other:1.2.3\n", web,
			[]string{PinsFile, "pins.web.reference (line 4)", "alias web", "ghcr.io/org/other", "its policy's image is ghcr.io/org/web"}},
		{"pins no tag", pins, "pins:\n  web:\n    reference: ghcr.io/org/web@" + targetDigestA + "\n", web, []string{"pins.web.reference", "no tag", "image:tag or image:tag@digest"}},
		{"pins bad reference", pins, "pins:\n  web:\n    reference: 'ghcr.io/org/web:a b'\n", web, []string{"pins.web.reference", `"ghcr.io/org/web:a b"`}},
		{"pins no reference", pins, "pins:\n  web:\n    tag: 1.2.3\n", web, []string{"key pins.web (line 3)", "no reference"}},
		{"pins twice", pins, "pins:\n  web:\n    reference: ghcr.io/org/web:1\n    reference: ghcr.io/org/web:2\n", web, []string{"pins.web.reference", "written twice (lines 3 and 4)"}},
		{"pins entry not a mapping", pins, "pins:\n  web: ghcr.io/org/web:1\n", web, []string{"key pins.web (line 2)", `the string "ghcr.io/org/web:1"`, "accepted: a mapping"}},
		{"pins platforms not a list", pins, "pins:\n  web:\n    reference: ghcr.io/org/web:1\n    platforms: linux/amd64\n", web, []string{"pins.web.platforms (line 4)", "accepted: a list"}},
		{"pins not a mapping", pins, "- web\n", web, []string{PinsFile, "(line 1)", "a list"}},
		{"pins yaml error", pins, "pins: [\n", web, []string{PinsFile, "yaml:"}},
		{"pins two documents", pins, "pins: {}\n---\npins: {}\n", web, []string{PinsFile, "more than one YAML document"}},
		{"kustomization images not a list", kust, "images:\n  name: ghcr.io/org/web\n", web, []string{"kustomization.yaml", "key images (line 2)", "a mapping", "accepted: a list"}},
		{"kustomization entry not a mapping", kust, "images:\n  - ghcr.io/org/web:1\n", web, []string{"key images[0] (line 2)", "accepted: a mapping with keys name, newName, newTag, digest"}},
		{"kustomization digest only", kust, "images:\n  - name: ghcr.io/org/web\n    digest: " + targetDigestA + "\n", web, []string{"key images[0] (line 2)", "has a digest but no newTag"}},
		{"kustomization newTag a list", kust, "images:\n  - name: ghcr.io/org/web\n    newTag: [1]\n", web, []string{"images[0].newTag (line 3)", "a list"}},
		{"helm crosses a string", helm, "image: ghcr.io/org/web:1.0\n", web, []string{"values-prod.yaml", "key image.tag (line 1)", `image is the string "ghcr.io/org/web:1.0", not a mapping`}},
		{"helm value is a mapping", helm, "image:\n  tag:\n    v: 1\n", web, []string{"values-prod.yaml", "key image.tag (line 3)", "a mapping", "accepted: a string"}},
		{"helm bad tag", helm, "image:\n  tag: a b\n", web, []string{"key image.tag (line 2)", `"ghcr.io/org/web:a b"`}},
		{"helm two aliases no keys", helm, "image:\n  tag: 1.0\n", map[string]string{"web": "ghcr.io/org/web", "api": "ghcr.io/org/api"},
			[]string{"values-prod.yaml", "alias api has no key", "api.helm.image-tag", "api.helm.image-spec"}},
		{"helm two aliases one without keys", parseTargetT(t, "helmvalues:values-prod.yaml", HelmKeys{"api": {Tag: "api.tag"}}), "image:\n  tag: 1.0\n", web,
			[]string{"alias web has no key", "web.helm.image-tag", "web.helm.image-spec"}},
		{"helm overlapping keys", parseTargetT(t, "helmvalues:values-prod.yaml", HelmKeys{"web": {Spec: "image"}, "api": {Tag: "image.tag"}}), "", web,
			[]string{"api.helm.image-tag (key image.tag)", "web.helm.image-spec (key image)", "overlap"}},
		{"helm same key", parseTargetT(t, "helmvalues:values-prod.yaml", HelmKeys{"web": {Tag: "tag"}, "api": {Tag: "image.tag", Name: "tag"}}), "", web,
			[]string{"api.helm.image-name (key tag)", "web.helm.image-tag (key tag)"}},
		{"helm key twice", helm, "image:\n  tag: 1.0\n  tag: 1.1\n", web, []string{"key image.tag", "written twice (lines 2 and 3)"}},
		{"helm alias", helm, "t: &t 1.0\nimage:\n  tag: *t\n", web, []string{"key image.tag (line 3)", "YAML alias (*t)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.target.Read([]byte(tc.content), tc.images)
			if err == nil {
				t.Fatalf("no error; pins %v", got)
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
		})
	}
}

// The golden files show what Apply keeps: the .out files are exactly what is
// expected. With -update-target-golden they are rewritten.
func TestTargetApplyGolden(t *testing.T) {
	web := targetPin("web", "ghcr.io/org/web", "1.10", targetDigestC, true)
	web.Policy, web.Platforms = "semver ~1; platforms linux/amd64, linux/arm64", []string{"linux/amd64", "linux/arm64"}
	api := targetPin("api", "ghcr.io/org/api", "3.1.0", targetDigestA, false)
	api.Policy = "semver ^3"
	for _, tc := range []struct {
		name   string
		target Target
		in     string // "" for a file that does not exist
		pins   []Pin
		golden string
		// changed are the lines (1-based, of the output) that differ from the
		// input, when only values changed in place; nil when not checked.
		changed []int
	}{
		{name: "pins", target: parseTargetT(t, "pins", nil), in: "pins.in.yaml", pins: []Pin{web, api}, golden: "pins.out.yaml"},
		{name: "pins new file", target: parseTargetT(t, "pins", nil), pins: []Pin{web, api}, golden: "pins.new.yaml"},
		{name: "pins reference only", target: parseTargetT(t, "pins", nil), in: "pins.in.yaml",
			pins:   []Pin{{Alias: "web", Image: "ghcr.io/org/web", Reference: "ghcr.io/org/web:1.2.4@" + targetDigestA, Tag: "1.2.4", Digest: targetDigestA, Policy: "semver ~1.2; platforms linux/amd64", Platforms: []string{"linux/amd64"}}},
			golden: "pins.tag.out.yaml", changed: []int{8, 9}},
		{name: "kustomization tag", target: parseTargetT(t, "kustomization", nil), in: "kustomization.in.yaml",
			pins: []Pin{targetPin("web", "ghcr.io/org/web", "1.2.4", targetDigestA, false)}, golden: "kustomization.tag.out.yaml", changed: []int{15}},
		{name: "kustomization", target: parseTargetT(t, "kustomization", nil), in: "kustomization.in.yaml",
			pins: []Pin{
				targetPin("web", "ghcr.io/org/web", "1.2.4", targetDigestC, true),                      // digest added
				targetPin("worker", "registry.example.com/team/worker", "2.1.0", targetDigestB, false), // digest removed
				targetPin("cache", "ghcr.io/org/cache", "0.3", targetDigestA, true),                    // new entries, in alias order
				targetPin("api", "ghcr.io/org/api", "1.10", targetDigestA, false),
			},
			golden: "kustomization.out.yaml"},
		{name: "kustomization no images", target: parseTargetT(t, "kustomization", nil), in: "kustomization.noimages.in.yaml",
			pins: []Pin{targetPin("web", "ghcr.io/org/web", "1.2.4", targetDigestA, true)}, golden: "kustomization.noimages.out.yaml"},
		{name: "helm default key", target: parseTargetT(t, "helmvalues:values.yaml", nil), in: "values.in.yaml",
			pins: []Pin{targetPin("web", "ghcr.io/org/web", "1.10", targetDigestA, false)}, golden: "values.tag.out.yaml", changed: []int{7}},
		{name: "helm keys", target: parseTargetT(t, "helmvalues:values.yaml", helmKeysTestdata), in: "values.in.yaml",
			pins: []Pin{
				targetPin("web", "ghcr.io/org/web", "1.2.4", targetDigestC, true),
				targetPin("worker", "ghcr.io/org/worker", "2.1.0", targetDigestB, true),
				targetPin("api", "ghcr.io/org/api", "3.1.0", targetDigestA, false), // api: {image: {tag: ...}} created
			},
			golden: "values.out.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var in []byte
			if tc.in != "" {
				in = targetTestdata(t, tc.in)
			}
			out, err := tc.target.Apply(slices.Clone(in), tc.pins)
			if err != nil {
				t.Fatal(err)
			}
			goldenPath := filepath.Join("testdata", tc.golden)
			if *updateTargetGolden {
				if err := os.WriteFile(goldenPath, out, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if want := targetTestdata(t, tc.golden); !bytes.Equal(out, want) {
				t.Errorf("Apply: got\n%s\nwant (%s)\n%s", out, goldenPath, want)
			}
			if tc.changed != nil {
				if got := targetChangedLines(in, out); !slices.Equal(got, tc.changed) {
					t.Errorf("changed lines %v, want %v:\n%s", got, tc.changed, out)
				}
			}
			// Apply then Read gives the pins back.
			images := map[string]string{}
			for _, p := range tc.pins {
				images[p.Alias] = p.Image
			}
			got, err := tc.target.Read(out, images)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range tc.pins {
				if g := got[p.Alias]; g.Reference != p.Reference || g.Tag != p.Tag || g.Image != p.Image {
					t.Errorf("Read after Apply: %s is %+v, want %+v", p.Alias, g, p)
				}
			}
			// Idempotent: the same pins again change nothing.
			again, err := tc.target.Apply(slices.Clone(out), tc.pins)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again, out) {
				t.Errorf("second Apply changed the file:\n%s\nafter the first\n%s", again, out)
			}
			// Deterministic: the pins in another order give the same bytes.
			rev := slices.Clone(tc.pins)
			slices.Reverse(rev)
			for i := 0; i < 5; i++ {
				if o, err := tc.target.Apply(slices.Clone(in), rev); err != nil || !bytes.Equal(o, out) {
					t.Fatalf("Apply of the pins reversed: %v\n%s", err, o)
				}
			}
		})
	}
}

// targetChangedLines are the lines of out that differ from in, when both have as many.
func targetChangedLines(in, out []byte) []int {
	a, b := strings.Split(string(in), "\n"), strings.Split(string(out), "\n")
	if len(a) != len(b) {
		return []int{-1}
	}
	var d []int
	for i := range a {
		if a[i] != b[i] {
			d = append(d, i+1)
		}
	}
	return d
}

// Values are spelled as strings whatever they look like, and keep the quoting
// they had; a key is added after its siblings; nothing else moves.
func TestTargetApplyInPlace(t *testing.T) {
	one := func(tag string) []Pin { return []Pin{targetPin("web", "ghcr.io/org/web", tag, targetDigestA, false)} }
	helm := parseTargetT(t, "helmvalues:values.yaml", nil)
	for _, tc := range []struct {
		name    string
		target  Target
		in      string
		pins    []Pin
		want    string
		wantErr []string
	}{
		{"plain stays plain", helm, "image:\n  tag:   1.2.3   # c\n", one("1.2.4"), "image:\n  tag:   1.2.4   # c\n", nil},
		{"a number is quoted", helm, "image:\n  tag: 1.2.3\n", one("1.10"), "image:\n  tag: \"1.10\"\n", nil},
		{"an unquoted number is quoted", helm, "image:\n  tag: 1.10\n", one("1.10"), "image:\n  tag: \"1.10\"\n", nil},
		{"yes is quoted", helm, "image:\n  tag: x\n", one("yes"), "image:\n  tag: \"yes\"\n", nil},
		{"single quotes kept", helm, "image:\n  tag: '1.2'\n", one("1.3"), "image:\n  tag: '1.3'\n", nil},
		{"flow mapping", helm, "image: {repository: r,  tag: 1.2.3}\n", one("1.2.4"), "image: {repository: r,  tag: 1.2.4}\n", nil},
		{"key added", helm, "image:\n    repository: r   # c\n\nx:   1\n", one("1.2.4"), "image:\n    repository: r   # c\n    tag: 1.2.4\n\nx:   1\n", nil},
		{"key removed", parseTargetT(t, "kustomization", nil), "images:\n- name: ghcr.io/org/web\n  newTag:  1.2.3\n  digest:  " + targetDigestA + "   # pinned\nx:   1\n", one("1.2.4"),
			"images:\n- name: ghcr.io/org/web\n  newTag:  1.2.4\nx:   1\n", nil},
		{"null tag", helm, "image:\n  tag: ~\n", one("2"), "image:\n  tag: \"2\"\n", nil},
		{"empty file", helm, "", one("1.2.4"), "image:\n  tag: 1.2.4\n", nil},
		{"comments only", helm, "# values\n", one("1.2.4"), "# values\nimage:\n  tag: 1.2.4\n", nil},
		{"CRLF", helm, "image:\r\n  repository: r\r\nx: 1\r\n", one("1.2.4"), "image:\r\n  repository: r\r\n  tag: 1.2.4\r\nx: 1\r\n", nil},
		{"null mapping", helm, "image:\nx: 1\n", one("1.2.4"), "image:\n  tag: 1.2.4\nx: 1\n", nil},
		{"crosses a string", helm, "image: nginx\n", one("1.2.4"), "", []string{"values.yaml", "key image.tag", `image is the string "nginx", not a mapping`}},
		{"crosses a list", parseTargetT(t, "helmvalues:values.yaml", HelmKeys{"web": {Tag: "a.b.c"}}), "a:\n  b: [1]\n", one("1.2.4"), "", []string{"key a.b.c", "a.b is a list"}},
		{"anchor", helm, "image:\n  tag: &t 1.0\nother: *t\n", one("1.2.4"), "", []string{"key image.tag (line 2)", "anchor (&t)"}},
		{"helm several aliases", helm, "", []Pin{targetPin("web", "ghcr.io/org/web", "1", targetDigestA, false), targetPin("api", "ghcr.io/org/api", "1", targetDigestA, false)}, "",
			[]string{"alias api has no key", "api.helm.image-tag", "api.helm.image-spec"}},
		{"pin of another image", parseTargetT(t, "pins", nil), "", []Pin{{Alias: "web", Image: "ghcr.io/org/web", Reference: "ghcr.io/org/api:1", Tag: "1"}}, "",
			[]string{"alias web", "ghcr.io/org/api:1", "ghcr.io/org/web"}},
		{"pin without tag", parseTargetT(t, "kustomization", nil), "images: []\n", []Pin{{Alias: "web", Image: "ghcr.io/org/web", Reference: "ghcr.io/org/web@" + targetDigestA, Digest: targetDigestA}}, "",
			[]string{"alias web", "no tag"}},
		{"pins strict on apply", parseTargetT(t, "pins", nil), "pins:\n  web:\n    ref: x\n", one("1"), "", []string{"key pins.web.ref (line 3)", "unknown key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := tc.target.Apply([]byte(tc.in), tc.pins)
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("no error:\n%s", out)
				}
				for _, s := range tc.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not say %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != tc.want {
				t.Errorf("got\n%q\nwant\n%q", out, tc.want)
			}
			if again, err := tc.target.Apply(out, tc.pins); err != nil || !bytes.Equal(again, out) {
				t.Errorf("second Apply: %v\n%q", err, again)
			}
		})
	}
}

func TestTargetApplyMissingFile(t *testing.T) {
	p := []Pin{targetPin("web", "ghcr.io/org/web", "1.2.4", targetDigestA, false)}
	for _, tc := range []struct {
		target Target
		want   []string
	}{
		{parseTargetT(t, "kustomization", nil), []string{"the app has no kustomization.yaml", "pin-target kustomization needs a Kustomize overlay"}},
		{parseTargetT(t, "helmvalues:env/values-prod.yaml", nil), []string{"file env/values-prod.yaml does not exist"}},
	} {
		out, err := tc.target.Apply(nil, p)
		if err == nil {
			t.Fatalf("%s: no error:\n%s", tc.target, out)
		}
		for _, s := range tc.want {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: error %q does not say %q", tc.target, err, s)
			}
		}
	}
}

// ApplyEdit leaves a pin a person changed since the edit's base, and the file
// unchanged when nothing else is to be written.
func TestTargetApplyEditConflict(t *testing.T) {
	for _, tc := range []struct {
		target Target
		file   string
		// held is the pin of web in file; the edit's base is another.
		web, other Pin
	}{
		{parseTargetT(t, "pins", nil), "pins.in.yaml",
			targetPin("web", "ghcr.io/org/web", "1.2.3", targetDigestA, true), targetPin("worker", "registry.example.com:5000/team/worker", "2.0.1", targetDigestB, false)},
		{parseTargetT(t, "kustomization", nil), "kustomization.in.yaml",
			targetPin("web", "ghcr.io/org/web", "1.2.2", targetDigestA, false), targetPin("worker", "registry.example.com/team/worker", "2.0.0", targetDigestB, true)},
		{parseTargetT(t, "helmvalues:values.yaml", helmKeysTestdata), "values.in.yaml",
			targetPin("web", "ghcr.io/org/web", "1.2.2", targetDigestA, false), targetPin("worker", "ghcr.io/org/worker", "2.0.0", targetDigestB, false)},
	} {
		t.Run(tc.target.String(), func(t *testing.T) {
			content := targetTestdata(t, tc.file)
			held, err := tc.target.Read(content, map[string]string{"web": tc.web.Image, "worker": tc.other.Image})
			if err != nil {
				t.Fatal(err)
			}
			if held["web"].Reference != tc.web.Reference || held["worker"].Reference != tc.other.Reference {
				t.Fatalf("testdata holds %v", held)
			}
			newWeb := targetPin("web", tc.web.Image, "9.9.9", targetDigestC, true)
			newOther := targetPin("worker", tc.other.Image, "8.8.8", targetDigestC, false)

			// The base is not what the file holds: a conflict, the file as it was.
			e := Edit{App: "shop", Dir: "apps/shop", Target: tc.target, Pins: []Pin{newWeb},
				Base: map[string]string{"web": tc.web.Image + ":1.0.0"}}
			out, applied, conflicts, err := ApplyEdit(slices.Clone(content), e)
			if err != nil {
				t.Fatal(err)
			}
			if len(applied) != 0 || len(conflicts) != 1 || conflicts[0].Reference != newWeb.Reference {
				t.Errorf("applied %v conflicts %v", applied, conflicts)
			}
			if !bytes.Equal(out, content) {
				t.Errorf("the file changed:\n%s", out)
			}

			// One alias in conflict, the other applied: only the other changes.
			e.Pins = []Pin{newWeb, newOther}
			e.Base["worker"] = tc.other.Reference
			out, applied, conflicts, err = ApplyEdit(slices.Clone(content), e)
			if err != nil {
				t.Fatal(err)
			}
			if len(applied) != 1 || applied[0].Alias != "worker" || len(conflicts) != 1 || conflicts[0].Alias != "web" {
				t.Fatalf("applied %v conflicts %v", applied, conflicts)
			}
			after, err := tc.target.Read(out, map[string]string{"web": tc.web.Image, "worker": tc.other.Image})
			if err != nil {
				t.Fatal(err)
			}
			if after["web"].Reference != tc.web.Reference || after["worker"].Reference != newOther.Reference {
				t.Errorf("after the edit: %v", after)
			}

			// The base is what the file holds: applied.
			e.Base["web"] = tc.web.Reference
			out, applied, conflicts, err = ApplyEdit(slices.Clone(content), e)
			if err != nil || len(applied) != 2 || len(conflicts) != 0 {
				t.Fatalf("applied %v conflicts %v err %v", applied, conflicts, err)
			}
			after, _ = tc.target.Read(out, map[string]string{"web": tc.web.Image})
			if after["web"].Reference != newWeb.Reference {
				t.Errorf("after the edit: %v", after)
			}
		})
	}
}

// kustomize build of the edited overlay uses the pinned references.
func TestTargetKustomizeBuild(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"base/kustomization.yaml", "base/deployment.yaml", "prod/kustomization.yaml"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), targetTestdata(t, "overlay/"+f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pins := []Pin{
		targetPin("web", "ghcr.io/org/web", "1.10", targetDigestC, true),                       // an entry by name; a digest added
		targetPin("worker", "registry.example.com/team/worker", "2.1.0", targetDigestB, false), // an entry by newName
		targetPin("api", "ghcr.io/org/api", "3.1.0", targetDigestA, false),                     // no entry yet
	}
	tg := parseTargetT(t, "kustomization", nil)
	file := filepath.Join(dir, "prod", tg.File())
	content, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	images := func() map[string]string {
		m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(dir, "prod"))
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, rn := range m.ToRNodeSlice() {
			if rn.GetKind() != "Deployment" {
				continue
			}
			cs, err := rn.Pipe(kyaml.Lookup("spec", "template", "spec", "containers"))
			if err != nil || cs == nil {
				t.Fatalf("containers: %v", err)
			}
			for _, c := range cs.Content() {
				n := kyaml.NewRNode(c)
				out[n.Field("name").Value.YNode().Value] = n.Field("image").Value.YNode().Value
			}
		}
		return out
	}
	before := images()
	if before["web"] != "ghcr.io/org/web:1.2.2" || before["api"] != "ghcr.io/org/api:0.1.0" {
		t.Fatalf("before: %v", before)
	}
	out, err := tg.Apply(content, pins)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, out, 0o644); err != nil {
		t.Fatal(err)
	}
	after := images()
	for alias, want := range map[string]string{"web": pins[0].Reference, "worker": pins[1].Reference, "api": pins[2].Reference} {
		if after[alias] != want {
			t.Errorf("container %s: image %q, want %q\n%s", alias, after[alias], want, out)
		}
	}
}
