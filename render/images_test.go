package render

import (
	"errors"
	"slices"
	"strings"
	"testing"

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
		{"batch/v1", "Job", "spec:\n" + template, "spec.template.spec"},
		{"v1", "ReplicationController", "spec:\n" + template, "spec.template.spec"},
		{"v1", "PodTemplate", indent(template, -2), "template.spec"},
		{"argoproj.io/v1alpha1", "Rollout", "spec:\n" + template, "spec.template.spec"},
		{"batch/v1", "CronJob", "spec:\n  jobTemplate:\n    spec:\n" + indent(template, 4), "spec.jobTemplate.spec.template.spec"},
		{"batch/v1beta1", "CronJob", "spec:\n  jobTemplate:\n    spec:\n" + indent(template, 4), "spec.jobTemplate.spec.template.spec"},
		// Not workloads, or workloads of another group: nothing is read.
		{"example.com/v1", "Deployment", "spec:\n" + template, ""},
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

func TestFindImagesExtraPaths(t *testing.T) {
	objs := mustParse(t, `apiVersion: demo.local/v1
kind: Widget
metadata: {name: w}
spec:
  image: registry.demo.local/demo/widget:1
  sidecars:
    - name: log
      image: registry.demo.local/demo/log:2
    - image: registry.demo.local/demo/metrics:3
    - name: noimage
---
apiVersion: other.local/v1
kind: Widget
metadata: {name: other}
spec:
  image: registry.demo.local/demo/other:1
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cm}
data:
  image: registry.demo.local/demo/cm:1
`)
	extra := []ExtraPath{
		{Group: "demo.local", Kind: "Widget", Path: "spec.image"},
		{Group: "demo.local", Kind: "Widget", Path: "spec.sidecars[].image"},
		{Group: "demo.local", Kind: "Widget", Path: "spec.missing[].image"},
		{Group: "", Kind: "ConfigMap", Path: "data.image"},
	}
	uses, err := FindImages(objs, extra...)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, u := range uses {
		got = append(got, u.Object.Name+" "+u.Path+" "+u.Raw)
	}
	want := []string{
		"w spec.image registry.demo.local/demo/widget:1",
		"w spec.sidecars[log].image registry.demo.local/demo/log:2",
		"w spec.sidecars[1].image registry.demo.local/demo/metrics:3",
		"cm data.image registry.demo.local/demo/cm:1",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}

	for _, bad := range []ExtraPath{
		{Kind: "Widget", Path: ""},
		{Kind: "Widget", Path: "spec..image"},
		{Kind: "Widget", Path: "spec.containers[0].image"},
		{Kind: "Widget", Path: "spec.containers[]"},
		{Kind: "", Path: "spec.image"},
	} {
		if _, err := FindImages(objs, bad); err == nil || bad.Validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if _, err := FindImages(objs, ExtraPath{Group: "demo.local", Kind: "Widget", Path: "spec.image.x"}); err == nil {
		t.Error("a path through a string was accepted")
	}
}

func TestWorkloadPlatforms(t *testing.T) {
	tests := []struct {
		name, spec string
		want       string
	}{
		{"none", ``, ""},
		{"nodeSelector arch", `nodeSelector: {kubernetes.io/arch: arm64}`, "linux/arm64"},
		{"nodeSelector legacy label", `nodeSelector: {beta.kubernetes.io/arch: amd64, beta.kubernetes.io/os: linux}`, "linux/amd64"},
		{"nodeSelector os only", `nodeSelector: {kubernetes.io/os: linux}`, ""},
		{"nodeSelector windows", `nodeSelector: {kubernetes.io/os: windows, kubernetes.io/arch: amd64}`, "windows/amd64"},
		{"nodeSelector other labels", `nodeSelector: {disktype: ssd}`, ""},
		{"conflicting labels", `nodeSelector: {kubernetes.io/arch: arm64, beta.kubernetes.io/arch: amd64}`, ""},
		{"affinity In two arches", `affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions:
            - {key: kubernetes.io/arch, operator: In, values: [arm64, amd64]}`, "linux/amd64,linux/arm64"},
		{"affinity two terms united", `affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions:
            - {key: kubernetes.io/arch, operator: In, values: [arm64]}
        - matchExpressions:
            - {key: kubernetes.io/arch, operator: In, values: [amd64, arm64]}
            - {key: kubernetes.io/os, operator: In, values: [linux]}`, "linux/amd64,linux/arm64"},
		{"affinity term without arch leaves it open", `affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions:
            - {key: kubernetes.io/arch, operator: In, values: [arm64]}
        - matchExpressions:
            - {key: topology.kubernetes.io/zone, operator: In, values: [a]}`, ""},
		{"affinity NotIn does not enumerate", `affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions:
            - {key: kubernetes.io/arch, operator: NotIn, values: [amd64]}`, ""},
		{"affinity and nodeSelector both hold", `nodeSelector: {kubernetes.io/arch: arm64}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions:
            - {key: kubernetes.io/arch, operator: In, values: [arm64, amd64]}`, "linux/arm64"},
		{"expressions in a term are ANDed", `affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions:
            - {key: kubernetes.io/arch, operator: In, values: [arm64, amd64]}
            - {key: beta.kubernetes.io/arch, operator: In, values: [amd64, s390x]}`, "linux/amd64"},
		{"two oses by term", `affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions:
            - {key: kubernetes.io/os, operator: In, values: [windows]}
            - {key: kubernetes.io/arch, operator: In, values: [amd64]}
        - matchExpressions:
            - {key: kubernetes.io/arch, operator: In, values: [arm64]}`, "linux/arm64,windows/amd64"},
		{"preferred affinity is ignored", `affinity:
  nodeAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 1
        preference:
          matchExpressions:
            - {key: kubernetes.io/arch, operator: In, values: [arm64]}`, ""},
		{"arm variant label value normalised", `nodeSelector: {kubernetes.io/arch: aarch64}`, "linux/arm64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  template:\n    spec:\n" +
				indent(tt.spec, 6) + "\n      containers: [{name: c, image: nginx}]\n"
			uses, err := FindImages(mustParse(t, src))
			if err != nil {
				t.Fatalf("%v\n%s", err, src)
			}
			if len(uses) != 1 {
				t.Fatalf("uses %v", uses)
			}
			if got := platformList(uses[0].Platforms); got != tt.want {
				t.Errorf("platforms %q, want %q", got, tt.want)
			}
			if tt.want == "" && uses[0].Platforms != nil {
				t.Errorf("platforms %#v, want nil", uses[0].Platforms)
			}
		})
	}
}
