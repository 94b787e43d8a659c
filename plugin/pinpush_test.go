package plugin

import (
	"strings"
	"testing"
)

// pin-push and pin-pr-group (issue 23): parameters over the policy file, defaults
// where pins are on, nothing where they are off.
func TestPinPushSettings(t *testing.T) {
	cases := []struct {
		name   string
		file   string
		params Parameters
		mode   string
		push   string // the effective PinSettings.Push
		group  string // the effective PinSettings.PRGroup
	}{
		{name: "defaults with pins on", params: Parameters{ps("pin-mode", "write")},
			mode: PinWrite, push: PinPushDirect, group: PinPRGroupApp},
		{name: "pins off: no pin settings", params: nil,
			mode: PinOff},
		{name: "parameters", params: Parameters{ps("pin-mode", "use"), ps("pin-push", "pull-request"), ps("pin-pr-group", "repository")},
			mode: PinUse, push: PinPushPullRequest, group: PinPRGroupRepository},
		{name: "parameters trimmed", params: Parameters{ps("pin-mode", "use"), ps("pin-push", " pull-request "), ps("pin-pr-group", "\tapp")},
			mode: PinUse, push: PinPushPullRequest, group: PinPRGroupApp},
		{name: "pull-request, group by default", params: Parameters{ps("pin-mode", "use"), ps("pin-push", "pull-request")},
			mode: PinUse, push: PinPushPullRequest, group: PinPRGroupApp},
		{name: "explicit direct", params: Parameters{ps("pin-mode", "write"), ps("pin-push", "direct")},
			mode: PinWrite, push: PinPushDirect, group: PinPRGroupApp},
		{name: "policy file", file: "pinMode: use\npinPush: pull-request\npinPRGroup: repository\n",
			mode: PinUse, push: PinPushPullRequest, group: PinPRGroupRepository},
		{name: "policy file, parameter pin-mode", file: "pinPush: pull-request\n", params: Parameters{ps("pin-mode", "write")},
			mode: PinWrite, push: PinPushPullRequest, group: PinPRGroupApp},
		{name: "parameters over the file", file: "pinMode: use\npinPush: pull-request\npinPRGroup: repository\n",
			params: Parameters{ps("pin-push", "pull-request"), ps("pin-pr-group", "app")},
			mode:   PinUse, push: PinPushPullRequest, group: PinPRGroupApp},
		{name: "parameter direct over the file's pull-request and group", file: "pinMode: use\npinPush: pull-request\npinPRGroup: repository\n",
			params: Parameters{ps("pin-push", "direct")},
			mode:   PinUse, push: PinPushDirect, group: PinPRGroupRepository},
		{name: "empty parameters leave the file's", file: "pinMode: use\npinPush: pull-request\npinPRGroup: repository\n",
			params: Parameters{ps("pin-push", " "), ps("pin-pr-group", "")},
			mode:   PinUse, push: PinPushPullRequest, group: PinPRGroupRepository},
		{name: "parameter pin-mode off turns the file's pins off", file: "pinMode: use\npinPush: pull-request\npinPRGroup: repository\n",
			params: Parameters{ps("pin-mode", "off")},
			mode:   PinOff},
		{name: "empty file keys", file: "pinMode: write\npinPush:\npinPRGroup:\n",
			mode: PinWrite, push: PinPushDirect, group: PinPRGroupApp},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pol, err := LoadPolicy(appDir(t, tc.file), tc.params)
			if err != nil {
				t.Fatal(err)
			}
			if pol.PinMode != tc.mode || pol.Pins.Push != tc.push || pol.Pins.PRGroup != tc.group {
				t.Errorf("pin-mode %q push %q group %q, want %q %q %q", pol.PinMode, pol.Pins.Push, pol.Pins.PRGroup, tc.mode, tc.push, tc.group)
			}
			if len(pol.Warnings) != 0 {
				t.Errorf("warnings %q", pol.Warnings)
			}
		})
	}
}

func TestPinPushErrors(t *testing.T) {
	const pushAcc = "(accepted: direct (the default: pins are committed to the pin branch) or pull-request (pins are proposed to it as a pull request, on a forge the operator configures in git.forges))"
	const groupAcc = "(accepted: app (the default: one pull request per app) or repository (one per repository and base branch), with pin-push pull-request)"
	cases := []struct {
		name   string
		file   string
		params Parameters
		want   []string // one per problem, in order
	}{
		{name: "bad pin-push", params: Parameters{ps("pin-mode", "use"), ps("pin-push", "pr")},
			want: []string{`parameter "pin-push": invalid value "pr" ` + pushAcc}},
		{name: "bad pin-push, pins off", params: Parameters{ps("pin-push", "Pull-Request")},
			want: []string{`parameter "pin-push": invalid value "Pull-Request" ` + pushAcc}},
		{name: "bad pin-pr-group", params: Parameters{ps("pin-mode", "use"), ps("pin-push", "pull-request"), ps("pin-pr-group", "repo")},
			want: []string{`parameter "pin-pr-group": invalid value "repo" ` + groupAcc}},
		{name: "pin-push as an array", params: Parameters{ps("pin-mode", "use"), pa("pin-push", "direct")},
			want: []string{`parameter "pin-push": is an array, expected a string ` + pushAcc}},
		{name: "pin-pr-group as a map", params: Parameters{ps("pin-mode", "use"), pm("pin-pr-group", map[string]string{"a": "b"})},
			want: []string{`parameter "pin-pr-group": is a map, expected a string ` + groupAcc}},
		{name: "bad pinPush", file: "pinMode: use\npinPush: pullrequest\n",
			want: []string{`file .argocd-image-resolver.yaml key pinPush (line 2): invalid value "pullrequest" ` + pushAcc}},
		{name: "bad pinPRGroup", file: "pinMode: use\npinPRGroup: [app]\n",
			want: []string{`file .argocd-image-resolver.yaml key pinPRGroup (line 2): is a list ` + groupAcc}},
		{name: "bad file value overridden by a parameter is still reported", file: "pinMode: use\npinPush: github\n", params: Parameters{ps("pin-push", "pull-request")},
			want: []string{`file .argocd-image-resolver.yaml key pinPush (line 2): invalid value "github" ` + pushAcc}},
		{name: "pin-push without pin-mode", params: Parameters{ps("pin-push", "pull-request")},
			want: []string{`parameter "pin-push": "pull-request" applies only with pin-mode write or use, and pin-mode is off (the default); remove it, or set pin-mode write or use`}},
		{name: "pin-push direct with pin-mode off", params: Parameters{ps("pin-mode", "off"), ps("pin-push", "direct")},
			want: []string{`parameter "pin-push": "direct" applies only with pin-mode write or use, and pin-mode is off (parameter "pin-mode"); remove it, or set pin-mode write or use`}},
		{name: "both with pin-mode off", params: Parameters{ps("pin-push", "pull-request"), ps("pin-pr-group", "repository")},
			want: []string{
				`parameter "pin-push": "pull-request" applies only with pin-mode write or use, and pin-mode is off (the default)`,
				`parameter "pin-pr-group": "repository" applies only with pin-mode write or use, and pin-mode is off (the default)`,
			}},
		{name: "file pinPush with the file's pinMode off", file: "pinMode: off\npinPush: pull-request\n",
			want: []string{`file .argocd-image-resolver.yaml key pinPush (line 2): "pull-request" applies only with pin-mode write or use, and pin-mode is off (file .argocd-image-resolver.yaml key pinMode (line 1))`}},
		{name: "file pinPRGroup without pinMode", file: "pinPRGroup: app\n",
			want: []string{`file .argocd-image-resolver.yaml key pinPRGroup (line 1): "app" applies only with pin-mode write or use, and pin-mode is off (the default)`}},
		{name: "parameter pin-push with the file's pinMode off", file: "pinMode: off\n", params: Parameters{ps("pin-push", "pull-request")},
			want: []string{`parameter "pin-push": "pull-request" applies only with pin-mode write or use, and pin-mode is off (file .argocd-image-resolver.yaml key pinMode (line 1))`}},
		{name: "pin-pr-group with pin-push direct by default", params: Parameters{ps("pin-mode", "use"), ps("pin-pr-group", "repository")},
			want: []string{`parameter "pin-pr-group": "repository" applies only with pin-push pull-request, and pin-push is direct (the default); remove it, or set pin-push pull-request`}},
		{name: "pin-pr-group app with pin-push direct", params: Parameters{ps("pin-mode", "use"), ps("pin-push", "direct"), ps("pin-pr-group", "app")},
			want: []string{`parameter "pin-pr-group": "app" applies only with pin-push pull-request, and pin-push is direct (parameter "pin-push"); remove it, or set pin-push pull-request`}},
		{name: "file pinPRGroup with the file's direct", file: "pinMode: write\npinPush: direct\npinPRGroup: repository\n",
			want: []string{`file .argocd-image-resolver.yaml key pinPRGroup (line 3): "repository" applies only with pin-push pull-request, and pin-push is direct (file .argocd-image-resolver.yaml key pinPush (line 2))`}},
		{name: "parameter pin-pr-group with the file's direct", file: "pinMode: write\npinPush: direct\n", params: Parameters{ps("pin-pr-group", "repository")},
			want: []string{`parameter "pin-pr-group": "repository" applies only with pin-push pull-request, and pin-push is direct (file .argocd-image-resolver.yaml key pinPush (line 2))`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pol, err := LoadPolicy(appDir(t, tc.file), tc.params)
			if err == nil {
				t.Fatalf("no error, policy %+v; want %q", pol, tc.want)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.want) {
				t.Fatalf("%d problems, want %d:\n%v", len(lines), len(tc.want), err)
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(lines[i], w) {
					t.Errorf("problem %d:\n%s\nwant it to start\n%s", i, lines[i], w)
				}
			}
		})
	}
}
