package harness

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/argoproj/argo-cd/v2/cmpserver"
	"github.com/argoproj/argo-cd/v2/cmpserver/plugin"
	"github.com/argoproj/argo-cd/v2/common"
	"google.golang.org/grpc"
	"sigs.k8s.io/yaml"
)

// CMPServer is Argo CD's argocd-cmp-server, in process, serving one plugin.yaml on
// <ARGOCD_PLUGINSOCKFILEPATH>/<name>-<version>.sock.
type CMPServer struct {
	Config  *plugin.PluginConfig
	Address string
	grpc    *grpc.Server
}

// PluginName is what an Application names in spec.source.plugin.name:
// <metadata.name>-<spec.version>, or <metadata.name> without a version.
func (s *CMPServer) PluginName() string {
	if s.Config.Spec.Version == "" {
		return s.Config.Metadata.Name
	}
	return s.Config.Metadata.Name + "-" + s.Config.Spec.Version
}

// StartCMPServer reads <configDir>/plugin.yaml with Argo CD's own
// plugin.ReadPluginConfig (which validates it as argocd-cmp-server does) and serves it
// the way argocd-cmp-server's Run does, without Run's signal handling and log.Fatal.
// The server stops at the end of the test.
//
// CreateGRPC wipes and recreates the shared ARGOCD_CMP_WORKDIR, so start servers
// before rendering, not while a render is in flight.
func StartCMPServer(t testing.TB, configDir string) *CMPServer {
	t.Helper()
	if state.sockDir == "" || os.Getenv(common.EnvPluginSockFilePath) != state.sockDir {
		t.Fatalf("harness.Main has not prepared the environment (call it from TestMain)")
	}
	cfg, err := plugin.ReadPluginConfig(configDir)
	if err != nil {
		t.Fatalf("reading plugin config from %s: %v", configDir, err)
	}
	srv, err := cmpserver.NewServer(plugin.CMPServerInitConstants{PluginConfig: *cfg})
	if err != nil {
		t.Fatalf("cmpserver.NewServer: %v", err)
	}
	g, err := srv.CreateGRPC()
	if err != nil {
		t.Fatalf("cmpserver CreateGRPC: %v", err)
	}
	addr := cfg.Address()
	_ = os.Remove(addr)
	lis, err := net.Listen("unix", addr)
	if err != nil {
		t.Fatalf("listening on %s: %v", addr, err)
	}
	go func() {
		if err := g.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Logf("cmp-server %s: %v", addr, err)
		}
	}()
	s := &CMPServer{Config: cfg, Address: addr, grpc: g}
	t.Cleanup(s.Stop)
	return s
}

// Stop stops serving and removes the socket, as argocd-cmp-server does on SIGTERM.
func (s *CMPServer) Stop() {
	s.grpc.Stop()
	_ = os.Remove(s.Address)
}

// PluginSpec is a ConfigManagementPlugin written by a test.
type PluginSpec struct {
	Name     string
	Version  string
	Init     []string
	Generate []string
	// Dynamic is the spec.parameters.dynamic command, if any.
	Dynamic []string
}

// WritePluginConfig writes spec as <dir>/plugin.yaml in a fresh temp dir and returns
// the dir, for StartCMPServer.
func WritePluginConfig(t testing.TB, spec PluginSpec) string {
	t.Helper()
	type command struct {
		Command []string `json:"command,omitempty"`
	}
	doc := map[string]any{
		"apiVersion": "argoproj.io/v1alpha1",
		"kind":       plugin.ConfigManagementPluginKind,
		"metadata":   map[string]any{"name": spec.Name},
	}
	s := map[string]any{"generate": command{spec.Generate}}
	if spec.Version != "" {
		s["version"] = spec.Version
	}
	if len(spec.Init) > 0 {
		s["init"] = command{spec.Init}
	}
	if len(spec.Dynamic) > 0 {
		s["parameters"] = map[string]any{"dynamic": command{spec.Dynamic}}
	}
	doc["spec"] = s
	data, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, common.PluginConfigFileName), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// RepoPluginConfigDir is the directory of the repository's own plugin.yaml (the repo
// root). It fails the test, naming the file, when plugin.yaml is missing.
func RepoPluginConfigDir(t testing.TB) string {
	t.Helper()
	p := filepath.Join(state.repoRoot, common.PluginConfigFileName)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the repository's %s is missing: %v", p, err)
	}
	return state.repoRoot
}

// StartRepoPlugin builds the resolver binary and serves the repository's plugin.yaml.
func StartRepoPlugin(t testing.TB) *CMPServer {
	t.Helper()
	ResolverBinary(t)
	s := StartCMPServer(t, RepoPluginConfigDir(t))
	if got := s.PluginName(); got != "image-resolver-v1" {
		t.Fatalf("plugin.yaml names the plugin %q; Applications use %q", got, "image-resolver-v1")
	}
	gen := append(append([]string{}, s.Config.Spec.Generate.Command...), s.Config.Spec.Generate.Args...)
	if cmd := strings.Join(gen, " "); cmd != GenerateBinaryName {
		t.Fatalf("plugin.yaml spec.generate.command is %q, want %q", cmd, GenerateBinaryName)
	}
	return s
}
