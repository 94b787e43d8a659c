package migrate

import (
	"strings"
	"testing"
)

// A separate write branch (git-branch base:write, gitConfig.branch of the
// ImageUpdater) is pin-push pull-request, the base branch pin-branch; the finding
// says what changed (the branch's name, who opens the pull request). Every
// migrated set of parameters is one the plugin accepts.
func TestWriteBranch(t *testing.T) {
	annotated := func(ann string) string {
		return `apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: app
  namespace: argocd
  annotations:
    argocd-image-updater.argoproj.io/image-list: web=ghcr.io/o/web:~1.2
` + ann + `spec: {source: {repoURL: "https://github.com/o/r.git", path: app, targetRevision: main}}
`
	}
	resource := func(gitConfig string) string {
		return `apiVersion: argocd-image-updater.argoproj.io/v1alpha1
kind: ImageUpdater
metadata: {name: iu, namespace: argocd}
spec:
  namespace: argocd
  writeBackConfig:
    method: git
    gitConfig:
` + gitConfig + `  applicationRefs:
    - namePattern: app
      images: [{alias: web, imageName: ghcr.io/o/web:~1.2}]
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: app, namespace: argocd}
spec: {source: {repoURL: "https://github.com/o/r.git", path: app, targetRevision: main}}
`
	}
	git := "    argocd-image-updater.argoproj.io/write-back-method: git\n"
	tests := []struct {
		name, in      string
		branch, push  string // pin-branch and pin-push ("": absent)
		kind          Kind
		parts         []string // of a finding of kind
		noWriteBranch bool     // no finding says "new branch"
	}{
		{"base and write branch", annotated(git + "    argocd-image-updater.argoproj.io/git-branch: main:image-updater-{{.SHA256}}\n"),
			"main", "pull-request", Differs, []string{
				`annotation argocd-image-updater.argoproj.io/git-branch: git-branch "main:image-updater-{{.SHA256}}"`,
				`a new branch "image-updater-{{.SHA256}}" made from "main"`, "pin-push pull-request", "image-resolver/<app>",
				`the name "image-updater-{{.SHA256}}" is not kept`, `pull request into "main"`, "git.forges",
				"argocd-image-updater only pushed the branch", `pin-push direct would commit them to "main" itself`}, false},
		{"write branch only: from the Application's branch", annotated(git + "    argocd-image-updater.argoproj.io/git-branch: \":image-updates\"\n"),
			"", "pull-request", Differs, []string{`new branch "image-updates" made from the Application's branch (targetRevision)`}, false},
		{"empty write branch: the base branch itself", annotated(git + "    argocd-image-updater.argoproj.io/git-branch: \"main:\"\n"),
			"main", "", Differs, nil, true},
		{"base branch only", annotated(git + "    argocd-image-updater.argoproj.io/git-branch: develop\n"),
			"develop", "", Differs, nil, true},
		{"write branch without git write-back: no effect", annotated("    argocd-image-updater.argoproj.io/git-branch: main:x\n"),
			"", "", Note, []string{"git-branch", "only with write-back-method git"}, true},
		{"ImageUpdater gitConfig.branch", resource("      branch: \"main:image-updater-{{range .Images}}-{{.Name}}{{end}}\"\n"),
			"main", "pull-request", Differs, []string{"ImageUpdater argocd/iu spec.writeBackConfig.gitConfig.branch", "pin-push pull-request", "argocd-image-updater only pushed the branch"}, false},
		{"ImageUpdater gitConfig.branch with pullRequest", resource("      branch: \"main:updates\"\n      pullRequest: {github: {}}\n"),
			"main", "pull-request", Differs, []string{`new branch "updates"`, "as gitConfig.pullRequest did there"}, false},
		{"annotation git-write-branch: not argocd-image-updater's", annotated(git + "    argocd-image-updater.argoproj.io/git-write-branch: updates\n"),
			"", "", Lost, []string{"git-write-branch: not a key of argocd-image-updater's documentation", "git-branch: <base>:<write branch>", "pin-push pull-request"}, true},
		{"gitConfig.writeBranch: not argocd-image-updater's", resource("      branch: main\n      writeBranch: updates\n"),
			"main", "", Lost, []string{"gitConfig.writeBranch: unknown to migrate", "gitConfig.branch: <base>:<write branch>"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Migrate([]Input{{Name: "in", Data: []byte(tt.in)}}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			apps := migratedApps(t, res.Manifests)
			if len(apps) != 1 {
				t.Fatalf("%d migrated apps:\n%s", len(apps), res.Manifests)
			}
			if _, err := pluginPolicy(t, apps[0]); err != nil {
				t.Fatalf("the plugin refuses the migrated parameters: %v", err)
			}
			got := map[string]string{}
			for _, p := range apps[0].params {
				got[p.Name] = strings.Join(p.Values(), "|")
			}
			if got["pin-branch"] != tt.branch || got["pin-push"] != tt.push {
				t.Errorf("pin-branch %q, pin-push %q; want %q, %q", got["pin-branch"], got["pin-push"], tt.branch, tt.push)
			}
			obj := "Application argocd/app"
			if tt.parts != nil && !hasFinding(findings(res, obj, tt.kind), tt.parts...) {
				t.Errorf("no %s finding with %q among %+v", tt.kind, tt.parts, res.Objects)
			}
			for _, k := range []Kind{Lost, Differs, Note} {
				if tt.noWriteBranch && hasFinding(findings(res, obj, k), "a new branch") {
					t.Errorf("a write branch is said: %q", findings(res, obj, k))
				}
			}
		})
	}
}
