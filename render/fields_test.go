package render

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

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

// An operator's path on a built-in kind is walked after the pod template, by the
// same walker, without the pod's platforms or a container name.
func TestFindImagesExtraPathOnWorkload(t *testing.T) {
	objs := mustParse(t, `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  annotations: {sidecar-image: registry.demo.local/demo/sidecar:3}
spec:
  template:
    spec:
      nodeSelector: {kubernetes.io/arch: arm64}
      containers: [{name: web, image: registry.demo.local/demo/web:1}]
      initContainers: [{image: registry.demo.local/demo/init:2}]
`)
	uses, err := FindImages(objs, ExtraPath{Group: "apps", Kind: "Deployment", Path: "metadata.annotations.sidecar-image"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, u := range uses {
		got = append(got, u.Path+" "+u.Container+" "+platformList(u.Platforms))
	}
	want := []string{
		"spec.template.spec.containers[web].image web linux/arm64",
		"spec.template.spec.initContainers[0].image  linux/arm64",
		"metadata.annotations.sidecar-image  ",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

// Null items of an operator's list are skipped (a container list's are an error,
// TestFindImagesErrors); other items that are not mappings are errors.
func TestFindImagesExtraPathItems(t *testing.T) {
	extra := ExtraPath{Group: "demo.local", Kind: "Widget", Path: "spec.sidecars[].image"}
	uses, err := FindImages(mustParse(t, "apiVersion: demo.local/v1\nkind: Widget\nmetadata: {name: w}\nspec: {sidecars: [null, {image: x}]}\n"), extra)
	if err != nil || len(uses) != 1 || uses[0].Path != "spec.sidecars[1].image" {
		t.Errorf("uses %+v, err %v", uses, err)
	}
	_, err = FindImages(mustParse(t, "apiVersion: demo.local/v1\nkind: Widget\nmetadata: {name: w}\nspec: {sidecars: [{image: x}, 3]}\n"), extra)
	var fe *ImageFieldError
	if !errors.As(err, &fe) || fe.Path != "spec.sidecars[1]" || !strings.Contains(err.Error(), "is a number, not a mapping") {
		t.Errorf("err %v", err)
	}
}

func TestParseExtraPath(t *testing.T) {
	good := []struct {
		in   string
		want ExtraPath
	}{
		{"Workflow.argoproj.io:spec.templates[].container.image", ExtraPath{Group: "argoproj.io", Kind: "Workflow", Path: "spec.templates[].container.image"}},
		{"ConfigMap:data.image", ExtraPath{Kind: "ConfigMap", Path: "data.image"}},
		{" Memcached.cache.example.com:spec.image ", ExtraPath{Group: "cache.example.com", Kind: "Memcached", Path: "spec.image"}},
		{"App2.x-y.io:spec.image", ExtraPath{Group: "x-y.io", Kind: "App2", Path: "spec.image"}},
	}
	for _, tt := range good {
		got, err := ParseExtraPath(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseExtraPath(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
	bad := []struct{ in, why string }{
		{"", "no \":\""},
		{"Workflow", "no \":\""},
		{"Workflow:", "the path is empty"},
		{":spec.image", "the kind is empty"},
		{".argoproj.io:spec.image", "the kind is empty"},
		{"Work flow:spec.image", "letters and digits"},
		{"2Workflow:spec.image", "starting with a letter"},
		{"Workflow.Argoproj.IO:spec.image", "lower-case DNS labels"},
		{"Workflow.argoproj..io:spec.image", "lower-case DNS labels"},
		{"Workflow.-x.io:spec.image", "lower-case DNS labels"},
		{"Workflow:spec..image", "segment 2"},
		{"Workflow:spec.containers[]", "ends in a list"},
		{"Workflow:spec.containers[0].image", "is not a field name"},
	}
	for _, tt := range bad {
		_, err := ParseExtraPath(tt.in)
		var ie *resolve.InputError
		if !errors.As(err, &ie) {
			t.Errorf("ParseExtraPath(%q): %v, not an InputError", tt.in, err)
			continue
		}
		msg := err.Error()
		if ie.Value != tt.in || !strings.Contains(msg, tt.why) || !strings.Contains(msg, "Kind[.group]:path, e.g. Workflow.argoproj.io:spec.templates[].container.image") {
			t.Errorf("ParseExtraPath(%q): %s", tt.in, msg)
		}
	}
}
