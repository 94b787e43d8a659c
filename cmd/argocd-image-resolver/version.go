package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/buildinfo"
)

// Stamped at build time (make build, make image, the Dockerfile), as for
// argocd-image-resolver-generate:
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
type versionInfo = buildinfo.Info

func buildVersion() versionInfo { return buildinfo.Read("argocd-image-resolver", version, commit) }

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
