package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBrokenFilesExit2: the real commands, over broken configuration, registries
// and policy files as a new user writes them, exit 2 (bad input) with one message
// naming the file, the line and the column of the problem, and for a misspelt key
// the key it probably is. generate keeps the CMP contract (exit 1) with the same
// message.
func TestBrokenFilesExit2(t *testing.T) {
	pod := "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: a\n    image: nginx:1.0\n"
	for _, tt := range []struct {
		name string
		file string // config.yaml, registries.yaml or the policy file
		body string
		args []string // FILE and DIR are replaced by the file's and the app's paths
		code int
		want []string
	}{
		{"serve: config syntax", "config.yaml", "tagTTL: 5m\nheadTTL: 1m\nregistries:\n  - prefix: ghcr.io\n   insecure: true\n",
			[]string{"serve", "--config", "FILE"}, 2, []string{"config.yaml (line 5, column 4): YAML syntax: did not find expected '-' indicator"}},
		{"serve: unclosed flow list", "config.yaml", "tagTTL: 5m\n\nrefresh: [hard\n",
			[]string{"serve", "--config", "FILE"}, 2, []string{"config.yaml (line 3, column 10): YAML syntax: did not find expected ',' or ']'"}},
		{"serve: tab indentation", "config.yaml", "redis:\n\taddress: x:6379\n",
			[]string{"serve", "--config", "FILE"}, 2, []string{"config.yaml (line 2, column 1): YAML syntax: found character that cannot start any token"}},
		{"serve: misspelt top-level key", "config.yaml", "tagTTL: 5m\nheadTTl: 1m\n",
			[]string{"serve", "--config", "FILE"}, 2, []string{`config.yaml (line 2, column 1): unknown key "headTTl"; did you mean "headTTL"?`}},
		{"serve: misspelt redis key", "config.yaml", "redis:\n  adress: x:6379\n",
			[]string{"serve", "--config", "FILE"}, 2, []string{`config.yaml (line 2, column 3): unknown key "redis.adress"; did you mean "address"?`}},
		{"serve: misspelt git forge key", "config.yaml", "git:\n  forges:\n    - prefix: https://g.example/\n      kind: github\n      tokenFil: /t\n",
			[]string{"serve", "--config", "FILE"}, 2, []string{`config.yaml (line 5, column 7): unknown key "git.forges[0].tokenFil"; did you mean "tokenFile"?`}},
		{"serve: duplicate key", "config.yaml", "tagTTL: 5m\nheadTTL: 1m\ntagTTL: 6m\n",
			[]string{"serve", "--config", "FILE"}, 2, []string{"config.yaml key tagTTL (line 3, column 1): duplicate key (first at line 1)"}},
		{"resolve: misspelt trust key", "config.yaml", "trust:\n  requireTLog: false\n",
			[]string{"resolve", "nginx", "--config", "FILE"}, 2, []string{`config.yaml (line 2, column 3): unknown key "trust.requireTLog"; did you mean "requireTlog"?`}},
		{"resolve: registries entry key", "registries.yaml", "registries:\n  - prefix: ghcr.io\n    insecur: true\n",
			[]string{"resolve", "nginx", "--registries-config", "FILE"}, 2, []string{`registries config FILE (line 3, column 5): unknown key "registries[0].insecur"; did you mean "insecure"?`}},
		{"resolve: registries top-level key", "registries.yaml", "registires:\n  - prefix: ghcr.io\n",
			[]string{"resolve", "nginx", "--registries-config", "FILE"}, 2, []string{`registries config FILE (line 1, column 1): unknown key "registires"; did you mean "registries"?`}},
		{"resolve: registries number for a string", "registries.yaml", "registries:\n  - prefix: ghcr.io\n    api: 5000\n",
			[]string{"resolve", "nginx", "--registries-config", "FILE"}, 2, []string{`registries config FILE key registries[0].api (line 3, column 10): is the number 5000 (accepted: a string; quote it: "5000")`}},
		{"preview: policy file indent", ".argocd-image-resolver.yaml", "images:\n  web:\n    image: nginx\n   strategy: semver\n",
			[]string{"preview", "DIR"}, 2, []string{"file .argocd-image-resolver.yaml (line 4, column 4): YAML syntax: did not find expected key"}},
		{"preview: policy file list under a mapping", ".argocd-image-resolver.yaml", "images:\n  web:\n    image: nginx\n  - api\n",
			[]string{"preview", "DIR"}, 2, []string{"file .argocd-image-resolver.yaml (line 4, column 3): YAML syntax: did not find expected key"}},
		{"preview: policy file misspelt key", ".argocd-image-resolver.yaml", "images:\n  web:\n    image: nginx\n    strategi: semver\n",
			[]string{"preview", "DIR"}, 2, []string{`file .argocd-image-resolver.yaml key images.web.strategi (line 4): unknown key; did you mean "strategy"?`}},
		{"migrate: two Applications joined without ---", "apps.yaml", migrateApp("a") + migrateApp("b"),
			[]string{"migrate", "FILE"}, 2, []string{"FILE: document 1: key apiVersion (line 8, column 1): duplicate key (first at line 1); two objects in one document? separate them with a line ---"}},
		{"migrate: metadata twice", "apps.yaml", migrateApp("a") + "metadata:\n  name: b\n",
			[]string{"migrate", "FILE"}, 2, []string{"FILE: document 1: key metadata (line 8, column 1): duplicate key (first at line 3)"}},
		{"migrate --check: an annotation twice", "apps.yaml", strings.Replace(migrateApp("a"), "  annotations:\n", "  annotations:\n    team: a\n    team: b\n", 1),
			[]string{"migrate", "--check", "FILE"}, 2, []string{"FILE: document 1: key metadata.annotations.team (line 7, column 5): duplicate key (first at line 6)"}},
		{"generate: policy file syntax (CMP: exit 1)", ".argocd-image-resolver.yaml", "images:\n  web:\n    image: nginx\n   strategy: semver\n",
			[]string{"generate"}, 1, []string{"file .argocd-image-resolver.yaml (line 4, column 4): YAML syntax: did not find expected key"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "pod.yaml"), []byte(pod), 0o644); err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(dir, tt.file)
			if err := os.WriteFile(file, []byte(tt.body), 0o644); err != nil {
				t.Fatal(err)
			}
			args := append([]string{}, tt.args...)
			for i, a := range args {
				args[i] = strings.NewReplacer("FILE", file, "DIR", dir).Replace(a)
			}
			if args[0] == "serve" {
				args = append(args, "--socket", filepath.Join(dir, "d.sock"), "--metrics-addr", "")
			}
			env := map[string]string{"IMAGE_RESOLVER_SOCKET": filepath.Join(dir, "none.sock"), "ARGOCD_APP_NAME": "shop"}
			r := runIn(t, dir, env, binary, args...)
			if r.code != tt.code {
				t.Errorf("%v: exit %d, want %d; stderr %q", tt.args, r.code, tt.code, r.stderr)
			}
			for _, w := range tt.want {
				if w = strings.ReplaceAll(w, "FILE", file); !strings.Contains(r.stderr, w) {
					t.Errorf("%v: stderr %q\nwant it to contain %q", tt.args, r.stderr, w)
				}
			}
			if r.stdout != "" {
				t.Errorf("%v: stdout %q, want nothing", tt.args, r.stdout)
			}
		})
	}
}

// migrateApp is an Application with argocd-image-updater's annotations, as a
// user's file holds it: seven lines.
func migrateApp(name string) string {
	return "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: " + name +
		"\n  annotations:\n    argocd-image-updater.argoproj.io/image-list: web=ghcr.io/o/web\nspec: {source: {repoURL: r, path: " + name + "}}\n"
}
