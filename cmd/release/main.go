// Command release is `make release VERSION=vX.Y.Z` (package internal/release): it
// refuses a VERSION that is not vX.Y.Z, one without a CHANGELOG.md section, a dirty
// tree, and manifests or docs naming another version; then writes into -out the
// linux/amd64 and linux/arm64 binaries, the image (OCI layout and tar) and its SBOMs,
// install.yaml, the Helm values, the release notes and SHA256SUMS. It pushes nothing:
// publishing is `go run ./cmd/build-image -layout bin/release/image -push ...` and the
// files of -out attached to the release.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/release"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err) // errors start with "release:"
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fl := flag.NewFlagSet("release", flag.ContinueOnError)
	fl.SetOutput(stderr)
	version := fl.String("version", "", "the release's version, vX.Y.Z, with a CHANGELOG.md section")
	out := fl.String("out", "bin/release", "the release directory (an earlier release there is replaced)")
	root := fl.String("root", ".", "the module's root, a clean git checkout")
	goCmd := fl.String("go", "go", "the go command that builds the binaries")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() > 0 {
		return fmt.Errorf("release: unexpected arguments %q: every input is a flag", fl.Args())
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	start := time.Now()
	plan, err := release.Check(ctx, *root, *version, os.Getenv("SOURCE_DATE_EPOCH"))
	if err != nil {
		return err
	}
	for _, w := range plan.Warnings {
		log.Warn(w)
	}
	log.Info("building the release", "version", plan.Version.String(), "commit", plan.Commit, "out", *out)
	res, err := release.Build(ctx, plan, release.Options{Out: *out, Go: *goCmd})
	if err != nil {
		return err
	}
	digest, err := res.Index.Index.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s@%s\n", res.Image, digest)
	for _, f := range res.Files {
		fmt.Fprintf(stdout, "  %s\n", f)
	}
	fmt.Fprintf(stdout, "  %s\nwrote %d files to %s in %s\n", release.FileSums, len(res.Files)+1, *out, time.Since(start).Round(100*time.Millisecond))
	return nil
}
