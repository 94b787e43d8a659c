// Package docs holds the user documentation (Markdown) and, in docs_test.go, the test
// that keeps it true to the code: every plugin parameter, policy file key, daemon
// setting, git: key, environment variable, registries key and credential source the
// code accepts is documented; the settings table of configuration.md is generated from
// config.Settings (go test ./docs -update); the examples parse; every
// argocd-image-resolver subcommand and flag the docs show exists; relative links and
// their anchors resolve.
package docs
