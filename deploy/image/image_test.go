package image

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

func TestRootFS(t *testing.T) {
	entries, err := RootFS(nil)
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]Entry{}
	for _, e := range entries {
		if _, dup := byPath[e.Path]; dup {
			t.Errorf("%s listed twice", e.Path)
		}
		if parent := filepath.Dir(e.Path); parent != "." {
			if _, ok := byPath[parent]; !ok {
				t.Errorf("%s comes before its directory %s", e.Path, parent)
			}
		}
		byPath[e.Path] = e
	}
	tests := []struct {
		path      string
		mode      os.FileMode
		uid, gid  int
		mustMatch []string // lines the file holds
	}{
		{"etc/passwd", 0o644, 0, 0, []string{"argocd:x:999:999:argocd:/home/argocd:/sbin/nologin", "root:x:0:0:root:/root:/sbin/nologin"}},
		{"etc/group", 0o644, 0, 0, []string{"argocd:x:999:", "root:x:0:"}},
		{"home/argocd", os.ModeDir | 0o755, 999, 999, nil},
		{"tmp", os.ModeDir | os.ModeSticky | 0o777, 0, 0, nil},
		{"usr/local/bin", os.ModeDir | 0o755, 0, 0, nil},
		{"etc/ssl/certs/ca-certificates.crt", 0o644, 0, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			e, ok := byPath[tt.path]
			if !ok {
				t.Fatalf("no %s", tt.path)
			}
			if e.Mode != tt.mode || e.UID != tt.uid || e.GID != tt.gid {
				t.Errorf("%s: mode %v owner %d:%d, want %v %d:%d", tt.path, e.Mode, e.UID, e.GID, tt.mode, tt.uid, tt.gid)
			}
			lines := strings.Split(string(e.Data), "\n")
			for _, want := range tt.mustMatch {
				if !slices.Contains(lines, want) {
					t.Errorf("%s has no line %q:\n%s", tt.path, want, e.Data)
				}
			}
		})
	}
	// The image has no shell: nothing under bin, sbin or usr/bin.
	for p := range byPath {
		if strings.HasPrefix(p, "bin") || strings.HasPrefix(p, "sbin") || strings.HasPrefix(p, "usr/bin") {
			t.Errorf("unexpected %s", p)
		}
	}
}

func TestBundledCACerts(t *testing.T) {
	pem, err := BundledCACerts()
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("the bundle holds no certificate")
	}
	// Mozilla's store holds about 150 server roots; a truncated bundle would break TLS
	// to most registries.
	if n := strings.Count(string(pem), "BEGIN CERTIFICATE"); n < 100 {
		t.Errorf("%d certificates, want Mozilla's ~150", n)
	}
	// ReadCACerts accepts what BundledCACerts writes.
	p := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(p, pem, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadCACerts(p); err != nil || !bytes.Equal(got, pem) {
		t.Errorf("ReadCACerts(bundle) = %d bytes, %v", len(got), err)
	}
}

func TestReadCACertsRejects(t *testing.T) {
	bundle, err := BundledCACerts()
	if err != nil {
		t.Fatal(err)
	}
	key := "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIJ+DYvh6SEqVTm50DFtMDoQikTmiCqirVv9mWG9qfSnF\n-----END PRIVATE KEY-----\n"
	tests := []struct {
		name, content, want string
	}{
		{"empty", "", "0 PEM certificates"},
		{"not PEM", "hello\n", "0 PEM certificates"},
		{"trailing garbage", string(bundle) + "garbage", "bytes that are not PEM"},
		{"a private key", key, `is a "PRIVATE KEY"; only CERTIFICATE blocks are accepted`},
		{"a bad certificate", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "certificate 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "ca.pem")
			if err := os.WriteFile(p, []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := ReadCACerts(p)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), p) {
				t.Errorf("ReadCACerts = %v, want an error naming %s and saying %q", err, p, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), "MC4CAQAwBQYDK2VwBCIEIJ") {
				t.Errorf("the error quotes the key: %v", err)
			}
		})
	}
	if _, err := ReadCACerts(filepath.Join(t.TempDir(), "missing.pem")); err == nil || !strings.Contains(err.Error(), "missing.pem") {
		t.Errorf("missing file: %v", err)
	}
}

func TestParseSourceDateEpoch(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Time
		wantErr bool
	}{
		{"0", time.Unix(0, 0).UTC(), false},
		{"1767323045", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), false},
		{" 1767323045\n", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), false},
		{"", time.Time{}, true},
		{"-1", time.Time{}, true},
		{"2026-01-02", time.Time{}, true},
		{"1.5", time.Time{}, true},
	}
	for _, tt := range tests {
		got, err := ParseSourceDateEpoch(tt.in)
		if (err != nil) != tt.wantErr || !got.Equal(tt.want) {
			t.Errorf("ParseSourceDateEpoch(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), "SOURCE_DATE_EPOCH") {
			t.Errorf("error does not name SOURCE_DATE_EPOCH: %v", err)
		}
	}
}

func TestBuildRejects(t *testing.T) {
	// A dynamically linked executable and a script: neither runs in an image without a C
	// library or a shell.
	dynamic, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	dir := func(t *testing.T, content []byte) string {
		d := t.TempDir()
		for _, b := range Binaries {
			if err := os.WriteFile(filepath.Join(d, b), content, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	ok := Options{Version: "v1", Revision: "abc", Created: testCreated}
	tests := []struct {
		name string
		opts func(t *testing.T) Options
		want string
	}{
		{"no version", func(t *testing.T) Options { o := ok; o.BinDir = dir(t, dynamic); o.Version = ""; return o }, "Version is empty"},
		{"no revision", func(t *testing.T) Options { o := ok; o.BinDir = dir(t, dynamic); o.Revision = ""; return o }, "Revision is empty"},
		{"no time", func(t *testing.T) Options { o := ok; o.BinDir = dir(t, dynamic); o.Created = time.Time{}; return o }, "Created is zero"},
		{"no binaries directory", func(t *testing.T) Options { return ok }, "BinDir is empty"},
		{"missing binary", func(t *testing.T) Options { o := ok; o.BinDir = t.TempDir(); return o }, "argocd-image-resolver: no such file"},
		{"dynamically linked", func(t *testing.T) Options { o := ok; o.BinDir = dir(t, dynamic); return o }, "is dynamically linked (interpreter /lib"},
		{"a script", func(t *testing.T) Options { o := ok; o.BinDir = dir(t, []byte("#!/bin/sh\necho hi\n")); return o }, "is not a Linux executable (ELF)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Build(tt.opts(t))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Build = %v, want an error saying %q", err, tt.want)
			}
		})
	}
}

// TestImage checks what a user of one platform's image relies on: its configuration,
// its files, the same digest from the same inputs (TestIndex checks the index of the
// platforms and what is written).
func TestImage(t *testing.T) {
	img := testImage(t)
	if err := validate.Image(img); err != nil {
		t.Fatalf("the image does not validate: %v", err)
	}
	// The media types a docker save tarball comes back with (see Build).
	mt, err := img.MediaType()
	if err != nil || mt != types.DockerManifestSchema2 {
		t.Errorf("media type %s, %v; want %s", mt, err, types.DockerManifestSchema2)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	wantConfig := v1.Config{
		User:       "999:999",
		Entrypoint: []string{"argocd-image-resolver", "sidecar", "--", "/var/run/argocd/argocd-cmp-server"},
		WorkingDir: "/home/argocd",
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt", "HOME=/home/argocd"},
		Labels: map[string]string{
			"org.opencontainers.image.version":  testVersion,
			"org.opencontainers.image.revision": testRevision,
			"org.opencontainers.image.source":   "https://github.com/argocd-image-resolver/argocd-image-resolver",
			"org.opencontainers.image.title":    "argocd-image-resolver",
			"org.opencontainers.image.licenses": "Apache-2.0",
		},
	}
	if !reflect.DeepEqual(cf.Config, wantConfig) {
		t.Errorf("config\n got %+v\nwant %+v", cf.Config, wantConfig)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" && cf.Architecture != "arm64" {
		t.Errorf("platform %s/%s", cf.OS, cf.Architecture)
	}
	if !cf.Created.Equal(testCreated) {
		t.Errorf("created %v, want %v", cf.Created, testCreated)
	}
	for _, h := range cf.History {
		if !h.Created.Equal(testCreated) {
			t.Errorf("history %q created %v, want %v", h.CreatedBy, h.Created, testCreated)
		}
	}

	files, data := filesOf(t, img, func(string) bool { return true })
	want := map[string]fileInfo{}
	entries, err := RootFS(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		h := tarHeader(e, testCreated)
		want[e.Path] = fileInfo{Type: h.Typeflag, Mode: h.Mode, UID: e.UID, GID: e.GID, Size: h.Size}
	}
	for _, b := range Binaries {
		st, err := os.Stat(filepath.Join(staticBinaries(t), b))
		if err != nil {
			t.Fatal(err)
		}
		want["usr/local/bin/"+b] = fileInfo{Type: tar.TypeReg, Mode: 0o755, Size: st.Size()}
	}
	if !reflect.DeepEqual(files, want) {
		t.Errorf("files:\n got %v\nwant %v", files, want)
	}
	if !strings.Contains(string(data["etc/passwd"]), "argocd:x:999:999:") {
		t.Errorf("passwd:\n%s", data["etc/passwd"])
	}

	// The sizes build-image reports: every file's bytes unpacked, less than that
	// compressed, and the tarball a user loads holds the compressed layers.
	compressed, uncompressed, err := Sizes(img)
	if err != nil {
		t.Fatal(err)
	}
	var fileBytes int64
	for _, f := range files {
		fileBytes += f.Size
	}
	if uncompressed < fileBytes || compressed >= uncompressed || compressed < fileBytes/10 {
		t.Errorf("Sizes = %d compressed, %d uncompressed; the files hold %d bytes", compressed, uncompressed, fileBytes)
	}

	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("reproducible", func(t *testing.T) {
		again := buildTestImage(t)
		if d, err := again.Digest(); err != nil || d != digest {
			t.Errorf("a second build of the same inputs: %s, %v; want %s", d, err, digest)
		}
		// Created is part of the image: another time, another digest.
		later, err := Build(Options{BinDir: staticBinaries(t), Version: testVersion, Revision: testRevision, Created: testCreated.Add(time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		if d, _ := later.Digest(); d == digest {
			t.Errorf("another Created gave the same digest %s", d)
		}
	})

}

func fileSum(t *testing.T, p string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// TestWriteRootFS writes RootFS as the Dockerfile's build stage does and reads back
// modes (and owners when root).
func TestWriteRootFS(t *testing.T) {
	entries, err := RootFS([]byte("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"))
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		// The home directory belongs to 999: only root can write it that way.
		err := WriteRootFS(t.TempDir(), entries)
		if err == nil || !strings.Contains(err.Error(), "needs root") {
			t.Fatalf("WriteRootFS without root = %v, want an error saying it needs root", err)
		}
		return
	}
	dir := t.TempDir()
	if err := WriteRootFS(dir, entries); err != nil {
		t.Fatal(err)
	}
	got, err := readTree(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		h := tarHeader(e, testCreated)
		want := fileInfo{Type: h.Typeflag, Mode: h.Mode, UID: e.UID, GID: e.GID, Size: h.Size}
		if got[e.Path] != want {
			t.Errorf("%s: %v, want %v", e.Path, got[e.Path], want)
		}
	}
	if len(got) != len(entries) {
		t.Errorf("%d files written, want %d: %v", len(got), len(entries), sortedKeys(got))
	}
}

// fakeELF is a minimal little-endian ELF64 executable header for machine m, with a
// PT_INTERP program header naming interp when interp is not "".
func fakeELF(m elf.Machine, osabi elf.OSABI, interp string) []byte {
	const ehsize, phsize = 64, 56
	var b bytes.Buffer
	le := binary.LittleEndian
	b.Write([]byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT), byte(osabi)})
	b.Write(make([]byte, 8))
	phnum := uint16(0)
	if interp != "" {
		phnum = 1
	}
	for _, v := range []any{uint16(elf.ET_EXEC), uint16(m), uint32(elf.EV_CURRENT), uint64(0), uint64(ehsize), uint64(0),
		uint32(0), uint16(ehsize), uint16(phsize), phnum, uint16(64), uint16(0), uint16(0)} {
		_ = binary.Write(&b, le, v)
	}
	if interp != "" {
		off := uint64(ehsize + phsize)
		for _, v := range []any{uint32(elf.PT_INTERP), uint32(elf.PF_R), off, uint64(0), uint64(0),
			uint64(len(interp) + 1), uint64(len(interp) + 1), uint64(1)} {
			_ = binary.Write(&b, le, v)
		}
		b.WriteString(interp + "\x00")
	}
	return b.Bytes()
}

func TestStaticArch(t *testing.T) {
	tests := []struct {
		name    string
		data    []byte
		want    string
		wantErr string
	}{
		{"amd64", fakeELF(elf.EM_X86_64, elf.ELFOSABI_NONE, ""), "amd64", ""},
		{"arm64", fakeELF(elf.EM_AARCH64, elf.ELFOSABI_NONE, ""), "arm64", ""},
		{"linux ABI", fakeELF(elf.EM_AARCH64, elf.ELFOSABI_LINUX, ""), "arm64", ""},
		{"dynamic", fakeELF(elf.EM_X86_64, elf.ELFOSABI_NONE, "/lib64/ld-linux-x86-64.so.2"), "",
			"bin/x is dynamically linked (interpreter /lib64/ld-linux-x86-64.so.2); the image has no C library: build with CGO_ENABLED=0"},
		{"FreeBSD", fakeELF(elf.EM_X86_64, elf.ELFOSABI_FREEBSD, ""), "", "bin/x is built for ELFOSABI_FREEBSD, not Linux: build with GOOS=linux"},
		{"MIPS", fakeELF(elf.EM_MIPS, elf.ELFOSABI_NONE, ""), "", "bin/x is for machine EM_MIPS, which this builder does not map to an OCI architecture (accepted: amd64, arm64"},
		{"not ELF", []byte("MZ\x90\x00 a Windows program"), "", "bin/x is not a Linux executable (ELF)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := staticArch("bin/x", tt.data)
			if tt.wantErr == "" {
				if err != nil || got != tt.want {
					t.Errorf("staticArch = %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("staticArch = %q, %v; want an error saying %q", got, err, tt.wantErr)
			}
		})
	}
}
