package image

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// otherArch is the architecture of the index's second platform: the one of amd64 and
// arm64 this machine is not.
var otherArch = map[string]string{"amd64": "arm64", "arm64": "amd64"}[runtime.GOARCH]

var testRef = name.MustParseReference("ghcr.io/argocd-image-resolver/argocd-image-resolver:" + testVersion).(name.Tag)

var (
	indexOnce sync.Once
	sharedIdx *Index
	indexErr  error
)

// testIndex is the index of the static test binaries for linux/amd64 and linux/arm64,
// built once per test binary.
func testIndex(t *testing.T) *Index {
	t.Helper()
	if otherArch == "" {
		t.Fatalf("the index test builds linux/amd64 and linux/arm64 images; this machine is %s", runtime.GOARCH)
	}
	dirs := []string{staticBinaries(t), staticBinariesFor(t, otherArch)}
	indexOnce.Do(func() {
		sharedIdx, indexErr = BuildIndex(Options{Version: testVersion, Revision: testRevision, Created: testCreated}, dirs...)
	})
	if indexErr != nil {
		t.Fatal(indexErr)
	}
	return sharedIdx
}

// writeOutputs writes idx as make image does, into dir: the layout and the archive
// whose docker manifest names the loadArch image; it returns their paths.
func writeOutputs(t *testing.T, dir string, idx *Index, ref name.Tag, loadArch string) (layoutDir, tarPath string) {
	t.Helper()
	layoutDir, tarPath = filepath.Join(dir, "image"), filepath.Join(dir, "image.tar")
	if err := WriteLayout(layoutDir, idx, ref); err != nil {
		t.Fatal(err)
	}
	if err := WriteArchive(tarPath, layoutDir, ref, loadArch); err != nil {
		t.Fatal(err)
	}
	return layoutDir, tarPath
}

func digestOf(t *testing.T, d interface{ Digest() (v1.Hash, error) }) v1.Hash {
	t.Helper()
	h, err := d.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestIndex checks the multi-platform image as users of mixed clusters get it: one
// OCI image index of linux/amd64 and linux/arm64 with the licence and version
// annotations, the same digest from the same inputs, and each platform's SBOM
// attached as an OCI 1.1 referrer.
func TestIndex(t *testing.T) {
	idx := testIndex(t)
	im, err := idx.Index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != types.OCIImageIndex {
		t.Errorf("index media type %s, want %s", im.MediaType, types.OCIImageIndex)
	}
	wantAnnotations := map[string]string{
		"org.opencontainers.image.created":  "2026-01-02T03:04:05Z",
		"org.opencontainers.image.version":  testVersion,
		"org.opencontainers.image.revision": testRevision,
		"org.opencontainers.image.source":   "https://github.com/argocd-image-resolver/argocd-image-resolver",
		"org.opencontainers.image.title":    "argocd-image-resolver",
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
	if !reflect.DeepEqual(im.Annotations, wantAnnotations) {
		t.Errorf("index annotations\n got %v\nwant %v", im.Annotations, wantAnnotations)
	}
	var platforms []string
	for i, d := range im.Manifests {
		platforms = append(platforms, d.Platform.String())
		p := idx.Platforms[i]
		if d.Digest != digestOf(t, p.Image) || d.MediaType != types.DockerManifestSchema2 {
			t.Errorf("index entry %d: %s %s, want the %s image %s", i, d.MediaType, d.Digest, p.Platform, digestOf(t, p.Image))
		}
		cf, err := p.Image.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS != d.Platform.OS || cf.Architecture != d.Platform.Architecture || cf.Config.Labels[LabelLicenses] != "Apache-2.0" {
			t.Errorf("%s image: config %s/%s, labels %v", d.Platform, cf.OS, cf.Architecture, cf.Config.Labels)
		}
	}
	if !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("platforms %v, want linux/amd64 and linux/arm64", platforms)
	}

	t.Run("reproducible", func(t *testing.T) {
		want := digestOf(t, idx.Index)
		// The same binaries given in the other order, built anew: the same index.
		again, err := BuildIndex(Options{Version: testVersion, Revision: testRevision, Created: testCreated},
			staticBinariesFor(t, otherArch), staticBinaries(t))
		if err != nil {
			t.Fatal(err)
		}
		if got := digestOf(t, again.Index); got != want {
			t.Errorf("a second build: index %s, want %s", got, want)
		}
		for i := range again.Platforms {
			if !bytes.Equal(again.Platforms[i].SBOM, idx.Platforms[i].SBOM) {
				t.Errorf("%s: the SBOM differs between two builds", again.Platforms[i].Platform)
			}
		}
		later, err := BuildIndex(Options{Version: testVersion, Revision: testRevision, Created: testCreated.Add(time.Second)},
			staticBinaries(t), staticBinariesFor(t, otherArch))
		if err != nil {
			t.Fatal(err)
		}
		if got := digestOf(t, later.Index); got == want {
			t.Errorf("another Created gave the same index %s", got)
		}
	})

	for _, p := range idx.Platforms {
		t.Run("SBOM "+p.Platform.String(), func(t *testing.T) { checkSBOM(t, p) })
	}
	t.Run("sizes", func(t *testing.T) {
		stored, unpacked, err := idx.Sizes()
		if err != nil {
			t.Fatal(err)
		}
		raw, err := idx.Index.RawManifest()
		if err != nil {
			t.Fatal(err)
		}
		// The index, each image, each referrer and its SBOM; the base layer (the same for
		// every platform) and the referrers' empty config ({}) once.
		want := int64(len(raw)) + 2
		for i, p := range idx.Platforms {
			c, u, err := Sizes(p.Image)
			if err != nil {
				t.Fatal(err)
			}
			want += c + mustSize(t, p.Referrer) + int64(len(p.SBOM))
			if i > 0 {
				layers, err := p.Image.Layers()
				if err != nil {
					t.Fatal(err)
				}
				base, err := layers[0].Size()
				if err != nil {
					t.Fatal(err)
				}
				want -= base
			}
			if unpacked[p.Platform.String()] != u {
				t.Errorf("%s unpacked %d, want %d", p.Platform, unpacked[p.Platform.String()], u)
			}
		}
		if stored != want {
			t.Errorf("stored %d bytes, want %d", stored, want)
		}
	})
}

// checkSBOM checks one platform's SBOM against the image and its binaries: an SPDX 2.3
// document describing the image, each binary with its checksum, and each module its
// build information lists with version and go.sum hash; and its referrer manifest.
func checkSBOM(t *testing.T, p Platform) {
	var doc spdxDocument
	dec := json.NewDecoder(bytes.NewReader(p.SBOM))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("SBOM: %v\n%s", err, p.SBOM)
	}
	imgDigest := digestOf(t, p.Image)
	if doc.SPDXVersion != "SPDX-2.3" || doc.DataLicense != "CC0-1.0" || doc.SPDXID != "SPDXRef-DOCUMENT" ||
		!strings.HasSuffix(doc.DocumentNamespace, imgDigest.Hex) || doc.CreationInfo.Created != "2026-01-02T03:04:05Z" {
		t.Errorf("document header %+v", doc)
	}
	byID := map[string]spdxPackage{}
	for _, pkg := range doc.Packages {
		if _, dup := byID[pkg.SPDXID]; dup {
			t.Errorf("SPDX ID %s twice", pkg.SPDXID)
		}
		if pkg.DownloadLocation == "" || pkg.LicenseConcluded == "" || pkg.CopyrightText == "" {
			t.Errorf("%s lacks a field SPDX requires: %+v", pkg.SPDXID, pkg)
		}
		byID[pkg.SPDXID] = pkg
	}
	rel := map[string][]string{}
	for _, r := range doc.Relationships {
		if _, ok := byID[r.RelatedSPDXElement]; !ok {
			t.Errorf("relationship %+v names no package", r)
		}
		rel[r.SPDXElementID+" "+r.RelationshipType] = append(rel[r.SPDXElementID+" "+r.RelationshipType], r.RelatedSPDXElement)
	}
	if got := rel["SPDXRef-DOCUMENT DESCRIBES"]; !slices.Equal(got, []string{"SPDXRef-Image"}) {
		t.Errorf("the document describes %v, want the image", got)
	}
	img := byID["SPDXRef-Image"]
	if img.LicenseDeclared != "Apache-2.0" || img.VersionInfo != testVersion || !strings.Contains(img.Comment, imgDigest.String()) {
		t.Errorf("image package %+v", img)
	}
	_, contents := filesOf(t, p.Image, func(p string) bool { return strings.HasPrefix(p, "usr/local/bin/") })
	for _, b := range Binaries {
		id := "SPDXRef-Binary-" + b
		pkg, ok := byID[id]
		sum := sha256.Sum256(contents["usr/local/bin/"+b])
		if !ok || !slices.Contains(rel["SPDXRef-Image CONTAINS"], id) || pkg.PackageFileName != "/usr/local/bin/"+b ||
			len(pkg.Checksums) != 1 || pkg.Checksums[0] != (spdxChecksum{"SHA256", hex.EncodeToString(sum[:])}) {
			t.Errorf("binary %s: %+v (in the image: sha256 %x)", b, pkg, sum)
			continue
		}
		info, err := buildinfo.Read(bytes.NewReader(contents["usr/local/bin/"+b]))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(pkg.Comment, "GOARCH="+p.Platform.Architecture) || !strings.Contains(pkg.Comment, info.GoVersion) {
			t.Errorf("binary %s: comment %q names no GOARCH=%s or %s", b, pkg.Comment, p.Platform.Architecture, info.GoVersion)
		}
		deps := rel[id+" CONTAINS"]
		if len(deps) != len(info.Deps)+1 {
			t.Errorf("%s contains %d packages; its build information lists %d modules and the standard library", b, len(deps), len(info.Deps))
		}
		for _, m := range info.Deps {
			if m.Replace != nil {
				m = m.Replace
			}
			mp := byID["SPDXRef-Module-"+spdxIDPart(m.Path)+"-"+spdxIDPart(m.Version)]
			h1, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(m.Sum, "h1:"))
			if mp.Name != m.Path || mp.VersionInfo != m.Version || len(mp.Checksums) != 1 || mp.Checksums[0].ChecksumValue != hex.EncodeToString(h1) ||
				len(mp.ExternalRefs) != 1 || mp.ExternalRefs[0].ReferenceLocator != "pkg:golang/"+m.Path+"@"+strings.ReplaceAll(m.Version, "+", "%2B") {
				t.Errorf("module %s %s %s: SBOM package %+v", m.Path, m.Version, m.Sum, mp)
			}
		}
	}
	if ca := byID["SPDXRef-CACertificates"]; ca.VersionInfo == "" || !strings.Contains(ca.SourceInfo, caModule) {
		t.Errorf("CA certificates package %+v names no version of %s", ca, caModule)
	}

	// The referrer: an OCI artifact manifest whose subject is the image.
	m, err := p.Referrer.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	desc := v1.Descriptor{MediaType: types.DockerManifestSchema2, Size: mustSize(t, p.Image), Digest: imgDigest}
	sum := sha256.Sum256(p.SBOM)
	if m.MediaType != types.OCIManifestSchema1 || m.ArtifactType != "application/spdx+json" || m.Subject == nil || !reflect.DeepEqual(*m.Subject, desc) ||
		m.Config.MediaType != "application/vnd.oci.empty.v1+json" || m.Config.Size != 2 ||
		len(m.Layers) != 1 || m.Layers[0].MediaType != "application/spdx+json" || m.Layers[0].Digest.Hex != hex.EncodeToString(sum[:]) ||
		m.Layers[0].Annotations[AnnotationTitle] != SBOMFileName(p.Platform) {
		t.Errorf("referrer manifest %+v, want an application/spdx+json artifact of %+v", m, desc)
	}
}

func mustSize(t *testing.T, img v1.Image) int64 {
	t.Helper()
	raw, err := img.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	return int64(len(raw))
}

// TestIndexWritten writes the index as make image does, reads the layout and the
// archive back as their users do (OCI tools, docker load, crane push), and pushes the
// index with its referrers to a registry, with and without the OCI 1.1 referrers API,
// where remote.Referrers finds each platform's SBOM.
func TestIndexWritten(t *testing.T) {
	idx := testIndex(t)
	want := digestOf(t, idx.Index)
	dir := t.TempDir()
	for _, sub := range []string{"0", "1"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Written twice: the same bytes.
	l0, t0 := writeOutputs(t, filepath.Join(dir, "0"), idx, testRef, "arm64")
	l1, t1 := writeOutputs(t, filepath.Join(dir, "1"), idx, testRef, "arm64")
	if err := Verify(l0, t0, testRef, want); err != nil {
		t.Fatal(err)
	}
	for _, pair := range [][2]string{{t0, t1}, {filepath.Join(l0, "index.json"), filepath.Join(l1, "index.json")}} {
		if fileSum(t, pair[0]) != fileSum(t, pair[1]) {
			t.Errorf("%s and %s differ", pair[0], pair[1])
		}
	}
	// Every file of the layout is in the archive, byte for byte.
	err := filepath.WalkDir(l0, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(l0, p)
		got, err := tarFile(t0, filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		if sha256.Sum256(got) != fileSum(t, p) {
			t.Errorf("%s differs in the archive", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("docker load and crane push of the archive", func(t *testing.T) {
		img, err := tarball.ImageFromPath(t0, &testRef)
		if err != nil {
			t.Fatal(err)
		}
		if got := digestOf(t, img); got != digestOf(t, idx.Platforms[1].Image) {
			t.Errorf("the archive's docker image is %s, want the linux/arm64 image %s", got, digestOf(t, idx.Platforms[1].Image))
		}
		reg := registrytest.New(t)
		pushed, err := name.NewTag(reg.Ref("argocd-image-resolver") + ":" + testVersion)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(pushed, img); err != nil {
			t.Fatalf("pushing the archive's image: %v", err)
		}
		if desc, err := remote.Head(pushed); err != nil || desc.Digest != digestOf(t, img) {
			t.Errorf("the registry holds %v (%v), want %s", desc, err, digestOf(t, img))
		}
	})

	for _, tc := range []struct {
		name string
		opts []registrytest.Option
	}{
		{"referrers API", nil},
		{"referrers tag schema", []registrytest.Option{registrytest.WithoutReferrers()}},
	} {
		t.Run("pushed, "+tc.name, func(t *testing.T) {
			read, err := ReadLayout(l0, testRef)
			if err != nil {
				t.Fatal(err)
			}
			reg := registrytest.New(t, tc.opts...)
			to, err := name.NewTag(reg.Ref("platform/argocd-image-resolver") + ":" + testVersion)
			if err != nil {
				t.Fatal(err)
			}
			if err := Push(to, read); err != nil {
				t.Fatal(err)
			}
			got, err := remote.Index(to)
			if err != nil {
				t.Fatal(err)
			}
			if d := digestOf(t, got); d != want {
				t.Errorf("the registry holds index %s, want %s", d, want)
			}
			for _, p := range idx.Platforms {
				checkReferrers(t, to.Context(), p)
			}
		})
	}

	t.Run("refusals", func(t *testing.T) {
		if err := WriteArchive(filepath.Join(dir, "x.tar"), l0, testRef, "s390x"); err == nil ||
			!strings.Contains(err.Error(), "no linux/s390x image for docker load (it has [amd64 arm64])") {
			t.Errorf("WriteArchive for s390x = %v", err)
		}
		if _, err := ReadLayout(l0, name.MustParseReference("ghcr.io/x/y:v9").(name.Tag)); err == nil || !strings.Contains(err.Error(), `holds 0 image indexes tagged "v9", want 1 (other tags: ["v0.0.0-imagetest"])`) {
			t.Errorf("ReadLayout of another tag = %v", err)
		}
		other := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("0", 64)}
		if err := Verify(l0, "", testRef, other); err == nil || !strings.Contains(err.Error(), "want "+other.String()) {
			t.Errorf("Verify(layout, another digest) = %v", err)
		}
		if err := Verify("", t0, testRef, other); err == nil || !strings.Contains(err.Error(), "want only "+other.String()) {
			t.Errorf("Verify(archive, another digest) = %v", err)
		}
		// A layout written over is replaced; a directory that is no layout is not.
		if err := WriteLayout(l0, idx, testRef); err != nil {
			t.Errorf("rewriting a layout: %v", err)
		}
		notes := filepath.Join(dir, "notes")
		if err := os.MkdirAll(notes, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(notes, "todo.txt"), []byte("keep me"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := WriteLayout(notes, idx, testRef); err == nil || !strings.Contains(err.Error(), "is not an OCI layout") {
			t.Errorf("WriteLayout over another directory = %v, want a refusal", err)
		}
		if _, err := os.Stat(filepath.Join(notes, "todo.txt")); err != nil {
			t.Errorf("the other directory lost its file: %v", err)
		}
	})
}

// checkReferrers finds p's SBOM in repo through remote.Referrers, as a user's tool
// does, and reads it back.
func checkReferrers(t *testing.T, repo name.Repository, p Platform) {
	t.Helper()
	subject := repo.Digest(digestOf(t, p.Image).String())
	refs, err := remote.Referrers(subject)
	if err != nil {
		t.Fatalf("referrers of %s: %v", p.Platform, err)
	}
	rm, err := refs.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(rm.Manifests) != 1 || rm.Manifests[0].ArtifactType != ArtifactTypeSPDX || rm.Manifests[0].Digest != digestOf(t, p.Referrer) {
		t.Fatalf("referrers of the %s image: %+v, want its SBOM %s", p.Platform, rm.Manifests, digestOf(t, p.Referrer))
	}
	art, err := remote.Image(repo.Digest(rm.Manifests[0].Digest.String()))
	if err != nil {
		t.Fatal(err)
	}
	layers, err := art.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("SBOM artifact: %d layers, %v", len(layers), err)
	}
	rc, err := layers[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, p.SBOM) {
		t.Errorf("the %s SBOM read from the registry differs from the one built", p.Platform)
	}
}

func TestBuildIndexRejects(t *testing.T) {
	ok := Options{Version: "v1", Revision: "abc", Created: testCreated}
	bins := staticBinaries(t)
	tests := []struct {
		name string
		opts Options
		dirs []string
		want string
	}{
		{"no directory", ok, nil, "no binaries' directory"},
		{"BinDir", Options{BinDir: bins, Version: "v1", Revision: "abc", Created: testCreated}, []string{bins}, "not Options.BinDir"},
		{"one platform twice", ok, []string{bins, bins}, "both hold linux/" + runtime.GOARCH + " binaries"},
		{"no version", Options{Revision: "abc", Created: testCreated}, []string{bins}, "Version is empty"},
		{"missing binaries", ok, []string{t.TempDir()}, "argocd-image-resolver: no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := BuildIndex(tt.opts, tt.dirs...); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("BuildIndex = %v, want an error saying %q", err, tt.want)
			}
		})
	}
}
