//go:build tools

// Package tools pins Gitea's main package, which build.sh builds; it is never compiled.
package tools

import _ "gitea.dev"
