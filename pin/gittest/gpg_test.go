package gittest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// AssertNoKeyMaterial reports an error that holds a line of a key or the
// passphrase, and KeyMaterial gives the lines of a key file that carry the key.
func TestKeyMaterialChecks(t *testing.T) {
	k := NewOpenPGPKey(t, "", "correct horse")
	line := strings.Split(k.Private, "\n")[3]
	for _, tc := range []struct {
		err  error
		want int // failures
	}{
		{errors.New("git.signingKeyFile /k: not a private key"), 0},
		{errors.New("bad key: " + line), 1},
		{errors.New("passphrase correct horse refused"), 1},
	} {
		if got := (&recorder{TB: t}).run(func(tb testing.TB) { k.AssertNoKeyMaterial(tb, tc.err) }); len(got) != tc.want {
			t.Errorf("%v: %d failures %q, want %d", tc.err, len(got), got, tc.want)
		}
	}

	file := filepath.Join(t.TempDir(), "key.asc")
	if err := os.WriteFile(file, []byte(k.Private), 0o600); err != nil {
		t.Fatal(err)
	}
	m := KeyMaterial(t, file)
	if len(m) == 0 || !strings.Contains(strings.Join(m, "\n"), line) || strings.Contains(strings.Join(m, "\n"), "-----") {
		t.Errorf("key material %q", m)
	}
}
