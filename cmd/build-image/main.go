// Command build-image builds the sidecar's OCI image without a Docker engine
// (`make image`): the static binaries in -bin, CA certificates, user 999, no shell
// (package deploy/image). It writes an OCI layout (-layout) and a `docker load`
// tarball (-tar), reads both back and validates them, and prints the digest and sizes.
//
// With -rootfs DIR it only writes the image's files other than the binaries into DIR:
// the Dockerfile's build stage does that, so both builds give the same files.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/deploy/image"
	"github.com/google/go-containerregistry/pkg/name"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "build-image:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fl := flag.NewFlagSet("build-image", flag.ContinueOnError)
	fl.SetOutput(stderr)
	var (
		binDir   = fl.String("bin", "", "directory holding the static linux binaries "+fmt.Sprint(image.Binaries))
		version  = fl.String("version", "", "org.opencontainers.image.version label: the version stamped into the binaries")
		revision = fl.String("revision", "", "org.opencontainers.image.revision label: the commit they were built from")
		epoch    = fl.String("source-date-epoch", os.Getenv("SOURCE_DATE_EPOCH"), "every timestamp in the image, in seconds since 1970 (default $SOURCE_DATE_EPOCH)")
		caCerts  = fl.String("ca-certs", "", "PEM bundle for "+image.CACertsPath+" (e.g. /etc/ssl/certs/ca-certificates.crt; default: Mozilla's roots from golang.org/x/crypto/x509roots/fallback, pinned by go.mod)")
		tag      = fl.String("tag", "", "image name and tag, e.g. ghcr.io/argocd-image-resolver/argocd-image-resolver:v0.1.0")
		outDir   = fl.String("layout", "", "write an OCI image layout to this directory (replacing one there)")
		tarPath  = fl.String("tar", "", "write a `docker load` / `crane push` tarball to this file")
		rootfs   = fl.String("rootfs", "", "only write the image's files other than the binaries into this directory (the Dockerfile's build stage)")
	)
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q: every input is a flag", fl.Args())
	}
	var certs []byte
	if *caCerts != "" {
		var err error
		if certs, err = image.ReadCACerts(*caCerts); err != nil {
			return err
		}
	}
	if *rootfs != "" {
		entries, err := image.RootFS(certs)
		if err != nil {
			return err
		}
		return image.WriteRootFS(*rootfs, entries)
	}

	if *outDir == "" && *tarPath == "" {
		return errors.New("nothing to write: give -layout DIR, -tar FILE or both")
	}
	if *tag == "" {
		return errors.New("-tag is required: the image's name and tag, e.g. ghcr.io/argocd-image-resolver/argocd-image-resolver:v0.1.0")
	}
	ref, err := name.NewTag(*tag, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("-tag %q: %w; want REGISTRY/REPOSITORY:TAG (a tag is letters, digits, '_', '.', '-', up to 128)", *tag, err)
	}
	if *epoch == "" {
		return errors.New("no timestamp: set SOURCE_DATE_EPOCH or -source-date-epoch (make image uses the commit's time: git log -1 --format=%ct)")
	}
	created, err := image.ParseSourceDateEpoch(*epoch)
	if err != nil {
		return err
	}

	start := time.Now()
	img, err := image.Build(image.Options{BinDir: *binDir, Version: *version, Revision: *revision, Created: created, CACerts: certs})
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	if *outDir != "" {
		if err := image.WriteLayout(*outDir, img, ref); err != nil {
			return err
		}
	}
	if *tarPath != "" {
		if err := image.WriteTarball(*tarPath, img, ref); err != nil {
			return err
		}
	}
	if err := image.Verify(*outDir, *tarPath, ref, digest); err != nil {
		return err
	}
	compressed, uncompressed, err := image.Sizes(img)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s@%s\n  platform %s/%s, version %s, revision %s, created %s\n  size %s compressed, %s uncompressed\n",
		ref, digest, cf.OS, cf.Architecture, *version, *revision, created.Format(time.RFC3339), mib(compressed), mib(uncompressed))
	for _, out := range []string{*outDir, *tarPath} {
		if out != "" {
			fmt.Fprintf(stdout, "  wrote %s\n", out)
		}
	}
	fmt.Fprintf(stdout, "  built, written and validated in %s\n", time.Since(start).Round(10*time.Millisecond))
	return nil
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB (%d bytes)", float64(n)/(1<<20), n) }
