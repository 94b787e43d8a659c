package argoglob

import (
	"strings"
	"testing"
)

func TestMatch(t *testing.T) {
	tests := []struct {
		pattern, rel string
		want         bool
	}{
		// Argo CD's TestFindResources (reposerver/repository/repository_test.go).
		{"subdir/deploymentSub.yaml", "subdir/deploymentSub.yaml", true},
		{"subdir/deploymentSub.yaml", "deployment.yaml", false},
		{"*.yaml", "deployment.yaml", true},
		{"*.yaml", "subdir/deploymentSub.yaml", true}, // no separator: * crosses "/"
		{"**/*.yaml", "subdir/deploymentSub.yaml", true},
		{"**/*.yaml", "deployment.yaml", false}, // the "/" is a literal
		{"nothing.yaml", "deployment.yaml", false},
		// docs/user-guide/directory.md.
		{"{*.yml,*.yaml}", "a.yml", true},
		{"{*.yml,*.yaml}", "a.json", false},
		{"{config.json,env-usw2/*}", "config.json", true},
		{"{config.json,env-usw2/*}", "env-usw2/configmap.yaml", true},
		{"{config.json,env-usw2/*}", "env-use2/configmap.yaml", false},
		{"some-directory/*", "some-directory/a/b.yaml", true},
		{"{a.yaml,b.yaml}", "b.yaml", true},
		{"{a.yaml,b.yaml}", "c.yaml", false},
		{"?.yaml", "a.yaml", true},
		{"[a-c].yaml", "b.yaml", true},
		{"[!a-c].yaml", "b.yaml", false},
		{`\*.yaml`, "*.yaml", true},
		{`\*.yaml`, "a.yaml", false},
		{".*", ".hidden.yaml", true},
	}
	for _, tt := range tests {
		p, err := Compile(tt.pattern)
		if err != nil {
			t.Errorf("Compile(%q): %v", tt.pattern, err)
			continue
		}
		if got := p.Match(tt.rel); got != tt.want {
			t.Errorf("%q matches %q: %v, want %v", tt.pattern, tt.rel, got, tt.want)
		}
		if p.String() != tt.pattern {
			t.Errorf("String() = %q", p.String())
		}
	}
}

func TestCompileErrors(t *testing.T) {
	tests := []struct{ pattern, want string }{
		{"[", "unclosed ["},
		{"[a-", "unclosed ["},
		{"{a,b", "unclosed {"},
		{"{a,{b,c}", "unclosed {"},
		{`a\`, `trailing \`},
		{"a\xff", "invalid UTF-8"},
	}
	for _, tt := range tests {
		_, err := Compile(tt.pattern)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "not a glob pattern") {
			t.Errorf("Compile(%q): err %v, want one with %q", tt.pattern, err, tt.want)
		}
	}
	// Accepted: a "}" or "]" with nothing to close is a literal; braces inside a
	// class are literal.
	for _, ok := range []string{"}", "a]", "[{].yaml", `\{a`, ""} {
		if _, err := Compile(ok); err != nil {
			t.Errorf("Compile(%q): %v", ok, err)
		}
	}
}
