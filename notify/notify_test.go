package notify

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseApp(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    App
		wantErr string
	}{
		{in: "web", want: App{Namespace: "argocd", Name: "web"}},
		{in: "team-a_web", want: App{Namespace: "team-a", Name: "web"}},
		{in: "team-a_web.v2", want: App{Namespace: "team-a", Name: "web.v2"}},
		{in: "", wantErr: `application "": name ""`},
		{in: "Web", wantErr: `name "Web" is not a Kubernetes name`},
		{in: "_web", wantErr: `namespace ""`},
		{in: "a_b_c", wantErr: `name "b_c"`},
	} {
		got, err := ParseApp(tc.in, "argocd")
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("ParseApp(%q) = %v, %v; want error containing %q", tc.in, got, err, tc.wantErr)
		case tc.wantErr == "" && (err != nil || got != tc.want):
			t.Errorf("ParseApp(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestLoadConfig(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "") // not in a cluster
	t.Setenv("KUBECONFIG", "")
	if _, err := LoadConfig(); !errors.Is(err, ErrNoCluster) {
		t.Errorf("no cluster, no KUBECONFIG: %v, want ErrNoCluster", err)
	}
	bad := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(bad, []byte("clusters: [oops"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", bad)
	if _, err := LoadConfig(); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("broken kubeconfig: %v, want an error naming %s", err, bad)
	}
	good := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(good, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443'}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", good)
	cfg, err := LoadConfig()
	if err != nil || cfg.Host != "https://127.0.0.1:6443" {
		t.Errorf("kubeconfig: %+v, %v", cfg, err)
	}
}
