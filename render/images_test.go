package render

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/kyaml/kio"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

func platformList(ps []resolve.Platform) string {
	return strings.Join(resolve.PlatformStrings(ps), ",")
}

func mustParse(t testing.TB, src string) []*kyaml.RNode {
	t.Helper()
	objs, err := parseYAML("test.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

const podSpec = `
      initContainers:
        - name: init
          image: registry.demo.local/demo/init:1
      containers:
        - name: app
          image: registry.demo.local/demo/app:2
      ephemeralContainers:
        - name: debug
          image: busybox`

func indent(s string, by int) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if l != "" {
			if by > 0 {
				lines[i] = strings.Repeat(" ", by) + l
			} else {
				lines[i] = l[-by:]
			}
		}
	}
	return strings.Join(lines, "\n")
}

func TestFindImagesWorkloadKinds(t *testing.T) {
	template := "  template:\n    spec:" + podSpec + "\n"
	tests := []struct {
		apiVersion, kind string
		body             string
		prefix           string // "" means: no images expected
	}{
		{"v1", "Pod", "spec:" + indent(podSpec, -4) + "\n", "spec"},
		{"apps/v1", "Deployment", "spec:\n" + template, "spec.template.spec"},
		{"apps/v1", "StatefulSet", "spec:\n" + template, "spec.template.spec"},
		{"apps/v1", "DaemonSet", "spec:\n" + template, "spec.template.spec"},
		{"apps/v1", "ReplicaSet", "spec:\n" + template, "spec.template.spec"},
		{"extensions/v1beta1", "Deployment", "spec:\n" + template, "spec.template.spec"},
		{"extensions/v1beta1", "StatefulSet", "spec:\n" + template, "spec.template.spec"},
		{"extensions/v1beta1", "DaemonSet", "spec:\n" + template, "spec.template.spec"},
		{"extensions/v1beta1", "ReplicaSet", "spec:\n" + template, "spec.template.spec"},
		{"batch/v1", "Job", "spec:\n" + template, "spec.template.spec"},
		{"v1", "ReplicationController", "spec:\n" + template, "spec.template.spec"},
		{"v1", "PodTemplate", indent(template, -2), "template.spec"},
		{"argoproj.io/v1alpha1", "Rollout", "spec:\n" + template, "spec.template.spec"},
		{"batch/v1", "CronJob", "spec:\n  jobTemplate:\n    spec:\n" + indent(template, 4), "spec.jobTemplate.spec.template.spec"},
		{"batch/v1beta1", "CronJob", "spec:\n  jobTemplate:\n    spec:\n" + indent(template, 4), "spec.jobTemplate.spec.template.spec"},
		// Not workloads, or workloads of another group: nothing is read.
		{"example.com/v1", "Deployment", "spec:\n" + template, ""},
		{"v1", "Deployment", "spec:\n" + template, ""},
		{"batch/v1", "Deployment", "spec:\n" + template, ""},
		{"apps/v1", "Job", "spec:\n" + template, ""},
		{"apps/v1", "Pod", "spec:" + indent(podSpec, -4) + "\n", ""},
		{"argoproj.io/v1alpha1", "Deployment", "spec:\n" + template, ""},
		{"batch/v1", "CronJob", "spec:\n" + template, ""}, // a CronJob's pod template is under jobTemplate
		{"v1", "ConfigMap", "data:\n  image: nginx\n", ""},
		{"argoproj.io/v1alpha1", "Rollout", "spec:\n  workloadRef: {kind: Deployment, name: x}\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.apiVersion+"/"+tt.kind, func(t *testing.T) {
			src := "apiVersion: " + tt.apiVersion + "\nkind: " + tt.kind + "\nmetadata:\n  name: w\n  namespace: ns\n" + tt.body
			uses, err := FindImages(mustParse(t, src))
			if err != nil {
				t.Fatalf("%v\n%s", err, src)
			}
			if tt.prefix == "" {
				if len(uses) != 0 {
					t.Fatalf("found %v", uses)
				}
				return
			}
			want := []string{
				tt.prefix + ".containers[app].image app registry.demo.local/demo/app:2",
				tt.prefix + ".initContainers[init].image init registry.demo.local/demo/init:1",
				tt.prefix + ".ephemeralContainers[debug].image debug busybox",
			}
			var got []string
			for _, u := range uses {
				got = append(got, u.Path+" "+u.Container+" "+u.Raw)
				if u.Object != (ObjectRef{APIVersion: tt.apiVersion, Kind: tt.kind, Namespace: "ns", Name: "w"}) {
					t.Errorf("object %+v", u.Object)
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("got %q\nwant %q\n%s", got, want, src)
			}
			if uses[2].Image.Key() != "docker.io/library/busybox" || uses[0].Image.Tag != "2" {
				t.Errorf("parsed %+v %+v", uses[2].Image, uses[0].Image)
			}
		})
	}
}

func TestFindImagesListItemsAndUnnamed(t *testing.T) {
	objs := mustParse(t, `apiVersion: v1
kind: List
items:
  - apiVersion: v1
    kind: Pod
    metadata: {name: p}
    spec:
      containers:
        - image: nginx:1.25
        - name: side
          image: ghcr.io/org/side@sha256:0000000000000000000000000000000000000000000000000000000000000000
`)
	uses, err := FindImages(objs)
	if err != nil {
		t.Fatal(err)
	}
	if len(uses) != 2 || uses[0].Path != "spec.containers[0].image" || uses[1].Image.Digest == "" {
		t.Fatalf("%+v", uses)
	}
}

func TestFindImagesErrors(t *testing.T) {
	head := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: shop}\nspec:\n  template:\n    spec:\n"
	tests := []struct {
		name, body string
		has        []string
	}{
		{"number", "      containers: [{name: c, image: 42}]", []string{"Deployment.apps/shop/web", "spec.template.spec.containers[c].image", "number", "42", "not a string"}},
		{"null", "      containers: [{name: c, image: null}]", []string{"containers[c].image", "null"}},
		{"mapping", "      containers: [{name: c, image: {repo: x}}]", []string{"containers[c].image", "mapping"}},
		{"bad reference", "      containers: [{name: c, image: 'UPPER/Case:1'}]", []string{"containers[c].image", "UPPER/Case:1"}},
		{"empty", "      containers: [{name: c, image: ''}]", []string{"containers[c].image"}},
		{"containers not a list", "      containers: {name: c}", []string{"spec.template.spec.containers", "not a list"}},
		{"container not a mapping", "      containers: [nginx]", []string{"spec.template.spec.containers[0]", "not a container"}},
		{"pod spec not a mapping", "      42", []string{"spec.template.spec", "not a mapping"}},
		{"null container", "      containers: [null]", []string{"spec.template.spec.containers[0]", "null", "not a container"}},
		{"nodeSelector not a mapping", "      nodeSelector: [a]\n      containers: [{name: c, image: nginx}]", []string{"spec.template.spec.nodeSelector", "not a mapping"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FindImages(mustParse(t, head+tt.body+"\n"))
			if err == nil {
				t.Fatal("no error")
			}
			t.Log(err)
			var fe *ImageFieldError
			if !errors.As(err, &fe) {
				t.Errorf("not an ImageFieldError: %T", err)
			}
			for _, h := range tt.has {
				if !strings.Contains(err.Error(), h) {
					t.Errorf("error %q does not contain %q", err, h)
				}
			}
		})
	}
}

// imageFields is a kio.Filter: it returns the objects it was given, unchanged, and
// collects their image fields.
func TestImageFieldsFilter(t *testing.T) {
	objs := mustParse(t, "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, image: nginx}]}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n")
	var before bytes.Buffer
	if err := Write(&before, objs); err != nil {
		t.Fatal(err)
	}
	f, err := newImageFields(nil)
	if err != nil {
		t.Fatal(err)
	}
	var filter kio.Filter = f
	out, err := filter.Filter(objs)
	if err != nil {
		t.Fatal(err)
	}
	var after bytes.Buffer
	if err := Write(&after, out); err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || out[0] != objs[0] || after.String() != before.String() {
		t.Errorf("the filter changed its input:\n%s", after.String())
	}
	if len(f.uses) != 1 || f.uses[0].Path != "spec.containers[a].image" {
		t.Errorf("uses %+v", f.uses)
	}
}
