// Package e2e proves argocd-image-resolver against Argo CD's own code: the tests in
// this directory run Argo CD v2's cmp-server and repo-server manifest generation in
// process (see harness), a real distribution registry and real git repositories, and
// drive the resolver as the built binary that plugin.yaml names.
//
// Run: make e2e-registry && cd e2e && go test ./...
package e2e
