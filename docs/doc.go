// Package docs holds the user documentation (Markdown) and, in docs_test.go, the test
// that keeps it true to the code: every plugin parameter, policy file key, daemon
// setting, environment variable and registries key the code accepts is documented,
// the settings table of configuration.md is generated from config.Settings, the
// examples parse, and relative links resolve.
package docs
