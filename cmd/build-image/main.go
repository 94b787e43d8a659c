// Command build-image builds the sidecar's multi-platform OCI image without a Docker
// engine (`make image`): per platform the static binaries, CA certificates, user 999,
// no shell, and an SPDX SBOM attached as an OCI 1.1 referrer; one image index of them
// (package deploy/image). It writes an OCI layout (-layout), a tar of it that
// `docker load` also reads (-tar), the SBOMs (-sbom-dir), reads the outputs back and
// validates them, and prints the digests and sizes.
//
// The binaries come from -bin DIR (one directory per platform, repeated) or are built
// first with -build ARCHS into -bin-root/linux_ARCH.
//
// With -push REF it only pushes the layout's index, images and SBOMs to a registry
// (credentials from the Docker configuration, as docker login writes them).
//
// With -rootfs DIR it only writes the image's files other than the binaries into DIR:
// the Dockerfile's build stage does that, so both builds give the same files.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/deploy/image"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "build-image:", err)
		os.Exit(1)
	}
}

// multiFlag is a flag given once per value.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// flags are build-image's inputs.
type flags struct {
	bins                                     multiFlag
	build, binRoot, goCmd                    string
	version, revision, epoch, caCerts, tag   string
	outDir, tarPath, loadArch, sbomDir, push string
	rootfs                                   string
}

func parse(args []string, stderr io.Writer) (*flags, error) {
	fl := flag.NewFlagSet("build-image", flag.ContinueOnError)
	fl.SetOutput(stderr)
	f := &flags{}
	fl.Var(&f.bins, "bin", "a directory of static linux binaries "+fmt.Sprint(image.Binaries)+" for one platform (repeat for each platform)")
	fl.StringVar(&f.build, "build", "", "first build the binaries for these linux architectures, comma-separated (e.g. amd64,arm64), into -bin-root/linux_ARCH")
	fl.StringVar(&f.binRoot, "bin-root", "bin", "where -build puts linux_ARCH/")
	fl.StringVar(&f.goCmd, "go", "go", "the go command -build runs")
	fl.StringVar(&f.version, "version", "", "org.opencontainers.image.version label: the version stamped into the binaries")
	fl.StringVar(&f.revision, "revision", "", "org.opencontainers.image.revision label: the commit they were built from")
	fl.StringVar(&f.epoch, "source-date-epoch", os.Getenv("SOURCE_DATE_EPOCH"), "every timestamp in the image, in seconds since 1970 (default $SOURCE_DATE_EPOCH)")
	fl.StringVar(&f.caCerts, "ca-certs", "", "PEM bundle for "+image.CACertsPath+" (e.g. /etc/ssl/certs/ca-certificates.crt; default: Mozilla's roots from golang.org/x/crypto/x509roots/fallback, pinned by go.mod)")
	fl.StringVar(&f.tag, "tag", "", "image name and tag, e.g. ghcr.io/argocd-image-resolver/argocd-image-resolver:v0.1.0")
	fl.StringVar(&f.outDir, "layout", "", "write an OCI image layout to this directory (replacing one there); with -push, read it")
	fl.StringVar(&f.tarPath, "tar", "", "write the layout as a tar to this file, with a manifest.json of the -load-arch image for `docker load` / `crane push`")
	fl.StringVar(&f.loadArch, "load-arch", runtime.GOARCH, "the architecture whose image -tar's manifest.json names (docker load takes one platform)")
	fl.StringVar(&f.sbomDir, "sbom-dir", "", "write each platform's SPDX SBOM to this directory as linux_ARCH.spdx.json")
	fl.StringVar(&f.push, "push", "", "only push the -layout's index, images and SBOMs to this image name and tag")
	fl.StringVar(&f.rootfs, "rootfs", "", "only write the image's files other than the binaries into this directory (the Dockerfile's build stage)")
	if err := fl.Parse(args); err != nil {
		return nil, err
	}
	if fl.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q: every input is a flag", fl.Args())
	}
	return f, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parse(args, stderr)
	if err != nil {
		return err
	}
	var certs []byte
	if f.caCerts != "" {
		if certs, err = image.ReadCACerts(f.caCerts); err != nil {
			return err
		}
	}
	switch {
	case f.rootfs != "":
		entries, err := image.RootFS(certs)
		if err != nil {
			return err
		}
		return image.WriteRootFS(f.rootfs, entries)
	case f.push != "":
		return push(ctx, f, stdout)
	}

	if f.outDir == "" && f.tarPath == "" {
		return errors.New("nothing to write: give -layout DIR, -tar FILE or both")
	}
	if f.tarPath != "" && f.outDir == "" {
		return errors.New("-tar is the -layout as a tar: give -layout DIR too")
	}
	ref, err := tagRef("-tag", f.tag)
	if err != nil {
		return err
	}
	if f.epoch == "" {
		return errors.New("no timestamp: set SOURCE_DATE_EPOCH or -source-date-epoch (make image uses the commit's time: git log -1 --format=%ct)")
	}
	created, err := image.ParseSourceDateEpoch(f.epoch)
	if err != nil {
		return err
	}
	dirs, err := binaries(ctx, f)
	if err != nil {
		return err
	}

	start := time.Now()
	idx, err := image.BuildIndex(image.Options{Version: f.version, Revision: f.revision, Created: created, CACerts: certs}, dirs...)
	if err != nil {
		return err
	}
	if err := write(f, idx, ref); err != nil {
		return err
	}
	return report(stdout, f, idx, ref, created, start)
}

// tagRef parses an image name and tag given as flag what.
func tagRef(what, s string) (name.Tag, error) {
	if s == "" {
		return name.Tag{}, fmt.Errorf("%s is required: the image's name and tag, e.g. ghcr.io/argocd-image-resolver/argocd-image-resolver:v0.1.0", what)
	}
	ref, err := name.NewTag(s, name.StrictValidation)
	if err != nil {
		return name.Tag{}, fmt.Errorf("%s %q: %w; want REGISTRY/REPOSITORY:TAG (a tag is letters, digits, '_', '.', '-', up to 128)", what, s, err)
	}
	return ref, nil
}

// binaries returns the directories of the binaries, building them first for -build.
func binaries(ctx context.Context, f *flags) ([]string, error) {
	dirs := append([]string(nil), f.bins...)
	if f.build == "" {
		if len(dirs) == 0 {
			return nil, errors.New("no binaries: give -bin DIR per platform or -build ARCHS (e.g. -build amd64,arm64)")
		}
		return dirs, nil
	}
	root, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	for _, arch := range strings.Split(f.build, ",") {
		arch = strings.TrimSpace(arch)
		if arch == "" || strings.ContainsAny(arch, "/\\") {
			return nil, fmt.Errorf("-build %q: want linux architectures separated by commas, e.g. amd64,arm64", f.build)
		}
		dir := filepath.Join(f.binRoot, "linux_"+arch)
		if err := image.GoBuild(ctx, f.goCmd, root, dir, arch, f.version, f.revision); err != nil {
			return nil, err
		}
		dirs = append(dirs, dir)
	}
	return dirs, nil
}

// write writes the layout, the tar and the SBOMs, and verifies the first two.
func write(f *flags, idx *image.Index, ref name.Tag) error {
	digest, err := idx.Index.Digest()
	if err != nil {
		return err
	}
	if err := image.WriteLayout(f.outDir, idx, ref); err != nil {
		return err
	}
	if f.tarPath != "" {
		if err := image.WriteArchive(f.tarPath, f.outDir, ref, f.loadArch); err != nil {
			return err
		}
	}
	if f.sbomDir != "" {
		if err := os.MkdirAll(f.sbomDir, 0o755); err != nil {
			return fmt.Errorf("-sbom-dir: %w", err)
		}
		for _, p := range idx.Platforms {
			if err := os.WriteFile(filepath.Join(f.sbomDir, image.SBOMFileName(p.Platform)), p.SBOM, 0o644); err != nil {
				return fmt.Errorf("-sbom-dir: %w", err)
			}
		}
	}
	return image.Verify(f.outDir, f.tarPath, ref, digest)
}

func report(stdout io.Writer, f *flags, idx *image.Index, ref name.Tag, created time.Time, start time.Time) error {
	digest, err := idx.Index.Digest()
	if err != nil {
		return err
	}
	stored, unpacked, err := idx.Sizes()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s@%s\n  version %s, revision %s, created %s\n  %s stored in a registry (every platform, the SBOMs)\n",
		ref, digest, f.version, f.revision, created.Format(time.RFC3339), mib(stored))
	for _, p := range idx.Platforms {
		plat := p.Platform.OS + "/" + p.Platform.Architecture
		d, err := p.Image.Digest()
		if err != nil {
			return err
		}
		compressed, _, err := image.Sizes(p.Image)
		if err != nil {
			return err
		}
		sd, err := p.Referrer.Digest()
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "  %s %s: %s compressed, %s unpacked; SBOM %s\n", plat, d, mib(compressed), mib(unpacked[plat]), sd)
	}
	for _, out := range []string{f.outDir, f.tarPath, f.sbomDir} {
		if out != "" {
			fmt.Fprintf(stdout, "  wrote %s\n", out)
		}
	}
	fmt.Fprintf(stdout, "  built, written and validated in %s\n", time.Since(start).Round(10*time.Millisecond))
	return nil
}

// push pushes the layout's index, images and SBOMs to -push.
func push(ctx context.Context, f *flags, stdout io.Writer) error {
	to, err := tagRef("-push", f.push)
	if err != nil {
		return err
	}
	if f.outDir == "" {
		return errors.New("-push needs -layout DIR: the OCI layout make image wrote (bin/image)")
	}
	in := to
	if f.tag != "" {
		if in, err = tagRef("-tag", f.tag); err != nil {
			return err
		}
	}
	idx, err := image.ReadLayout(f.outDir, in)
	if err != nil {
		return fmt.Errorf("%w (-tag names the layout's image if its tag is not -push's)", err)
	}
	if err := image.Push(to, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return err
	}
	d, err := idx.Index.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "pushed %s@%s and %d SBOMs\n", to, d, len(idx.Platforms))
	return nil
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB (%d bytes)", float64(n)/(1<<20), n) }
