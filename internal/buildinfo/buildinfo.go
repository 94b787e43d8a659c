// Package buildinfo is what a binary of this project says its version is: the
// version and commit stamped at build time (make build, make image, the Dockerfile:
// -ldflags "-X main.version=v0.3.0 -X main.commit=0123abc"), else what the Go
// toolchain recorded (module version, VCS revision). Standard library only: the thin
// argocd-image-resolver-generate links it.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Info is what `version` prints.
type Info struct {
	Name      string `json:"-"` // the binary's name
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Read returns the version of the binary name, from the stamped version and
// commit ("" when not stamped) and the build information.
func Read(name, version, commit string) Info {
	v := Info{Name: name, Version: version, Commit: commit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v.Version == "" && bi.Main.Version != "" {
			v.Version = bi.Main.Version
		}
		modified := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if v.Commit == "" {
					v.Commit = s.Value
				}
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if modified && commit == "" && v.Commit != "" {
			v.Commit += "-dirty"
		}
	}
	if v.Version == "" {
		v.Version = "(devel)"
	}
	if v.Commit == "" {
		v.Commit = "unknown"
	}
	return v
}

// String is the one line of `version`: NAME VERSION (commit C, GO, OS/ARCH).
func (v Info) String() string {
	return fmt.Sprintf("%s %s (commit %s, %s, %s)", v.Name, v.Version, v.Commit, v.GoVersion, v.Platform)
}
