package image

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// What the test binaries are stamped with, as make image stamps them.
const (
	testVersion  = "v0.0.0-imagetest"
	testRevision = "0123456789abcdef0123456789abcdef01234567"
)

// testCreated is the fixed time of the test images.
var testCreated = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// binBuild is one architecture's static test binaries, built once per test binary.
type binBuild struct {
	once sync.Once
	dir  string
	err  error
}

var (
	buildsMu sync.Mutex
	builds   = map[string]*binBuild{} // by GOARCH
)

// staticBinaries builds Binaries for this machine's architecture as make image does
// (GoBuildArgs, GoBuildEnv) and the stand-in CMP server (testdata/cmpserver), once per
// test binary, and returns their directory.
func staticBinaries(t testing.TB) string {
	t.Helper()
	return staticBinariesFor(t, runtime.GOARCH)
}

// staticBinariesFor is staticBinaries for linux/arch; for another architecture than
// this machine's only Binaries (cross-compiling costs CPU: once per test binary, and
// the go command's build cache keeps the compiled packages across runs).
func staticBinariesFor(t testing.TB, arch string) string {
	t.Helper()
	buildsMu.Lock()
	b, ok := builds[arch]
	if !ok {
		b = &binBuild{}
		builds[arch] = b
	}
	buildsMu.Unlock()
	b.once.Do(func() {
		b.dir, b.err = os.MkdirTemp("", "image-test-bin-"+arch)
		if b.err != nil {
			return
		}
		args := GoBuildArgs(testVersion, testRevision, b.dir)
		if arch == runtime.GOARCH {
			args = append(args, "./deploy/image/testdata/cmpserver")
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = moduleRoot(t)
		cmd.Env = append(os.Environ(), GoBuildEnv(arch)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("%s: %w\n%s", cmd, err, out)
		}
	})
	if b.err != nil {
		t.Fatalf("building the static linux/%s binaries: %v", arch, b.err)
	}
	return b.dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, b := range builds {
		if b.dir != "" {
			os.RemoveAll(b.dir)
		}
	}
	os.Exit(code)
}

var (
	imageOnce sync.Once
	sharedImg v1.Image
	imageErr  error
)

// testImage is the image of the static test binaries, built once per test binary
// (an image is immutable; buildTestImage builds a fresh one).
func testImage(t *testing.T) v1.Image {
	t.Helper()
	bins := staticBinaries(t)
	imageOnce.Do(func() {
		sharedImg, imageErr = Build(Options{BinDir: bins, Version: testVersion, Revision: testRevision, Created: testCreated})
	})
	if imageErr != nil {
		t.Fatal(imageErr)
	}
	return sharedImg
}

// buildTestImage builds the image of the static test binaries anew.
func buildTestImage(t *testing.T) v1.Image {
	t.Helper()
	img, err := Build(Options{BinDir: staticBinaries(t), Version: testVersion, Revision: testRevision, Created: testCreated})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// fileInfo is what the tests compare of one file of a root filesystem.
type fileInfo struct {
	Type     byte // tar.TypeDir or tar.TypeReg
	Mode     int64
	UID, GID int
	Size     int64
}

func (f fileInfo) String() string {
	return fmt.Sprintf("type %c mode %#o owner %d:%d size %d", f.Type, f.Mode, f.UID, f.GID, f.Size)
}

// filesOf lists the image's flattened filesystem by path (no leading slash, no
// trailing slash), with each regular file's content when keep(path) says so.
func filesOf(t *testing.T, img v1.Image, keep func(string) bool) (map[string]fileInfo, map[string][]byte) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	files, data := map[string]fileInfo{}, map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := strings.TrimSuffix(strings.TrimPrefix(h.Name, "/"), "/")
		files[p] = fileInfo{Type: h.Typeflag, Mode: h.Mode, UID: h.Uid, GID: h.Gid, Size: h.Size}
		if h.Typeflag == tar.TypeReg && keep != nil && keep(p) {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			data[p] = b
		}
	}
	return files, data
}

// unpack writes the image's flattened filesystem under dir with modes and owners, as
// a container runtime does (needs root for the owners).
func unpack(t *testing.T, img v1.Image, dir string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(strings.TrimSuffix(h.Name, "/")))
		if !strings.HasPrefix(p, dir+string(filepath.Separator)) {
			t.Fatalf("image entry %q leaves the root", h.Name)
		}
		mode := fs.FileMode(h.Mode).Perm()
		if h.Mode&0o1000 != 0 {
			mode |= fs.ModeSticky
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o700); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			// Extract lists the top layer first: a file may come before its directory.
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("image entry %q has type %c, which the image should not hold", h.Name, h.Typeflag)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, h.Uid, h.Gid); err != nil {
			t.Fatal(err)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// readTree lists the files under dir as filesOf lists an image's.
func readTree(dir string) (map[string]fileInfo, error) {
	files := map[string]fileInfo{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		fi := fileInfo{Mode: int64(info.Mode().Perm())}
		if info.Mode()&fs.ModeSticky != 0 {
			fi.Mode |= 0o1000
		}
		switch {
		case info.IsDir():
			fi.Type = tar.TypeDir
		case info.Mode().IsRegular():
			fi.Type, fi.Size = tar.TypeReg, info.Size()
		default:
			return fmt.Errorf("%s: unexpected file type %v", p, info.Mode().Type())
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			fi.UID, fi.GID = int(st.Uid), int(st.Gid)
		}
		files[filepath.ToSlash(rel)] = fi
		return nil
	})
	return files, err
}
