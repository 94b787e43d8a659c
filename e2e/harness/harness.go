// Package harness runs argocd-image-resolver the way Argo CD runs it: Argo CD's own
// cmp-server code serving a plugin.yaml on a unix socket, repo-server's
// GenerateManifests streaming a real git checkout to it, and a real OCI registry (the
// CNCF distribution registry) holding the images. The product is driven only as a
// process (the built binary), never imported: this module pins Argo CD v2's
// dependency graph, which clashes with the main module's.
//
// Call Main from TestMain. Tests in one package share the process environment (the
// cmp-server hands its own environment to the plugin), so they must not run in
// parallel.
package harness

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/argoproj/argo-cd/v2/common"
	log "github.com/sirupsen/logrus"
)

// MainModule is the module path of the repository this e2e module tests.
const MainModule = "github.com/argocd-image-resolver/argocd-image-resolver"

var state struct {
	repoRoot string // the main module's root
	tmp      string // per-run scratch directory
	binDir   string // prepended to PATH; holds the built argocd-image-resolver
	toolDir  string // other built tools (cmd/demo), not on PATH
	sockDir  string // ARGOCD_PLUGINSOCKFILEPATH
}

// Main prepares the process environment the way an argocd-repo-server pod has it and
// runs the tests:
//   - ARGOCD_PLUGINSOCKFILEPATH: a short temp dir (unix socket paths must stay under
//     108 bytes), where cmp-servers listen and GenerateManifests looks for them;
//   - ARGOCD_CMP_WORKDIR: where the cmp-server extracts the streamed repository;
//   - PATH: a bin dir first, where the argocd-image-resolver binary is built on first
//     use, so plugin.yaml's `argocd-image-resolver-generate` finds it (and the full binary next to it).
//
// It returns the exit code for os.Exit.
func Main(m *testing.M) int {
	root, err := findRepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 2
	}
	state.repoRoot = root

	tmp, err := os.MkdirTemp("", "e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 2
	}
	defer os.RemoveAll(tmp)
	sock, err := os.MkdirTemp("", "cmp")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 2
	}
	defer os.RemoveAll(sock)

	state.tmp = tmp
	state.sockDir = sock
	state.binDir = filepath.Join(tmp, "bin")
	state.toolDir = filepath.Join(tmp, "tools")
	for _, d := range []string{state.binDir, state.toolDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 2
		}
	}

	// The resolver's own settings come from the tests, never from the shell that runs
	// them (IMAGE_RESOLVER_DEFAULT_PLATFORMS would change every expectation).
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "IMAGE_RESOLVER_") {
			must(os.Unsetenv(name))
		}
	}
	// Temp files of this process and its children (Argo CD's tarballs, Helm's scratch
	// files, t.TempDir) go under the run's scratch dir and are removed with it. The
	// socket dir above stays short, in the system temp dir.
	tmpdir := filepath.Join(tmp, "tmp")
	must(os.MkdirAll(tmpdir, 0o755))
	must(os.Setenv("TMPDIR", tmpdir))
	must(os.Setenv(common.EnvPluginSockFilePath, sock))
	must(os.Setenv(common.EnvCMPWorkDir, filepath.Join(tmp, "cmp-work")))
	must(os.Setenv("PATH", state.binDir+string(os.PathListSeparator)+os.Getenv("PATH")))

	// Argo CD logs every plugin run at info level; keep test output readable unless
	// asked otherwise (E2E_ARGOCD_LOGLEVEL=info shows the plugin's stderr on success).
	level := log.WarnLevel
	if v := os.Getenv("E2E_ARGOCD_LOGLEVEL"); v != "" {
		if l, err := log.ParseLevel(v); err == nil {
			level = l
		}
	}
	log.SetLevel(level)

	code := m.Run()
	stopAllRegistries()
	return code
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// RepoRoot is the root of the main module (the parent of e2e/).
func RepoRoot() string { return state.repoRoot }

// TempDir is the per-run scratch directory.
func TempDir() string { return state.tmp }

// SocketDir is ARGOCD_PLUGINSOCKFILEPATH.
func SocketDir() string { return state.sockDir }

// findRepoRoot walks up from the working directory (the test package's directory) to
// the go.mod of the main module. E2E_REPO_ROOT overrides it.
func findRepoRoot() (string, error) {
	if v := os.Getenv("E2E_REPO_ROOT"); v != "" {
		return filepath.Abs(v)
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && modulePath(data) == MainModule {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of module %s above the working directory (set E2E_REPO_ROOT)", MainModule)
		}
		dir = parent
	}
}

func modulePath(gomod []byte) string {
	for _, line := range bytes.Split(gomod, []byte("\n")) {
		f := strings.Fields(string(line))
		if len(f) >= 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`)
		}
	}
	return ""
}
