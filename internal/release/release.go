package release

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/deploy/image"
	"github.com/google/go-containerregistry/pkg/name"
)

// Plan is a release Check accepted: what Build builds.
type Plan struct {
	// Root is the module's root, a clean git checkout.
	Root    string
	Version Version
	// Commit is HEAD, stamped into the binaries and the image.
	Commit string
	// Created is every timestamp of the image: SOURCE_DATE_EPOCH, else HEAD's commit time.
	Created time.Time
	// Notes is the version's CHANGELOG.md section.
	Notes Section
	// Warnings are what does not stop a release but should be fixed before it is tagged.
	Warnings []string
}

// Check refuses a release of version from the checkout at root that would not be what
// its version says: a version that is not vX.Y.Z, one without a CHANGELOG.md section
// or not its newest, manifests or docs that name another version (CheckVersions), a
// working tree with changes or untracked files. sourceDateEpoch ("" for HEAD's commit
// time) is the image's timestamp.
func Check(ctx context.Context, root, version, sourceDateEpoch string) (*Plan, error) {
	v, err := ParseVersion(version)
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	data, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		return nil, fmt.Errorf("release: %w (a release's notes are its CHANGELOG.md section)", err)
	}
	c, err := ParseChangelog("CHANGELOG.md", data)
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	sec, ok := c.Section(v)
	if !ok {
		return nil, fmt.Errorf("release: CHANGELOG.md has no section for %s: add \"## [%s] - YYYY-MM-DD\" with what the release changes, above the older versions", v, v.Number())
	}
	if latest, _ := c.Latest(); latest.Version != v {
		return nil, fmt.Errorf("release: CHANGELOG.md's newest version is [%s] (line %d), not %s: a release is of the newest version", latest.Version.Number(), latest.Line, v)
	}
	p := &Plan{Root: root, Version: v, Notes: sec}
	if sec.Date == Unreleased {
		p.Warnings = append(p.Warnings, fmt.Sprintf("CHANGELOG.md:%d: [%s] is marked %s: give it the release date before tagging %s", sec.Line, v.Number(), Unreleased, v))
	}
	if err := CheckVersions(root, v); err != nil {
		return nil, err
	}
	status, err := git(ctx, root, "status", "--porcelain", "--untracked-files=normal")
	if err != nil {
		return nil, err
	}
	if status != "" {
		lines := strings.Split(status, "\n")
		if len(lines) > 10 {
			lines = append(lines[:10], fmt.Sprintf("... and %d more", len(lines)-10))
		}
		return nil, fmt.Errorf("release: the working tree at %s is dirty (git status --porcelain):\n  %s\ncommit or stash the changes: a release is built from a commit", root, strings.Join(lines, "\n  "))
	}
	if p.Commit, err = git(ctx, root, "rev-parse", "HEAD"); err != nil {
		return nil, err
	}
	if sourceDateEpoch == "" {
		if sourceDateEpoch, err = git(ctx, root, "log", "-1", "--format=%ct"); err != nil {
			return nil, err
		}
	}
	if p.Created, err = image.ParseSourceDateEpoch(sourceDateEpoch); err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	return p, nil
}

// git runs git in dir and returns its output, trimmed.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("release: git %s in %s: %w: %s (a release is built from a git checkout)", strings.Join(args, " "), dir, err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// Options says how Build builds.
type Options struct {
	// Out is the release directory (bin/release): replaced if it holds an earlier
	// release (a SHA256SUMS) or nothing, refused otherwise.
	Out string
	// Go is the go command; "" is "go".
	Go string
	// Archs are the linux architectures; nil is amd64 and arm64.
	Archs []string
	// LoadArch is the architecture image.tar's docker manifest names; "" is amd64.
	LoadArch string
}

// Files of a release directory.
const (
	FileInstall     = "install.yaml"
	FilePatch       = "repo-server-patch.yaml"
	FileHelmValues  = "helm-values.yaml"
	FileNotes       = "RELEASE_NOTES.md"
	FileSums        = "SHA256SUMS"
	DirImage        = "image"
	FileImageTar    = "image.tar"
	DirSBOM         = "sbom"
	binDirPrefix    = "linux_"
	defaultLoadArch = "amd64"
)

// Result is what Build wrote.
type Result struct {
	Image name.Tag
	Index *image.Index
	// Files are every file of the release directory but SHA256SUMS, relative to it.
	Files []string
}

// Build builds the release p into o.Out: per architecture the binaries
// (linux_ARCH/), the image index (image/, an OCI layout, and image.tar) and its SBOMs
// (sbom/), install.yaml and repo-server-patch.yaml (RenderInstall), the Helm values,
// the release notes (the CHANGELOG section) and SHA256SUMS of every file.
func Build(ctx context.Context, p *Plan, o Options) (*Result, error) {
	if o.Go == "" {
		o.Go = "go"
	}
	if o.Archs == nil {
		o.Archs = []string{"amd64", "arm64"}
	}
	if o.LoadArch == "" {
		o.LoadArch = defaultLoadArch
	}
	if err := emptyOut(o.Out); err != nil {
		return nil, err
	}
	ref, err := name.NewTag(image.Repository+":"+p.Version.String(), name.StrictValidation)
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	var dirs []string
	for _, arch := range o.Archs {
		dir := filepath.Join(o.Out, binDirPrefix+arch)
		if err := image.GoBuild(ctx, o.Go, p.Root, dir, arch, p.Version.String(), p.Commit); err != nil {
			return nil, fmt.Errorf("release: %w", err)
		}
		dirs = append(dirs, dir)
	}
	idx, err := writeImage(p, o, ref, dirs)
	if err != nil {
		return nil, err
	}
	if err := writeInstall(p, o.Out); err != nil {
		return nil, err
	}
	if err := copyFile(filepath.Join(p.Root, "deploy", "helm", "values.yaml"), filepath.Join(o.Out, FileHelmValues)); err != nil {
		return nil, fmt.Errorf("release: Helm values: %w", err)
	}
	if err := os.WriteFile(filepath.Join(o.Out, FileNotes), notes(p, ref, idx), 0o644); err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	files, err := WriteSums(o.Out)
	if err != nil {
		return nil, err
	}
	return &Result{Image: ref, Index: idx, Files: files}, nil
}

// emptyOut makes out an empty directory, removing an earlier release there.
func emptyOut(out string) error {
	entries, err := os.ReadDir(out)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("release: %w", err)
	case len(entries) == 0:
	default:
		if _, err := os.Stat(filepath.Join(out, FileSums)); err != nil {
			return fmt.Errorf("release: %s exists and holds no earlier release (no %s); not replacing it: remove it or give another -out", out, FileSums)
		}
		if err := os.RemoveAll(out); err != nil {
			return fmt.Errorf("release: removing the earlier release: %w", err)
		}
	}
	return os.MkdirAll(out, 0o755)
}

// writeImage builds the index of the binaries in dirs and writes it, its archive and
// its SBOMs, and verifies them.
func writeImage(p *Plan, o Options, ref name.Tag, dirs []string) (*image.Index, error) {
	idx, err := image.BuildIndex(image.Options{Version: p.Version.String(), Revision: p.Commit, Created: p.Created}, dirs...)
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	layoutDir, tarPath := filepath.Join(o.Out, DirImage), filepath.Join(o.Out, FileImageTar)
	if err := image.WriteLayout(layoutDir, idx, ref); err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	if err := image.WriteArchive(tarPath, layoutDir, ref, o.LoadArch); err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	digest, err := idx.Index.Digest()
	if err != nil {
		return nil, err
	}
	if err := image.Verify(layoutDir, tarPath, ref, digest); err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(o.Out, DirSBOM), 0o755); err != nil {
		return nil, err
	}
	for _, pl := range idx.Platforms {
		if err := os.WriteFile(filepath.Join(o.Out, DirSBOM, image.SBOMFileName(pl.Platform)), pl.SBOM, 0o644); err != nil {
			return nil, fmt.Errorf("release: %w", err)
		}
	}
	return idx, nil
}

// writeInstall writes install.yaml and repo-server-patch.yaml, each with a header
// saying how to apply it.
func writeInstall(p *Plan, out string) error {
	in, err := RenderInstall(filepath.Join(p.Root, "deploy"))
	if err != nil {
		return err
	}
	v := p.Version.String()
	component := strings.TrimPrefix(image.Source, "https://") + "//deploy?ref=" + v
	head := fmt.Sprintf(`# argocd-image-resolver %[1]s: what the Kustomize component deploy/ adds to an Argo CD
# installation (rendered with the Kustomize API, no namespace), except the sidecar on
# argocd-repo-server, which is %[2]s:
#
#   kubectl apply -n argocd -f install.yaml
#   kubectl patch -n argocd deployment argocd-repo-server --patch-file %[2]s
#
# With Kustomize, add the component to your kustomization instead:
#
#   components:
#     - https://%[3]s
---
`, v, FilePatch, component)
	if err := os.WriteFile(filepath.Join(out, FileInstall), append([]byte(head), append(in.Resources, '\n')...), 0o644); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	patchHead := fmt.Sprintf("# argocd-image-resolver %s: the strategic-merge patch of %s that adds the sidecar\n# (deploy/'s component applies it). After install.yaml:\n#\n#   kubectl patch -n argocd deployment argocd-repo-server --patch-file %s\n#\n", v, in.PatchTarget, FilePatch)
	if err := os.WriteFile(filepath.Join(out, FilePatch), append([]byte(patchHead), in.Patch...), 0o644); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

// notes are the release notes: the CHANGELOG section, and the image's digests.
func notes(p *Plan, ref name.Tag, idx *image.Index) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "# argocd-image-resolver %s\n\n%s\n\n## Image\n\n", p.Version, p.Notes.Body)
	d, _ := idx.Index.Digest()
	fmt.Fprintf(&b, "`%s@%s` (commit %s), an OCI image index of:\n\n", ref, d, p.Commit)
	for _, pl := range idx.Platforms {
		id, _ := pl.Image.Digest()
		sd, _ := pl.Referrer.Digest()
		fmt.Fprintf(&b, "- %s/%s `%s`, its SPDX SBOM `%s` (an OCI referrer; also `%s/%s`)\n", pl.Platform.OS, pl.Platform.Architecture, id, sd, DirSBOM, image.SBOMFileName(pl.Platform))
	}
	fmt.Fprintf(&b, "\nInstall: [deploy/README.md](%s/blob/%s/deploy/README.md), or `%s` and `%s` of this release. Checksums: `%s` (`sha256sum -c %s`).\n",
		image.Source, p.Version, FileInstall, FilePatch, FileSums, FileSums)
	return []byte(b.String())
}

// WriteSums writes dir/SHA256SUMS, in sha256sum's format, of every other file under
// dir (sorted, slash-separated), and returns those files.
func WriteSums(dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if rel = filepath.ToSlash(rel); rel != FileSums {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("release: %s: %w", FileSums, err)
	}
	sort.Strings(files)
	var b strings.Builder
	for _, f := range files {
		sum, err := fileSHA256(filepath.Join(dir, filepath.FromSlash(f)))
		if err != nil {
			return nil, fmt.Errorf("release: %s: %w", FileSums, err)
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, f)
	}
	if err := os.WriteFile(filepath.Join(dir, FileSums), []byte(b.String()), 0o644); err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	return files, nil
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o644)
}
