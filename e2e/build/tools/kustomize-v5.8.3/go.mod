// kustomize v5.8.3, the one Argo CD v3.6.1 ships (its hack/tool-versions.sh), with the
// requirements of its own go.mod but one: the module proxy refuses its
// k8s.io/kube-openapi v0.0.0-20261001230523-97fa35140926 (403), so the nearest later
// version the proxy serves is used. go.sum filled by e2e/build/build.sh.
module argocd-image-resolver-e2e/build/tools/kustomize-v5.8.3

go 1.27.0

require sigs.k8s.io/kustomize/kustomize/v5 v5.8.3

replace k8s.io/kube-openapi => k8s.io/kube-openapi v0.0.0-20261014044854-ca3452a79603
