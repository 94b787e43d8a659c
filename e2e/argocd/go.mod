// The whole-Argo CD tests: a real Argo CD control plane (etcd, kube-apiserver, redis,
// argocd-server, -repo-server, -application-controller, the image-resolver sidecar)
// started as processes on loopback, driven through the argocd CLI and kubectl.
// Its own module, so that it depends on neither the main module nor Argo CD's code.
module github.com/argocd-image-resolver/argocd-image-resolver/e2e/argocd

go 1.26.0

require sigs.k8s.io/yaml v1.4.0
