package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestRunRejects checks that each missing or bad input is named, with what is
// accepted, before anything is built or written.
func TestRunRejects(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no output", []string{"-tag", "ghcr.io/x/y:z", "-source-date-epoch", "1"}, "give -layout DIR, -tar FILE or both"},
		{"tar without layout", []string{"-tar", "out.tar", "-tag", "ghcr.io/x/y:z", "-source-date-epoch", "1"}, "give -layout DIR too"},
		{"no tag", []string{"-layout", "out", "-source-date-epoch", "1"}, "-tag is required"},
		{"bad tag", []string{"-layout", "out", "-tag", "ghcr.io/x/y:bad+tag", "-source-date-epoch", "1"}, `-tag "ghcr.io/x/y:bad+tag"`},
		{"no registry", []string{"-layout", "out", "-tag", "x/y:z", "-source-date-epoch", "1"}, "registry to be explicitly defined"},
		{"no time", []string{"-layout", "out", "-tag", "ghcr.io/x/y:z"}, "set SOURCE_DATE_EPOCH or -source-date-epoch"},
		{"bad time", []string{"-layout", "out", "-tag", "ghcr.io/x/y:z", "-source-date-epoch", "yesterday"}, `SOURCE_DATE_EPOCH "yesterday"`},
		{"no binaries", []string{"-layout", "out", "-tag", "ghcr.io/x/y:z", "-source-date-epoch", "1", "-version", "v1", "-revision", "abc"}, "give -bin DIR per platform or -build ARCHS"},
		{"empty binaries directory", []string{"-layout", "out", "-tag", "ghcr.io/x/y:z", "-source-date-epoch", "1", "-version", "v1", "-revision", "abc", "-bin", "/nonexistent/bin"}, "/nonexistent/bin/argocd-image-resolver"},
		{"no version", []string{"-layout", "out", "-tag", "ghcr.io/x/y:z", "-source-date-epoch", "1", "-bin", "."}, "Version is empty"},
		{"bad -build", []string{"-layout", "out", "-tag", "ghcr.io/x/y:z", "-source-date-epoch", "1", "-version", "v1", "-revision", "abc", "-build", "linux/arm64"}, `-build "linux/arm64": want linux architectures`},
		{"push without layout", []string{"-push", "ghcr.io/x/y:z"}, "-push needs -layout DIR"},
		{"bad push ref", []string{"-push", "y:z", "-layout", "out"}, `-push "y:z"`},
		{"push of no layout", []string{"-push", "ghcr.io/x/y:z", "-layout", "/nonexistent/layout"}, "/nonexistent/layout"},
		{"missing CA file", []string{"-ca-certs", "/nonexistent/ca.pem", "-rootfs", "x"}, "/nonexistent/ca.pem"},
		{"stray argument", []string{"-tar", "out.tar", "extra"}, `unexpected arguments ["extra"]`},
		{"unknown flag", []string{"-publish"}, "flag provided but not defined: -publish"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), tt.args, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error()+stderr.String(), tt.want) {
				t.Errorf("run(%q) = %v (stderr %q), want an error saying %q", tt.args, err, stderr.String(), tt.want)
			}
			if stdout.Len() > 0 {
				t.Errorf("wrote %q on failure", stdout.String())
			}
		})
	}
}
