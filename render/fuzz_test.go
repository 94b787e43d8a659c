package render

import (
	"bytes"
	"testing"
)

func FuzzFindImages(f *testing.F) {
	for _, s := range []string{
		"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  template:\n    spec:\n      nodeSelector: {kubernetes.io/arch: arm64}\n      containers: [{name: c, image: nginx:1}]\n",
		"apiVersion: batch/v1\nkind: CronJob\nspec: {jobTemplate: {spec: {template: {spec: {initContainers: [{image: 5}]}}}}}\n",
		"apiVersion: v1\nkind: List\nitems: [{apiVersion: v1, kind: Pod, spec: {containers: [{image: &a x}, {image: *a}]}}]\n",
		"apiVersion: v1\nkind: Pod\nspec:\n  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/arch, operator: In, values: [arm64, amd64]}]}, {}]}}}\n  containers: [{image: ghcr.io/o/a@sha256:0000000000000000000000000000000000000000000000000000000000000000}]\n",
		"apiVersion: demo.local/v1\nkind: Widget\nspec: {image: x, sidecars: [{image: y}, 3, null]}\n",
		"---\n---\nnull\n",
		"[1, 2]\n",
		"kind: Pod\nspec: {containers: {image: x}}\n",
	} {
		f.Add([]byte(s))
	}
	extra := []ExtraPath{
		{Group: "demo.local", Kind: "Widget", Path: "spec.image"},
		{Group: "demo.local", Kind: "Widget", Path: "spec.sidecars[].image"},
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, err := parseYAML("fuzz.yaml", data)
		if err != nil {
			return
		}
		uses, err := FindImages(objs, extra...)
		if err != nil {
			return
		}
		for _, u := range uses {
			if err := SetImage(u, "registry.demo.local/demo/x:1"); err != nil {
				t.Fatalf("SetImage on a found image: %v", err)
			}
		}
		var b bytes.Buffer
		_ = Write(&b, objs)
	})
}
