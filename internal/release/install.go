package release

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Install is what the Kustomize component deploy/ adds to an Argo CD installation, for
// those who install without Kustomize.
type Install struct {
	// Resources are the component's resources rendered by the Kustomize API, as
	// `kustomize build` renders them, without a namespace (kubectl apply -n gives it).
	Resources []byte
	// Patch is the component's strategic-merge patch of argocd-repo-server (the
	// sidecar), as written: `kubectl patch --patch-file` applies it.
	Patch []byte
	// PatchTarget is the "kind name" the patch applies to.
	PatchTarget string
}

// RenderInstall renders the component in deployDir: its kustomization.yaml as a
// Kustomization without its patches, built with krusty from a copy of the directory
// in memory; and its one patch, which must be a strategic-merge patch of one object
// (kubectl patch applies one such patch). Anything else is an error that says so.
func RenderInstall(deployDir string) (*Install, error) {
	kpath := filepath.Join(deployDir, "kustomization.yaml")
	data, err := os.ReadFile(kpath)
	if err != nil {
		return nil, fmt.Errorf("release: install.yaml: %w", err)
	}
	var k types.Kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		return nil, fmt.Errorf("release: install.yaml: %s: %w", kpath, err)
	}
	if k.Kind != types.ComponentKind {
		return nil, fmt.Errorf("release: install.yaml: %s is a %q, want a %s (the component users add to Argo CD's own install)", kpath, k.Kind, types.ComponentKind)
	}
	patch, target, err := onePatch(deployDir, k.Patches)
	if err != nil {
		return nil, fmt.Errorf("release: install.yaml: %s: %w", kpath, err)
	}
	k.Kind, k.APIVersion, k.Patches = types.KustomizationKind, types.KustomizationVersion, nil
	resources, err := build(deployDir, &k)
	if err != nil {
		return nil, fmt.Errorf("release: install.yaml: rendering %s: %w", deployDir, err)
	}
	return &Install{Resources: resources, Patch: patch, PatchTarget: target}, nil
}

// onePatch returns the one patch of a component and the object it patches.
func onePatch(dir string, patches []types.Patch) ([]byte, string, error) {
	if len(patches) != 1 {
		return nil, "", fmt.Errorf("%d patches; release knows how to ship one (kubectl patch applies one patch)", len(patches))
	}
	p := patches[0]
	if p.Target != nil || p.Options != nil {
		return nil, "", fmt.Errorf("patch %q has a target or options; release ships only strategic-merge patches naming their object", p.Path)
	}
	data := []byte(p.Patch)
	if p.Path != "" {
		var err error
		if data, err = os.ReadFile(filepath.Join(dir, filepath.FromSlash(p.Path))); err != nil {
			return nil, "", err
		}
	}
	var obj struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal(data, &obj); err != nil || obj.Kind == "" || obj.Metadata.Name == "" {
		return nil, "", fmt.Errorf("patch %q is not one object with a kind and a name (a strategic-merge patch): %v", p.Path, err)
	}
	return data, obj.Kind + " " + obj.Metadata.Name, nil
}

// build runs krusty on a copy of dir in memory whose kustomization.yaml is k.
func build(dir string, k *types.Kustomization) ([]byte, error) {
	mem := filesys.MakeFsInMemory()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if rel == "image" || d.Name() == "testdata" {
				return filepath.SkipDir // the image's Go code and test data
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") || !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return mem.WriteFile(filepath.Join("/deploy", rel), b)
	})
	if err != nil {
		return nil, err
	}
	kdata, err := yaml.Marshal(k)
	if err != nil {
		return nil, err
	}
	if err := mem.WriteFile("/deploy/kustomization.yaml", kdata); err != nil {
		return nil, err
	}
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(mem, "/deploy")
	if err != nil {
		return nil, err
	}
	out, err := resMap.AsYaml()
	if err != nil {
		return nil, err
	}
	return bytes.TrimSpace(out), nil
}
