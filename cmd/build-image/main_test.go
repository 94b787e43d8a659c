package main

import (
	"bytes"
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
		{"no tag", []string{"-tar", "out.tar", "-source-date-epoch", "1"}, "-tag is required"},
		{"bad tag", []string{"-tar", "out.tar", "-tag", "ghcr.io/x/y:bad+tag", "-source-date-epoch", "1"}, `-tag "ghcr.io/x/y:bad+tag"`},
		{"no registry", []string{"-tar", "out.tar", "-tag", "x/y:z", "-source-date-epoch", "1"}, "registry to be explicitly defined"},
		{"no time", []string{"-tar", "out.tar", "-tag", "ghcr.io/x/y:z"}, "set SOURCE_DATE_EPOCH or -source-date-epoch"},
		{"bad time", []string{"-tar", "out.tar", "-tag", "ghcr.io/x/y:z", "-source-date-epoch", "yesterday"}, `SOURCE_DATE_EPOCH "yesterday"`},
		{"no binaries", []string{"-tar", "out.tar", "-tag", "ghcr.io/x/y:z", "-source-date-epoch", "1", "-version", "v1", "-revision", "abc"}, "BinDir is empty"},
		{"no version", []string{"-tar", "out.tar", "-tag", "ghcr.io/x/y:z", "-source-date-epoch", "1", "-bin", "."}, "Version is empty"},
		{"missing CA file", []string{"-ca-certs", "/nonexistent/ca.pem", "-rootfs", "x"}, "/nonexistent/ca.pem"},
		{"stray argument", []string{"-tar", "out.tar", "extra"}, `unexpected arguments ["extra"]`},
		{"unknown flag", []string{"-push"}, "flag provided but not defined: -push"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(tt.args, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error()+stderr.String(), tt.want) {
				t.Errorf("run(%q) = %v (stderr %q), want an error saying %q", tt.args, err, stderr.String(), tt.want)
			}
			if stdout.Len() > 0 {
				t.Errorf("wrote %q on failure", stdout.String())
			}
		})
	}
}
