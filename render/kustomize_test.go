package render

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/provider"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

func TestRenderKustomizeOverlayNamespaceAndTag(t *testing.T) {
	r, err := Render(context.Background(), filepath.Join(appsDir, "kustomize-overlay/overlay"), Options{RepoRoot: moduleRoot})
	if err != nil {
		t.Fatal(err)
	}
	d := find(t, r.Objects, "Deployment", "api")
	if ns := d.GetNamespace(); ns != "shop" {
		t.Errorf("namespace %q", ns)
	}
	// The base writes 1.0.0; the overlay's images transformer changed it.
	base, err := Render(context.Background(), filepath.Join(appsDir, "kustomize-overlay/base"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	bu, _ := FindImages(base.Objects)
	ou, _ := FindImages(r.Objects)
	if len(bu) != 1 || len(ou) != 1 || bu[0].Image.Tag != "1.0.0" || ou[0].Image.Tag == bu[0].Image.Tag {
		t.Errorf("base %v overlay %v", bu, ou)
	}
}

func TestRenderKustomizeLegacyOrder(t *testing.T) {
	r, err := Render(context.Background(), "testdata/kustomize/sorted", Options{})
	if err != nil {
		t.Fatal(err)
	}
	// kustomize build's default (legacy) order: Namespace first, then Service, then Deployment.
	want := []string{"Namespace/ns", "Service/s", "Deployment/d"}
	if got := ids(r.Objects); !slices.Equal(got, want) {
		t.Errorf("objects %v, want %v", got, want)
	}
}

// printedByCLI is what Render did before it took Kustomize's resources as nodes and
// what the kustomize CLI does: print the ResMap (AsYaml), parse the text, write it.
func printedByCLI(t testing.TB, m resmap.ResMap) (string, []string, error) {
	t.Helper()
	text, err := m.AsYaml()
	if err != nil {
		return "", nil, err
	}
	objs, err := parseYAML("kustomize build output", text)
	if err != nil {
		return "", nil, err
	}
	var b bytes.Buffer
	if err := Write(&b, objs); err != nil {
		t.Fatal(err)
	}
	return b.String(), ids(objs), nil
}

// printedFromNodes is what Render does now: each resource's printedForm.
func printedFromNodes(t testing.TB, m resmap.ResMap) (string, []string, error) {
	t.Helper()
	var objs []*kyaml.RNode
	for _, res := range m.ToRNodeSlice() {
		o, err := printedObjects(res)
		if err != nil {
			return "", nil, err
		}
		objs = append(objs, o...)
	}
	var b bytes.Buffer
	if err := Write(&b, objs); err != nil {
		t.Fatal(err)
	}
	return b.String(), ids(objs), nil
}

var updateGolden = flag.Bool("update", false, "rewrite the golden files of render tests")

// Kustomize output must keep the kustomize CLI's order and bytes: keys sorted as
// go-yaml v2 sorts them, comments and anchors dropped, numbers and strings spelled
// and quoted as the CLI prints them.
func TestRenderKustomizePrintedAsCLI(t *testing.T) {
	for _, dir := range []string{
		"testdata/kustomize/canonical",
		"testdata/kustomize/sorted",
		filepath.Join(appsDir, "kustomize-overlay/overlay"),
		filepath.Join(appsDir, "kustomize-overlay/base"),
	} {
		t.Run(dir, func(t *testing.T) {
			m, err := krusty.MakeKustomizer(kustomizeOptions()).Run(filesys.MakeFsOnDisk(), dir)
			if err != nil {
				t.Fatal(err)
			}
			want, wantIDs, err := printedByCLI(t, m)
			if err != nil {
				t.Fatal(err)
			}
			r, err := Render(context.Background(), dir, Options{RepoRoot: moduleRoot})
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if err := Write(&b, r.Objects); err != nil {
				t.Fatal(err)
			}
			if got := ids(r.Objects); !slices.Equal(got, wantIDs) {
				t.Errorf("order %v, want %v", got, wantIDs)
			}
			if b.String() != want {
				t.Errorf("output differs from the CLI's at %s", firstDiff(b.String(), want))
			}
		})
	}
}

// The golden file pins the CLI's bytes of the fixture, should kustomize's own
// printing change under us.
func TestRenderKustomizeGolden(t *testing.T) {
	r, err := Render(context.Background(), "testdata/kustomize/canonical", Options{})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Write(&b, r.Objects); err != nil {
		t.Fatal(err)
	}
	golden := "testdata/kustomize/canonical.out.yaml"
	if *updateGolden {
		if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if b.String() != string(want) {
		t.Errorf("output differs from %s at %s", golden, firstDiff(b.String(), string(want)))
	}
}

// FuzzKustomizePrintedForm checks printedForm against the CLI's printing on any
// resources kustomize accepts.
func FuzzKustomizePrintedForm(f *testing.F) {
	for _, s := range []string{
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {yes: 'on', n: '0777', t: '2024-01-02', e: '', l: \"a\\nb\\n\", s: 'x: y'}\n",
		"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec: {replicas: 0x3, f: 1.50, g: 1e-7, h: 1e21, i: -0.0, j: 12345678901234567890, k: 2024-01-02, m: ~}\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\ndata: {a10: x, a2: y, B: z, _x: w, \"10\": t, \"9\": n, \"a01\": p, \"a1\": q, \"\u00e9\": r, \"-\": s}\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cyclic}\ndata: {\"10\": a, \"1a\": b, \"9\": c}\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, labels: &l {a: b}}\nx: *l\ndata:\n  s: |-\n    trailing  \n  t: \"tab\\there\"\n  u: 'ünï ✓'\n",
		"apiVersion: v1\nkind: List\nitems: [{apiVersion: v1, kind: ConfigMap, metadata: {name: d}}]\n",
		"apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {k: !!binary aGVsbG8=}\nx: [1:20, +1, .inf, .5, 0b11, 1_000, '<<', -]\n",
	} {
		f.Add([]byte(s))
	}
	rmf := resmap.NewFactory(provider.NewDefaultDepProvider().GetResourceFactory())
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := rmf.NewResMapFromBytes(data)
		if err != nil {
			return
		}
		for _, res := range m.ToRNodeSlice() {
			if v, err := res.Map(); err == nil && ambiguousKeyOrder(v) {
				return // the CLI's own order differs from run to run
			}
		}
		want, wantIDs, werr := printedByCLI(t, m)
		got, gotIDs, gerr := printedFromNodes(t, m)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("the CLI's printing: %v; printedForm: %v", werr, gerr)
		}
		if werr != nil {
			return
		}
		if !slices.Equal(gotIDs, wantIDs) || got != want {
			t.Fatalf("printedForm differs from the CLI's printing at %s", firstDiff(got, want))
		}
	})
}

// firstDiff names the first line where got and want differ.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl || i >= len(g) || i >= len(w) {
			return fmt.Sprintf("line %d:\n got: %q\nwant: %q", i+1, gl, wl)
		}
	}
	return "no line (equal)"
}

// ambiguousKeyOrder reports whether some mapping in v has keys that go-yaml v2's
// order does not sort transitively (e.g. "10" < "1a" < "9" < "10").
func ambiguousKeyOrder(v any) bool {
	switch v := v.(type) {
	case []any:
		for _, it := range v {
			if ambiguousKeyOrder(it) {
				return true
			}
		}
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k, it := range v {
			if ambiguousKeyOrder(it) {
				return true
			}
			keys = append(keys, jsonText(k))
		}
		for _, a := range keys {
			for _, b := range keys {
				for _, c := range keys {
					if v2KeyLess(a, b) && v2KeyLess(b, c) && !v2KeyLess(a, c) {
						return true
					}
				}
			}
		}
	}
	return false
}
