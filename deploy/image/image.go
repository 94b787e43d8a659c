// Package image builds the sidecar's container image from Go code, with no Docker
// engine and no network: the two static binaries, CA certificates, passwd and group
// entries for Argo CD's user 999, a home directory and /tmp, and no shell. Build
// returns one platform's reproducible v1.Image (every timestamp is Options.Created, so
// the same inputs give the same digest); BuildIndex builds one per platform (make
// image: linux/amd64 and linux/arm64), an SPDX 2.3 SBOM of each from its binaries'
// build information, and the OCI image index of them, each SBOM attached to its image
// as an OCI 1.1 referrer. WriteLayout writes an index to an OCI image layout,
// WriteArchive that layout to a tar that OCI tools and `docker load` read, Verify
// reads both back and validates them, Push sends the index and its SBOMs to a
// registry. GoBuild builds the binaries as make image does. WriteRootFS writes the
// same files (without the binaries) for the Dockerfile, so both builds give one layout.
package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's layout; the Dockerfile produces the same (TestDockerfileAgrees).
const (
	// UID and GID are Argo CD's: its CMP sidecars must run as user 999 (Argo CD's
	// docs and deploy/repo-server-sidecar.yaml's runAsUser).
	UID = 999
	GID = 999
	// UserName is the name of UID, as in Argo CD's own image.
	UserName = "argocd"
	// User is the image's config User.
	User = "999:999"
	// Home is UserName's home and the working directory; Argo CD mounts the CMP
	// server's plugins and config under it.
	Home = "/home/argocd"
	// BinDir holds Binaries.
	BinDir = "/usr/local/bin"
	// CACertsPath is the PEM bundle Go's crypto/x509 reads on Linux.
	CACertsPath = "/etc/ssl/certs/ca-certificates.crt"
	// Repository is where the project publishes the image; deploy/'s manifests name it.
	Repository = "ghcr.io/argocd-image-resolver/argocd-image-resolver"
	// Source is the org.opencontainers.image.source label.
	Source = "https://github.com/argocd-image-resolver/argocd-image-resolver"
	// Title is the org.opencontainers.image.title label.
	Title = "argocd-image-resolver"
	// License is the org.opencontainers.image.licenses label: the SPDX expression of
	// the LICENSE file.
	License = "Apache-2.0"
)

// Label keys the image carries.
const (
	LabelVersion  = "org.opencontainers.image.version"
	LabelRevision = "org.opencontainers.image.revision"
	LabelSource   = "org.opencontainers.image.source"
	LabelTitle    = "org.opencontainers.image.title"
	LabelLicenses = "org.opencontainers.image.licenses"
	// AnnotationCreated is the image index's creation time (RFC 3339), Options.Created.
	AnnotationCreated = "org.opencontainers.image.created"
)

// Binaries are the commands copied into BinDir, by file name.
var Binaries = []string{"argocd-image-resolver", "argocd-image-resolver-generate"}

// Entrypoint starts the daemon and Argo CD's CMP server, which repo-server's init
// container copies into the shared var-files volume (deploy/repo-server-sidecar.yaml).
var Entrypoint = []string{"argocd-image-resolver", "sidecar", "--", "/var/run/argocd/argocd-cmp-server"}

// Env is the image's environment: PATH for the entrypoint and for plugin.yaml's
// commands, the CA bundle, and HOME (a runtime given a numeric user may not read
// /etc/passwd for it).
var Env = []string{
	"PATH=" + BinDir + ":/usr/bin:/bin",
	"SSL_CERT_FILE=" + CACertsPath,
	"HOME=" + Home,
}

// Entry is one file or directory of the image's root filesystem.
type Entry struct {
	Path string      // relative to the root, slash-separated, no leading slash
	Mode fs.FileMode // permission bits, fs.ModeDir, fs.ModeSticky
	UID  int
	GID  int
	Data []byte // a regular file's content; nil for a directory
}

// Options says what Build puts in the image.
type Options struct {
	// BinDir is the host directory holding Binaries: statically linked Linux
	// executables (CGO_ENABLED=0). The image's architecture is theirs.
	BinDir string
	// Version and Revision are the org.opencontainers.image.version and .revision
	// labels: the version and commit stamped into the binaries.
	Version  string
	Revision string
	// Created is every timestamp in the image (config, history, files): the same
	// inputs and Created give the same digest. make image uses SOURCE_DATE_EPOCH, else
	// the commit's time.
	Created time.Time
	// CACerts is the PEM bundle written to CACertsPath; nil means BundledCACerts.
	CACerts []byte
}

// RootFS is the image's filesystem without the binaries: directories, passwd, group,
// CA certificates (caCerts, or BundledCACerts when nil). Parents come before children.
func RootFS(caCerts []byte) ([]Entry, error) {
	if caCerts == nil {
		var err error
		if caCerts, err = BundledCACerts(); err != nil {
			return nil, err
		}
	}
	dir := func(p string, mode fs.FileMode, uid, gid int) Entry {
		return Entry{Path: p, Mode: fs.ModeDir | mode, UID: uid, GID: gid}
	}
	file := func(p string, data string) Entry { return Entry{Path: p, Mode: 0o644, Data: []byte(data)} }
	home := strings.TrimPrefix(Home, "/")
	// No login shell exists in the image; nologin's path says so to tools that read it.
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:%s:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n",
		UserName, UID, GID, UserName, Home)
	group := fmt.Sprintf("root:x:0:\n%s:x:%d:\nnogroup:x:65534:\n", UserName, GID)
	return []Entry{
		dir("etc", 0o755, 0, 0),
		file("etc/group", group),
		file("etc/passwd", passwd),
		dir("etc/ssl", 0o755, 0, 0),
		dir("etc/ssl/certs", 0o755, 0, 0),
		{Path: strings.TrimPrefix(CACertsPath, "/"), Mode: 0o644, Data: caCerts},
		dir("home", 0o755, 0, 0),
		// Writable by the user only: its home, as in Argo CD's image.
		dir(home, 0o755, UID, GID),
		// World-writable with the sticky bit, as /tmp is everywhere: the daemon refuses
		// a socket directory writable by others without it. Kubernetes mounts an
		// emptyDir here (deploy/repo-server-sidecar.yaml); docker run uses this one.
		dir("tmp", 0o777|fs.ModeSticky, 0, 0),
		dir("usr", 0o755, 0, 0),
		dir("usr/local", 0o755, 0, 0),
		dir(strings.TrimPrefix(BinDir, "/"), 0o755, 0, 0),
	}, nil
}

// Build returns the sidecar's image: a layer of RootFS(o.CACerts) and a layer of the
// binaries (which change more often), the config Argo CD's sidecar needs (User,
// Entrypoint, WorkingDir, Env) and the version and licence labels. Every timestamp is
// o.Created.
func Build(o Options) (v1.Image, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	bins, arch, err := readBinaries(o.BinDir)
	if err != nil {
		return nil, err
	}
	return buildImage(o, bins, arch)
}

// check checks the options every build needs.
func (o Options) check() error {
	if o.Version == "" {
		return errors.New("image: Options.Version is empty: give the version stamped into the binaries (make image passes $(VERSION))")
	}
	if o.Revision == "" {
		return errors.New("image: Options.Revision is empty: give the commit the binaries were built from (make image passes $(COMMIT))")
	}
	if o.Created.IsZero() {
		return errors.New("image: Options.Created is zero: give a fixed time (SOURCE_DATE_EPOCH or the commit's time) so that builds are reproducible")
	}
	return nil
}

// buildImage is Build of binaries already read (readBinaries) for arch.
func buildImage(o Options, bins []Entry, arch string) (v1.Image, error) {
	created := o.created()
	base, err := RootFS(o.CACerts)
	if err != nil {
		return nil, err
	}
	baseLayer, err := layer(base, created)
	if err != nil {
		return nil, fmt.Errorf("image: base layer: %w", err)
	}
	binLayer, err := layer(bins, created)
	if err != nil {
		return nil, fmt.Errorf("image: binaries layer: %w", err)
	}

	// Docker's schema 2 media types, not OCI's: a `docker save` tarball has no manifest,
	// and go-containerregistry (crane push) rebuilds one with Docker's types from it, so
	// only these give the tarball, the layout and a pushed image one digest. Every
	// registry and runtime Kubernetes uses reads them.
	img := mutate.MediaType(empty.Image, types.DockerManifestSchema2)
	img = mutate.ConfigMediaType(img, types.DockerConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: baseLayer, MediaType: types.DockerLayer, History: v1.History{
			Created: v1.Time{Time: created}, CreatedBy: "deploy/image: passwd, group, CA certificates, " + Home + ", /tmp"}},
		mutate.Addendum{Layer: binLayer, MediaType: types.DockerLayer, History: v1.History{
			Created: v1.Time{Time: created}, CreatedBy: "deploy/image: " + BinDir + "/{" + strings.Join(Binaries, ",") + "}"}},
	)
	if err != nil {
		return nil, fmt.Errorf("image: appending layers: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image: reading config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: created}
	cf.OS = "linux"
	cf.Architecture = arch
	cf.Config = v1.Config{
		User:       User,
		Entrypoint: append([]string(nil), Entrypoint...),
		WorkingDir: Home,
		Env:        append([]string(nil), Env...),
		Labels: map[string]string{
			LabelVersion:  o.Version,
			LabelRevision: o.Revision,
			LabelSource:   Source,
			LabelTitle:    Title,
			LabelLicenses: License,
		},
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("image: setting config: %w", err)
	}
	return img, nil
}

// created is o.Created as the image records it: UTC, whole seconds.
func (o Options) created() time.Time { return o.Created.UTC().Truncate(time.Second) }

// elfArch maps ELF machines to OCI architectures. 32-bit arm is left out: its
// platform needs a variant (v6, v7) that the ELF header does not say.
var elfArch = map[elf.Machine]string{
	elf.EM_X86_64:  "amd64",
	elf.EM_AARCH64: "arm64",
	elf.EM_386:     "386",
	elf.EM_PPC64:   "ppc64le",
	elf.EM_S390:    "s390x",
	elf.EM_RISCV:   "riscv64",
}

// readBinaries reads Binaries from dir as entries of BinDir and returns their
// architecture. Each must be a statically linked Linux executable of one architecture:
// the image has no C library or dynamic loader.
func readBinaries(dir string) ([]Entry, string, error) {
	if dir == "" {
		return nil, "", errors.New("image: Options.BinDir is empty: give the directory of the static binaries (make image builds them into bin/linux_$GOARCH)")
	}
	var (
		entries []Entry
		arch    string
	)
	for _, name := range Binaries {
		p := filepath.Join(dir, name)
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, "", fmt.Errorf("image: reading binary: %w", err)
		}
		a, err := staticArch(p, data)
		if err != nil {
			return nil, "", err
		}
		if arch != "" && a != arch {
			return nil, "", fmt.Errorf("image: %s is linux/%s but %s is linux/%s: build both for one GOARCH", p, a, Binaries[0], arch)
		}
		arch = a
		entries = append(entries, Entry{Path: strings.TrimPrefix(BinDir, "/") + "/" + name, Mode: 0o755, Data: data})
	}
	return entries, arch, nil
}

// staticArch checks that data (read from path p) is a static Linux ELF executable and
// returns its architecture.
func staticArch(p string, data []byte) (string, error) {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return "", fmt.Errorf("image: %s is not a Linux executable (ELF): %w; build with GOOS=linux", p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			interp, _ := io.ReadAll(io.LimitReader(prog.Open(), 256))
			return "", fmt.Errorf("image: %s is dynamically linked (interpreter %s); the image has no C library: build with CGO_ENABLED=0",
				p, strings.TrimRight(string(interp), "\x00"))
		}
	}
	if f.OSABI != elf.ELFOSABI_NONE && f.OSABI != elf.ELFOSABI_LINUX {
		return "", fmt.Errorf("image: %s is built for %s, not Linux: build with GOOS=linux", p, f.OSABI)
	}
	arch, ok := elfArch[f.Machine]
	if !ok {
		return "", fmt.Errorf("image: %s is for machine %s, which this builder does not map to an OCI architecture (accepted: amd64, arm64, 386, ppc64le, s390x, riscv64)", p, f.Machine)
	}
	if f.Machine == elf.EM_PPC64 && f.ByteOrder.String() != "LittleEndian" {
		return "", fmt.Errorf("image: %s is big-endian ppc64, which this builder does not support (accepted: ppc64le)", p)
	}
	return arch, nil
}

// tarHeader is the header of e with every time set to t.
func tarHeader(e Entry, t time.Time) *tar.Header {
	h := &tar.Header{
		Name:    e.Path,
		Mode:    int64(e.Mode.Perm()),
		Uid:     e.UID,
		Gid:     e.GID,
		ModTime: t,
	}
	if e.Mode&fs.ModeSticky != 0 {
		h.Mode |= 0o1000 // c_ISVTX
	}
	if e.Mode.IsDir() {
		h.Typeflag = tar.TypeDir
		h.Name += "/"
	} else {
		h.Typeflag = tar.TypeReg
		h.Size = int64(len(e.Data))
	}
	return h
}

// layer is a gzip-compressed layer of entries, every time set to t. Go's gzip
// writes no name or time in its header, so equal entries give equal bytes.
func layer(entries []Entry, t time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		if err := tw.WriteHeader(tarHeader(e, t)); err != nil {
			return nil, fmt.Errorf("%s: %w", e.Path, err)
		}
		if _, err := tw.Write(e.Data); err != nil {
			return nil, fmt.Errorf("%s: %w", e.Path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.DockerLayer))
	if err != nil {
		return nil, err
	}
	return plainLayer{l}, nil
}

// plainLayer hides the tarball layer's Descriptor method, whose empty (non-nil)
// annotations would make the in-memory manifest differ from its JSON, which
// validate.Image rejects; the manifest's bytes are the same either way.
type plainLayer struct{ v1.Layer }

// ParseSourceDateEpoch parses SOURCE_DATE_EPOCH (reproducible-builds.org): whole
// seconds since 1970 UTC.
func ParseSourceDateEpoch(s string) (time.Time, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q is not a number of seconds since 1970 (e.g. $(git log -1 --format=%%ct))", s)
	}
	return time.Unix(n, 0).UTC(), nil
}
