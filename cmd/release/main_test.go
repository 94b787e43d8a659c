package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestRunRejects checks that bad input is refused, named, before anything is built.
func TestRunRejects(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no version", nil, `release: VERSION "" is not vX.Y.Z`},
		{"make's default VERSION", []string{"-version", "0d7ecde-dirty"}, `VERSION "0d7ecde-dirty" is not vX.Y.Z (e.g. make release VERSION=v0.1.0)`},
		{"stray argument", []string{"-version", "v0.1.0", "extra"}, `release: unexpected arguments ["extra"]`},
		{"unknown flag", []string{"-push"}, "flag provided but not defined: -push"},
		{"no checkout", []string{"-version", "v0.1.0", "-root", "/nonexistent/root"}, "/nonexistent/root/CHANGELOG.md"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), tt.args, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("run(%q) = %v, want an error saying %q", tt.args, err, tt.want)
			}
			if stdout.Len() > 0 {
				t.Errorf("wrote %q on failure", stdout.String())
			}
		})
	}
}
