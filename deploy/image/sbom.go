package image

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path"
	"runtime/debug"
	"sort"
	"strings"
	"unicode"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// SPDX is the SBOM format of the image: SPDX 2.3 in JSON (spdx.github.io/spdx-spec/v2.3).
const (
	SPDXVersion = "SPDX-2.3"
	// ArtifactTypeSPDX is the SBOM referrer's artifactType and its layer's media type.
	ArtifactTypeSPDX = "application/spdx+json"
)

// caModule is the Go module whose roots BundledCACerts writes.
const caModule = "golang.org/x/crypto/x509roots/fallback"

// The SPDX 2.3 JSON fields the SBOM uses.
type (
	spdxDocument struct {
		SPDXVersion       string             `json:"spdxVersion"`
		DataLicense       string             `json:"dataLicense"`
		SPDXID            string             `json:"SPDXID"`
		Name              string             `json:"name"`
		DocumentNamespace string             `json:"documentNamespace"`
		CreationInfo      spdxCreationInfo   `json:"creationInfo"`
		Packages          []spdxPackage      `json:"packages"`
		Relationships     []spdxRelationship `json:"relationships"`
	}
	spdxCreationInfo struct {
		Created  string   `json:"created"`
		Creators []string `json:"creators"`
	}
	spdxPackage struct {
		SPDXID                string            `json:"SPDXID"`
		Name                  string            `json:"name"`
		VersionInfo           string            `json:"versionInfo,omitempty"`
		PackageFileName       string            `json:"packageFileName,omitempty"`
		Supplier              string            `json:"supplier,omitempty"`
		DownloadLocation      string            `json:"downloadLocation"`
		FilesAnalyzed         bool              `json:"filesAnalyzed"`
		Checksums             []spdxChecksum    `json:"checksums,omitempty"`
		SourceInfo            string            `json:"sourceInfo,omitempty"`
		LicenseConcluded      string            `json:"licenseConcluded"`
		LicenseDeclared       string            `json:"licenseDeclared"`
		CopyrightText         string            `json:"copyrightText"`
		Comment               string            `json:"comment,omitempty"`
		ExternalRefs          []spdxExternalRef `json:"externalRefs,omitempty"`
		PrimaryPackagePurpose string            `json:"primaryPackagePurpose,omitempty"`
	}
	spdxChecksum struct {
		Algorithm     string `json:"algorithm"`
		ChecksumValue string `json:"checksumValue"`
	}
	spdxExternalRef struct {
		ReferenceCategory string `json:"referenceCategory"`
		ReferenceType     string `json:"referenceType"`
		ReferenceLocator  string `json:"referenceLocator"`
	}
	spdxRelationship struct {
		SPDXElementID      string `json:"spdxElementId"`
		RelationshipType   string `json:"relationshipType"`
		RelatedSPDXElement string `json:"relatedSpdxElement"`
	}
)

const noAssertion = "NOASSERTION"

// sbom builds the SPDX document of one platform's image (digest imgDigest) from what
// went into it: the binaries' build information (debug/buildinfo: the Go toolchain,
// the build settings, every module linked in with its version and go.sum hash) and
// the CA certificates' source. The same inputs give the same bytes: the creation time
// is o.Created, the namespace is derived from the image's digest, lists are sorted.
func sbom(o Options, platform v1.Platform, imgDigest v1.Hash, bins []Entry) ([]byte, error) {
	plat := platform.OS + "/" + platform.Architecture
	doc := spdxDocument{
		SPDXVersion: SPDXVersion,
		DataLicense: "CC0-1.0",
		SPDXID:      "SPDXRef-DOCUMENT",
		Name:        Title + " " + o.Version + " " + plat,
		// Unique per document, as SPDX asks: the image's digest names it.
		DocumentNamespace: Source + "/sbom/" + o.Version + "/" + platform.OS + "-" + platform.Architecture + "/" + imgDigest.Hex,
		CreationInfo: spdxCreationInfo{
			Created:  o.created().Format("2006-01-02T15:04:05Z"),
			Creators: []string{"Tool: " + Title + "-deploy-image-" + o.Version},
		},
	}
	image := spdxPackage{
		SPDXID: "SPDXRef-Image", Name: Title, VersionInfo: o.Version,
		DownloadLocation: Source, LicenseConcluded: License, LicenseDeclared: License, CopyrightText: noAssertion,
		SourceInfo:            "built from " + Source + " at commit " + o.Revision,
		Comment:               "the " + plat + " image of " + Title + " " + o.Version + ", manifest " + imgDigest.String(),
		PrimaryPackagePurpose: "CONTAINER",
		ExternalRefs: []spdxExternalRef{purl("pkg:oci/" + Title + "@" + strings.Replace(imgDigest.String(), ":", "%3A", 1) +
			"?arch=" + platform.Architecture + "&os=" + platform.OS)},
	}
	doc.Packages = append(doc.Packages, image)
	doc.Relationships = append(doc.Relationships, spdxRelationship{"SPDXRef-DOCUMENT", "DESCRIBES", image.SPDXID})

	ca, err := caPackage(o.CACerts)
	if err != nil {
		return nil, err
	}
	doc.Packages = append(doc.Packages, ca)
	doc.Relationships = append(doc.Relationships, spdxRelationship{image.SPDXID, "CONTAINS", ca.SPDXID})

	modules := map[string]spdxPackage{} // by SPDXID, shared by the binaries
	for _, b := range bins {
		bin, deps, err := binaryPackages(o, b)
		if err != nil {
			return nil, err
		}
		doc.Packages = append(doc.Packages, bin)
		doc.Relationships = append(doc.Relationships, spdxRelationship{image.SPDXID, "CONTAINS", bin.SPDXID})
		for _, d := range deps {
			if prev, ok := modules[d.SPDXID]; ok && prev.Name != d.Name {
				return nil, fmt.Errorf("image: SBOM: modules %s and %s share the SPDX ID %s", prev.Name, d.Name, d.SPDXID)
			}
			modules[d.SPDXID] = d
			doc.Relationships = append(doc.Relationships, spdxRelationship{bin.SPDXID, "CONTAINS", d.SPDXID})
		}
	}
	ids := make([]string, 0, len(modules))
	for id := range modules {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		doc.Packages = append(doc.Packages, modules[id])
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("image: SBOM: %w", err)
	}
	return buf.Bytes(), nil
}

// binaryPackages is the SPDX package of one binary of the image and the packages of
// what its build information says is linked into it: the Go standard library and every
// module.
func binaryPackages(o Options, b Entry) (spdxPackage, []spdxPackage, error) {
	name := path.Base(b.Path)
	info, err := buildinfo.Read(bytes.NewReader(b.Data))
	if err != nil {
		return spdxPackage{}, nil, fmt.Errorf("image: SBOM: reading the Go build information of %s: %w", name, err)
	}
	sum := sha256.Sum256(b.Data)
	var settings []string
	for _, s := range info.Settings {
		settings = append(settings, s.Key+"="+s.Value)
	}
	bin := spdxPackage{
		SPDXID: "SPDXRef-Binary-" + spdxIDPart(name), Name: name, VersionInfo: o.Version,
		PackageFileName: "/" + b.Path, DownloadLocation: Source,
		Checksums:        []spdxChecksum{{"SHA256", hex.EncodeToString(sum[:])}},
		SourceInfo:       "Go package " + info.Path + " at commit " + o.Revision,
		LicenseConcluded: License, LicenseDeclared: License, CopyrightText: noAssertion,
		Comment:               "built with " + info.GoVersion + ": " + strings.Join(settings, " "),
		PrimaryPackagePurpose: "APPLICATION",
		ExternalRefs:          []spdxExternalRef{purl(golangPURL(info.Main.Path, o.Version) + "#" + strings.TrimPrefix(info.Path, info.Main.Path+"/"))},
	}
	goVersion := strings.TrimPrefix(info.GoVersion, "go")
	deps := []spdxPackage{{
		SPDXID: "SPDXRef-Go-stdlib-" + spdxIDPart(goVersion), Name: "stdlib", VersionInfo: info.GoVersion,
		Supplier: "Organization: Go", DownloadLocation: "https://go.dev/dl/",
		LicenseConcluded: noAssertion, LicenseDeclared: "BSD-3-Clause", CopyrightText: noAssertion,
		Comment:               "the Go standard library and runtime, statically linked",
		PrimaryPackagePurpose: "LIBRARY",
		ExternalRefs:          []spdxExternalRef{purl("pkg:golang/stdlib@" + purlVersion(goVersion))},
	}}
	for _, m := range info.Deps {
		deps = append(deps, modulePackage(m))
	}
	return bin, deps, nil
}

// modulePackage is the SPDX package of a Go module linked into a binary: its path,
// version and go.sum hash (the h1: hash as hex, as other SBOM tools write it; it is
// the SHA-256 of the module's file tree summary, what `go mod verify` checks), the
// module that replaced it if any.
func modulePackage(m *debug.Module) spdxPackage {
	var comment string
	if m.Replace != nil {
		comment = "replaces " + m.Path + " " + m.Version
		m = m.Replace
	}
	p := spdxPackage{
		SPDXID: "SPDXRef-Module-" + spdxIDPart(m.Path) + "-" + spdxIDPart(m.Version), Name: m.Path, VersionInfo: m.Version,
		DownloadLocation: noAssertion, LicenseConcluded: noAssertion, LicenseDeclared: noAssertion, CopyrightText: noAssertion,
		Comment: comment, PrimaryPackagePurpose: "LIBRARY",
		ExternalRefs: []spdxExternalRef{purl(golangPURL(m.Path, m.Version))},
	}
	if m.Version != "" && m.Version != "(devel)" {
		p.DownloadLocation = "https://proxy.golang.org/" + proxyEscape(m.Path) + "/@v/" + proxyEscape(m.Version) + ".zip"
	}
	if h, ok := strings.CutPrefix(m.Sum, "h1:"); ok {
		if raw, err := base64.StdEncoding.DecodeString(h); err == nil && len(raw) == sha256.Size {
			p.Checksums = []spdxChecksum{{"SHA256", hex.EncodeToString(raw)}}
		}
	}
	return p
}

// caPackage is the SPDX package of the CA certificates file: Mozilla's roots from the
// Go module that BundledCACerts reads (its version from this program's build
// information) when caCerts is nil, else the operator's bundle.
func caPackage(caCerts []byte) (spdxPackage, error) {
	p := spdxPackage{
		SPDXID: "SPDXRef-CACertificates", Name: "ca-certificates", PackageFileName: CACertsPath,
		DownloadLocation: noAssertion, LicenseConcluded: noAssertion, LicenseDeclared: noAssertion, CopyrightText: noAssertion,
		PrimaryPackagePurpose: "FILE",
	}
	if caCerts != nil {
		sum := sha256.Sum256(caCerts)
		p.Checksums = []spdxChecksum{{"SHA256", hex.EncodeToString(sum[:])}}
		p.SourceInfo = "a PEM bundle given to the build (build-image -ca-certs)"
		return p, nil
	}
	data, err := BundledCACerts()
	if err != nil {
		return spdxPackage{}, err
	}
	sum := sha256.Sum256(data)
	p.Checksums = []spdxChecksum{{"SHA256", hex.EncodeToString(sum[:])}}
	m, err := caModuleInfo()
	if err != nil {
		return spdxPackage{}, fmt.Errorf("image: SBOM: the version of %s, whose roots are the image's CA certificates: %w", caModule, err)
	}
	p.VersionInfo = m.Version
	p.SourceInfo = "Mozilla's NSS roots trusted for TLS servers, from Go module " + caModule + " " + m.Version + " " + m.Sum
	p.DownloadLocation = "https://proxy.golang.org/" + proxyEscape(m.Path) + "/@v/" + proxyEscape(m.Version) + ".zip"
	p.ExternalRefs = []spdxExternalRef{purl(golangPURL(m.Path, m.Version))}
	return p, nil
}

// caModuleInfo returns the module caModule as this program was built with it, from
// its build information. A test binary's lists no modules (go test does not record
// them); then the go command says which version the module in the working directory
// requires.
func caModuleInfo() (*debug.Module, error) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return nil, errors.New("this program has no Go build information")
	}
	if len(info.Deps) == 0 {
		out, err := exec.Command("go", "list", "-m", "-json", caModule).Output()
		if err != nil {
			return nil, fmt.Errorf("%s lists no modules, and go list -m %s: %w", info.Path, caModule, err)
		}
		var m debug.Module
		return &m, json.Unmarshal(out, &m)
	}
	for _, m := range info.Deps {
		if m.Path == caModule {
			if m.Replace != nil {
				return m.Replace, nil
			}
			return m, nil
		}
	}
	return nil, fmt.Errorf("%s is not in this program's build information (%s)", caModule, info.Path)
}

func purl(locator string) spdxExternalRef {
	return spdxExternalRef{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl", ReferenceLocator: locator}
}

// golangPURL is the package URL of a Go module (github.com/package-url/purl-spec,
// type golang).
func golangPURL(modPath, version string) string {
	return "pkg:golang/" + modPath + "@" + purlVersion(version)
}

// purlVersion percent-encodes what a purl version may not hold as is (the '+' of
// +incompatible).
func purlVersion(v string) string { return strings.ReplaceAll(v, "+", "%2B") }

// proxyEscape is the Go module proxy's case encoding of a module path or version:
// each upper-case letter becomes '!' and its lower case (golang.org/ref/mod#goproxy-protocol).
func proxyEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if unicode.IsUpper(r) {
			b.WriteByte('!')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// spdxIDPart turns s into characters an SPDX ID may hold (letters, digits, '.', '-').
func spdxIDPart(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 128 && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '.' || r == '-') {
			return r
		}
		return '-'
	}, s)
}
