package pin

import (
	"reflect"
	"strings"
	"testing"
)

const holdsRef = "ghcr.io/org/web:1.3.0@" + targetDigestA

func TestReadHolds(t *testing.T) {
	for _, tc := range []struct {
		name, content string
		want          map[string]Hold
	}{
		{name: "no file", want: map[string]Hold{}},
		{name: "pins only", content: "pins:\n  web:\n    reference: ghcr.io/org/web:1.2.0\n", want: map[string]Hold{}},
		{name: "held only", content: "held:\n  web:\n    reference: " + holdsRef + "\n    commit: abc\n    reason: a person replaced it\n",
			want: map[string]Hold{"web": {Alias: "web", Reference: holdsRef, Commit: "abc", Reason: "a person replaced it"}}},
		{name: "both, reference alone", content: "pins:\n  web:\n    reference: ghcr.io/org/web:1.2.0\nheld:\n  web:\n    reference: ghcr.io/org/web:1.3.0\n  api: {reference: 'ghcr.io/org/api:2.0.0'}\n",
			want: map[string]Hold{"web": {Alias: "web", Reference: "ghcr.io/org/web:1.3.0"}, "api": {Alias: "api", Reference: "ghcr.io/org/api:2.0.0"}}},
		{name: "held null", content: "pins: {}\nheld:\n", want: map[string]Hold{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var content []byte
			if tc.name != "no file" {
				content = []byte(tc.content)
			}
			got, err := ReadHolds(content)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestReadHoldsErrors: a held: entry is read as strictly as a pin; the error
// names the file, the key, the line and the value, and says what is accepted.
// The pins target reads the same file strictly too.
func TestReadHoldsErrors(t *testing.T) {
	for _, tc := range []struct {
		name, content string
		want          []string
	}{
		{"held a list", "held:\n  - web\n", []string{PinsFile, "key held (line 2)", "is a list", "accepted: a mapping of image alias to held reference"}},
		{"entry a string", "held:\n  web: ghcr.io/org/web:1.3.0\n", []string{"key held.web (line 2)", `the string "ghcr.io/org/web:1.3.0"`, "accepted: a mapping with keys reference, commit, reason"}},
		{"unknown key", "held:\n  web:\n    reference: ghcr.io/org/web:1.3.0\n    until: tomorrow\n", []string{"key held.web.until (line 4)", "unknown key", "accepted: reference, commit, reason"}},
		{"no reference", "held:\n  web:\n    reason: bad\n", []string{"key held.web (line 3)", "no reference", "reference is required"}},
		{"reference without a tag", "held:\n  web:\n    reference: ghcr.io/org/web\n", []string{"key held.web.reference (line 3)", `invalid reference "ghcr.io/org/web"`, "no tag", "accepted: image:tag or image:tag@digest"}},
		{"reference a number", "held:\n  web:\n    reference: 1.3\n", []string{"key held.web.reference (line 3)", `invalid reference "1.3"`}},
		{"reason a mapping", "held:\n  web:\n    reference: ghcr.io/org/web:1.3.0\n    reason: {a: b}\n", []string{"key held.web.reason (line 4)", "is a mapping", "accepted: a string"}},
		{"written twice", "held:\n  web:\n    reference: ghcr.io/org/web:1.3.0\n  web:\n    reference: ghcr.io/org/web:1.4.0\n", []string{"key held.web", "written twice (lines 2 and 4)"}},
		{"unknown top-level key", "pins: {}\nhold: {}\n", []string{"key hold (line 2)", "unknown key", "accepted: pins, held"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadHolds([]byte(tc.content))
			if err == nil {
				t.Fatal("no error")
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			// the pins target refuses the same file
			if _, perr := (pinsTarget{}).Read([]byte(tc.content), map[string]string{"web": "ghcr.io/org/web"}); perr == nil || perr.Error() != err.Error() {
				t.Errorf("pins target: %v, want %v", perr, err)
			}
		})
	}
}

func TestApplyHolds(t *testing.T) {
	hold := Hold{Alias: "web", Reference: holdsRef, Commit: "0123456789abcdef0123456789abcdef01234567", Reason: "a person replaced it in git (commit 0123456789ab)"}
	const pins = "# my pins\npins:\n  web:\n    image: ghcr.io/org/web\n    reference: ghcr.io/org/web:1.2.0 # by hand\n    tag: 1.2.0\n"
	const heldWeb = "held:\n  web:\n    reference: " + holdsRef + "\n    commit: 0123456789abcdef0123456789abcdef01234567\n    reason: a person replaced it in git (commit 0123456789ab)\n"
	for _, tc := range []struct {
		name    string
		content *string
		set     []Hold
		lift    []string
		want    string // "" with wantNil
		wantNil bool
	}{
		{name: "no file, nothing to set", wantNil: true},
		{name: "no file, nothing to set but a lift", lift: []string{"web"}, wantNil: true},
		{name: "no file: created with the held key alone", set: []Hold{hold},
			want: "# " + strings.ReplaceAll(heldComment, "\n", "\n# ") + "\n" + heldWeb},
		{name: "beside pins: comments and pins kept", content: ptr(pins), set: []Hold{hold},
			want: pins + "# " + strings.ReplaceAll(heldComment, "\n", "\n# ") + "\n" + heldWeb},
		{name: "replaced in place", content: ptr("pins: {}\nheld:\n  web: # keep me\n    reference: ghcr.io/org/web:1.1.0\n    reason: old\n"),
			set:  []Hold{{Alias: "web", Reference: "ghcr.io/org/web:1.3.0"}},
			want: "pins: {}\nheld:\n  web: # keep me\n    reference: ghcr.io/org/web:1.3.0\n"},
		{name: "new aliases appended in alias order", content: ptr("held:\n  web:\n    reference: ghcr.io/org/web:1.3.0\n"),
			set:  []Hold{{Alias: "worker", Reference: "ghcr.io/org/worker:3.0.0"}, {Alias: "api", Reference: "ghcr.io/org/api:2.0.0"}},
			want: "held:\n  web:\n    reference: ghcr.io/org/web:1.3.0\n  api:\n    reference: ghcr.io/org/api:2.0.0\n  worker:\n    reference: ghcr.io/org/worker:3.0.0\n"},
		{name: "a lift removes the entry", content: ptr(pins + "held:\n  api:\n    reference: ghcr.io/org/api:2.0.0\n  web:\n    reference: ghcr.io/org/web:1.3.0\n"),
			lift: []string{"web"}, want: pins + "held:\n  api:\n    reference: ghcr.io/org/api:2.0.0\n"},
		{name: "the last lift removes held:", content: ptr(pins + "held:\n  web:\n    reference: ghcr.io/org/web:1.3.0\n"),
			lift: []string{"web", "absent"}, want: pins},
		{name: "a lift of an alias not held changes nothing", content: ptr(pins), lift: []string{"web"}, want: pins},
		{name: "set wins over a lift of the same alias", content: ptr("held:\n  web:\n    reference: ghcr.io/org/web:1.1.0\n"),
			set: []Hold{{Alias: "web", Reference: "ghcr.io/org/web:1.3.0"}}, lift: []string{"web"}, want: "held:\n  web:\n    reference: ghcr.io/org/web:1.3.0\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var content []byte
			if tc.content != nil {
				content = []byte(*tc.content)
			}
			out, err := ApplyHolds(content, tc.set, tc.lift)
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantNil {
				if out != nil {
					t.Errorf("got %q, want no file", out)
				}
				return
			}
			if string(out) != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", out, tc.want)
			}
			// what was written reads back, and the pins are as they were
			got, err := ReadHolds(out)
			if err != nil {
				t.Fatalf("read back: %v", err)
			}
			for _, h := range tc.set {
				if got[h.Alias] != h {
					t.Errorf("read back %+v, want %+v", got[h.Alias], h)
				}
			}
			if before, after := readWeb(t, content), readWeb(t, out); before != after {
				t.Errorf("the pin changed: %q -> %q", before, after)
			}
		})
	}
}

func ptr(s string) *string { return &s }

func readWeb(t *testing.T, content []byte) string {
	t.Helper()
	pins, err := (pinsTarget{}).Read(content, map[string]string{"web": "ghcr.io/org/web"})
	if err != nil {
		t.Fatal(err)
	}
	return pins["web"].Reference
}

func TestApplyHoldsErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		content string
		set     []Hold
		want    []string
	}{
		{"no alias", "", []Hold{{Reference: "ghcr.io/org/web:1.3.0"}}, []string{`a hold of "ghcr.io/org/web:1.3.0" has no alias`}},
		{"twice", "", []Hold{{Alias: "web", Reference: "ghcr.io/org/web:1.3.0"}, {Alias: "web", Reference: "ghcr.io/org/web:1.4.0"}}, []string{"alias web is held twice"}},
		{"bad reference", "", []Hold{{Alias: "web", Reference: "ghcr.io/org/web"}}, []string{"hold of alias web", `invalid reference "ghcr.io/org/web"`, "no tag"}},
		{"a file that does not parse", "held: [\n", []Hold{{Alias: "web", Reference: "ghcr.io/org/web:1.3.0"}}, []string{PinsFile}},
		{"a bad entry in the file", "held:\n  api: 1\n", []Hold{{Alias: "web", Reference: "ghcr.io/org/web:1.3.0"}}, []string{"key held.api (line 2)", "the number 1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ApplyHolds([]byte(tc.content), tc.set, nil)
			if err == nil {
				t.Fatal("no error")
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
		})
	}
}

// TestPinsApplyKeepsHolds: the pins target writes pins into a file that holds
// holds (or only holds), and keeps them.
func TestPinsApplyKeepsHolds(t *testing.T) {
	const only = "held:\n  web:\n    reference: ghcr.io/org/web:1.3.0\n"
	out, err := (pinsTarget{}).Apply([]byte(only), []Pin{targetPin("api", "ghcr.io/org/api", "2.1.0", targetDigestB, false)})
	if err != nil {
		t.Fatal(err)
	}
	if want := only + "pins:\n  api:\n    image: ghcr.io/org/api\n    reference: ghcr.io/org/api:2.1.0\n    tag: 2.1.0\n    digest: " + targetDigestB + "\n"; string(out) != want {
		t.Errorf("got:\n%s\nwant:\n%s", out, want)
	}
	if h, err := ReadHolds(out); err != nil || h["web"].Reference != "ghcr.io/org/web:1.3.0" {
		t.Errorf("holds %+v, %v", h, err)
	}
}
