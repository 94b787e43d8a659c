package image

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// GoBuildArgs are the go command's arguments that build Binaries, from the module's
// root, into outDir as make image and make release build them: -trimpath (no build
// machine's paths), stripped (-s -w), version and commit stamped into main.version and
// main.commit. With GoBuildEnv the binaries are static Linux executables.
func GoBuildArgs(version, commit, outDir string) []string {
	args := []string{"build", "-trimpath",
		"-ldflags", "-s -w -X main.version=" + version + " -X main.commit=" + commit,
		"-o", filepath.Clean(outDir) + string(filepath.Separator)}
	for _, b := range Binaries {
		args = append(args, "./cmd/"+b)
	}
	return args
}

// GoBuildEnv is what GoBuildArgs adds to the environment for linux/arch: no cgo, so no
// C library or dynamic loader is needed in the image.
func GoBuildEnv(arch string) []string {
	return []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + arch}
}

// GoBuild runs goCmd (the go command: "go", or make's $(GO)) with GoBuildArgs in
// moduleDir, the module's root, for linux/arch. The go command's output is returned
// in the error when it fails.
func GoBuild(ctx context.Context, goCmd, moduleDir, outDir, arch, version, commit string) error {
	if version == "" || commit == "" {
		return fmt.Errorf("image: building linux/%s: the version (%q) and commit (%q) to stamp are both needed", arch, version, commit)
	}
	cmd := exec.CommandContext(ctx, goCmd, GoBuildArgs(version, commit, outDir)...)
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), GoBuildEnv(arch)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("image: building linux/%s: %s %s: %w\n%s", arch, goCmd, strings.Join(cmd.Args[1:], " "), err, out)
	}
	return nil
}
