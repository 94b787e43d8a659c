package image

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestMakefileBuildsAsShipped holds the Makefile's go commands on the main module
// (build, vet, test, run) to the flags the image's binaries are built with
// (GoBuildEnv's CGO_ENABLED=0, GoBuildArgs's -trimpath), through its AS_SHIPPED
// prefix, and the e2e builds of this module's binaries likewise: the tests then run
// the code as it ships, and vet, the tests, the image's amd64 build and the e2e
// suites compile its packages once between them (cgo and -trimpath each change
// every package's build).
func TestMakefileBuildsAsShipped(t *testing.T) {
	root := moduleRoot(t)
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	var wantEnv []string
	for _, kv := range GoBuildEnv("amd64") {
		if !strings.HasPrefix(kv, "GOOS=") && !strings.HasPrefix(kv, "GOARCH=") {
			wantEnv = append(wantEnv, kv)
		}
	}
	if !slices.Contains(GoBuildArgs("v", "c", "out"), "-trimpath") {
		t.Fatal("GoBuildArgs no longer builds with -trimpath: this test and the Makefile's AS_SHIPPED need to follow")
	}
	def := regexp.MustCompile(`(?m)^AS_SHIPPED := (.*)$`).FindSubmatch(mk)
	if def == nil {
		t.Fatal("Makefile: no AS_SHIPPED := line")
	}
	for _, w := range append(wantEnv, "-trimpath") {
		if !strings.Contains(string(def[1]), w) {
			t.Errorf("Makefile: AS_SHIPPED is %q, without the image's %s", def[1], w)
		}
	}
	goCmd := regexp.MustCompile(`\$\(GO\) (build|vet|test|run)\b`)
	checked := 0
	for i, line := range strings.Split(string(mk), "\n") {
		cmd := strings.TrimSpace(line)
		if !strings.HasPrefix(line, "\t") || !goCmd.MatchString(cmd) || strings.HasPrefix(cmd, "cd ") {
			continue // not a recipe, or another module's (e2e, e2e/argocd)
		}
		checked++
		if !strings.Contains(cmd, "$(AS_SHIPPED) $(GO) ") {
			t.Errorf("Makefile:%d: %q builds the main module without $(AS_SHIPPED)", i+1, cmd)
		}
	}
	if checked < 6 { // build (2), demo, vet, test-unit, bench, fuzz, image, release
		t.Errorf("Makefile: only %d main-module go commands found; the parse above no longer reads it", checked)
	}

	// Each list is what one line of the file has together.
	for file, lines := range map[string][][]string{
		"e2e/build/build.sh":   {{"CGO_ENABLED=0", "-trimpath", "go build", "./cmd/..."}},
		"e2e/harness/build.go": {{`"build", "-trimpath"`}, {"cmd.Env", `"CGO_ENABLED=0"`}},
	} {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range lines {
			if !slices.ContainsFunc(strings.Split(string(b), "\n"), func(l string) bool {
				return !slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(l, w) })
			}) {
				t.Errorf("%s: no line with all of %q: it builds this module's binaries otherwise than the image", file, want)
			}
		}
	}
}
