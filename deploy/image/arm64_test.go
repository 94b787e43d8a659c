package image

import (
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin/gittest"
)

// TestArm64Binaries checks the linux/arm64 image's binaries, cross-compiled here as
// make image compiles them: always their ELF headers (64-bit AArch64 executables,
// statically linked: no interpreter, no dynamic section, no shared library), and,
// with qemu-user (qemu-aarch64-static, Debian package qemu-user-static; CI installs
// it and fails without it), that `argocd-image-resolver version` runs and prints the
// stamped version, commit and platform.
func TestArm64Binaries(t *testing.T) {
	dir := staticBinariesFor(t, "arm64")
	for _, b := range Binaries {
		p := filepath.Join(dir, b)
		f, err := elf.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		if f.Class != elf.ELFCLASS64 || f.Machine != elf.EM_AARCH64 || f.Type != elf.ET_EXEC || f.Data != elf.ELFDATA2LSB {
			t.Errorf("%s: %s %s %s %s, want a little-endian 64-bit EM_AARCH64 executable", b, f.Class, f.Machine, f.Type, f.Data)
		}
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP || prog.Type == elf.PT_DYNAMIC {
				t.Errorf("%s has a %s program header: not statically linked", b, prog.Type)
			}
		}
		if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
			t.Errorf("%s needs shared libraries %v (%v)", b, libs, err)
		}
		f.Close()
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if arch, err := staticArch(p, data); err != nil || arch != "arm64" {
			t.Errorf("staticArch(%s) = %q, %v; want arm64", b, arch, err)
		}
	}

	qemu, err := exec.LookPath("qemu-aarch64-static")
	if err != nil {
		gittest.RequireOrSkip(t, "", "qemu-aarch64-static is not on PATH (Debian: apt-get install qemu-user-static), so the arm64 binary was not run")
	}
	out, err := exec.Command(qemu, filepath.Join(dir, "argocd-image-resolver"), "version", "-o", "json").CombinedOutput()
	if err != nil {
		t.Fatalf("qemu-aarch64-static argocd-image-resolver version: %v\n%s", err, out)
	}
	var v struct{ Version, Commit, Platform string }
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("version -o json under qemu: %v\n%s", err, out)
	}
	if v.Version != testVersion || v.Commit != testRevision || v.Platform != "linux/arm64" {
		t.Errorf("version under qemu = %+v, want %s %s linux/arm64", v, testVersion, testRevision)
	}
}
