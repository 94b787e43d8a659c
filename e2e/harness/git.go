package harness

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// GitRepo is a real git repository in a temp dir (made with the git CLI), standing in
// for repo-server's checkout of an Application's repository at a commit.
type GitRepo struct {
	Root string
	// SHA is the commit HEAD points at after the last Commit.
	SHA string
}

// NewGitRepo makes an empty repository (branch main) that is removed after the test.
func NewGitRepo(t testing.TB) *GitRepo {
	t.Helper()
	r := &GitRepo{Root: t.TempDir()}
	r.git(t, "init", "-q", "-b", "main")
	return r
}

// URL is the repository's file:// URL (spec.source.repoURL by default).
func (r *GitRepo) URL() string { return "file://" + filepath.ToSlash(r.Root) }

// CopyDir copies the directory src (absolute, or relative to the main module's root)
// to dest inside the repository.
func (r *GitRepo) CopyDir(t testing.TB, src, dest string) {
	t.Helper()
	if !filepath.IsAbs(src) {
		src = filepath.Join(state.repoRoot, src)
	}
	if err := copyTree(src, filepath.Join(r.Root, dest)); err != nil {
		t.Fatalf("copying %s into the test repository: %v", src, err)
	}
}

// WriteFile writes content to rel inside the repository, creating directories.
func (r *GitRepo) WriteFile(t testing.TB, rel, content string) {
	t.Helper()
	p := filepath.Join(r.Root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Commit stages everything and commits; it sets and returns SHA.
func (r *GitRepo) Commit(t testing.TB, message string) string {
	t.Helper()
	r.git(t, "add", "-A")
	r.git(t, "commit", "-q", "--allow-empty", "-m", message)
	r.SHA = strings.TrimSpace(r.git(t, "rev-parse", "HEAD"))
	return r.SHA
}

func (r *GitRepo) git(t testing.TB, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{
		"-c", "user.name=e2e", "-c", "user.email=e2e@example.invalid",
		"-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null",
	}, args...)...)
	cmd.Dir = r.Root
	// Nothing from the machine's or the user's git config.
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull, "GIT_TERMINAL_PROMPT=0")
	var out, stderr bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out.String()
}

// copyTree copies regular files, directories and symlinks, keeping file modes.
func copyTree(src, dest string) error {
	info, err := os.Stat(src)
	if err != nil {
		return err
	}
	if !info.IsDir() {
		return fmt.Errorf("%s is not a directory", src)
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dest, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case info.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case info.Mode().IsRegular():
			return copyFile(p, target, info.Mode().Perm())
		default:
			return nil
		}
	})
}

func copyFile(src, dest string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dest, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
