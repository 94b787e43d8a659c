package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/spf13/cobra"
)

// The binaries install copies, by the names plugin commands call them.
const (
	binaryName         = "argocd-image-resolver"
	generateBinaryName = "argocd-image-resolver-generate"
)

func newInstallCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "install DIR",
		Short: "Copy " + binaryName + " and " + generateBinaryName + " into DIR (an init container's job)",
		Long: `Copy this binary and ` + generateBinaryName + ` (found beside it, else on PATH) into
DIR, mode 0755, each written to a temporary file and renamed, so a reader never sees a
half-written one. For Argo CD before 2.8, where argocd-repo-server runs plugins of
argocd-cm's configManagementPlugins itself: an init container of the image (which has no
shell, no cp) copies them into a volume that repo-server mounts
(deploy/legacy-argocd-cm).

Exit status: 0 copied, 2 bad arguments, 4 a file could not be read or written.`,
		Example: `  argocd-image-resolver install /custom-tools`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("install: finding this binary: %w", err)
			}
			if resolved, err := filepath.EvalSymlinks(self); err == nil {
				self = resolved
			}
			gen := filepath.Join(filepath.Dir(self), generateBinaryName)
			if _, err := os.Stat(gen); err != nil {
				if gen, err = exec.LookPath(generateBinaryName); err != nil {
					return fmt.Errorf("install: %s is neither beside %s nor on PATH: %w", generateBinaryName, self, err)
				}
			}
			return installBinaries(args[0], map[string]string{binaryName: self, generateBinaryName: gen}, cmd.OutOrStdout())
		},
	}
}

// installBinaries copies each source file (by destination name) into dir, mode 0755,
// through a temporary file renamed into place; it says what it copied on out.
func installBinaries(dir string, sources map[string]string, out io.Writer) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("install: target directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("install: target %s is not a directory", dir)
	}
	for _, name := range []string{binaryName, generateBinaryName} {
		src, ok := sources[name]
		if !ok {
			continue
		}
		dst := filepath.Join(dir, name)
		if err := copyExecutable(src, dst); err != nil {
			return fmt.Errorf("install: %s to %s: %w", src, dst, err)
		}
		fmt.Fprintf(out, "installed %s\n", dst)
	}
	return nil
}

func copyExecutable(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(tmp.Name())
		}
	}()
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return err
	}
	if err := errors.Join(tmp.Chmod(0o755), tmp.Close()); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
