package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Stamped at build time (make build, the Dockerfile):
//
//	-ldflags "-X main.version=v0.3.0 -X main.commit=0123abc"
//
// Unstamped builds fall back to what the Go toolchain recorded (module version,
// VCS revision).
var (
	version = ""
	commit  = ""
)

// versionInfo is what `version` prints.
type versionInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

func buildVersion() versionInfo {
	v := versionInfo{Version: version, Commit: commit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
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

func (v versionInfo) String() string {
	return fmt.Sprintf("argocd-image-resolver %s (commit %s, %s, %s)", v.Version, v.Commit, v.GoVersion, v.Platform)
}

func newVersionCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and Go version of this binary",
		Long: `Print the version, the commit it was built from and the Go version, as text (-o text)
or as JSON or YAML (-o json|yaml). --version on the root command prints the text form.

Exit status: 0 printed, 2 bad flag.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format, err := outputFormat(output, "")
			if err != nil {
				return err
			}
			return writeVersion(cmd.OutOrStdout(), format)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text, json or yaml")
	return cmd
}

func writeVersion(w io.Writer, format string) error {
	v := buildVersion()
	switch format {
	case "json":
		return writeJSON(w, v)
	case "yaml":
		return writeYAML(w, v)
	}
	_, err := fmt.Fprintln(w, v)
	return err
}
