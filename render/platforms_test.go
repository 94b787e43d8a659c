package render

import (
	"testing"
)

func TestWorkloadPlatforms(t *testing.T) {
	tests := []struct {
		name, spec string
		want       string
	}{
		{"none", ``, ""},
		{"nodeSelector arch", `nodeSelector: {kubernetes.io/arch: arm64}`, "linux/arm64"},
		{"nodeSelector legacy label", `nodeSelector: {beta.kubernetes.io/arch: amd64, beta.kubernetes.io/os: linux}`, "linux/amd64"},
		{"nodeSelector os only", `nodeSelector: {kubernetes.io/os: linux}`, ""},
		{"nodeSelector windows", `nodeSelector: {kubernetes.io/os: windows, kubernetes.io/arch: amd64}`, "windows/amd64"},
		{"nodeSelector other labels", `nodeSelector: {disktype: ssd}`, ""},
		{"conflicting labels", `nodeSelector: {kubernetes.io/arch: arm64, beta.kubernetes.io/arch: amd64}`, ""},
		{"affinity In two arches", `affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions:
            - {key: kubernetes.io/arch, operator: In, values: [arm64, amd64]}`, "linux/amd64,linux/arm64"},
		{"affinity two terms united", `affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions:
            - {key: kubernetes.io/arch, operator: In, values: [arm64]}
        - matchExpressions:
            - {key: kubernetes.io/arch, operator: In, values: [amd64, arm64]}
            - {key: kubernetes.io/os, operator: In, values: [linux]}`, "linux/amd64,linux/arm64"},
		{"affinity term without arch leaves it open", `affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions:
            - {key: kubernetes.io/arch, operator: In, values: [arm64]}
        - matchExpressions:
            - {key: topology.kubernetes.io/zone, operator: In, values: [a]}`, ""},
		{"affinity NotIn does not enumerate", `affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions:
            - {key: kubernetes.io/arch, operator: NotIn, values: [amd64]}`, ""},
		{"affinity and nodeSelector both hold", `nodeSelector: {kubernetes.io/arch: arm64}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions:
            - {key: kubernetes.io/arch, operator: In, values: [arm64, amd64]}`, "linux/arm64"},
		{"expressions in a term are ANDed", `affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions:
            - {key: kubernetes.io/arch, operator: In, values: [arm64, amd64]}
            - {key: beta.kubernetes.io/arch, operator: In, values: [amd64, s390x]}`, "linux/amd64"},
		{"two oses by term", `affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions:
            - {key: kubernetes.io/os, operator: In, values: [windows]}
            - {key: kubernetes.io/arch, operator: In, values: [amd64]}
        - matchExpressions:
            - {key: kubernetes.io/arch, operator: In, values: [arm64]}`, "linux/arm64,windows/amd64"},
		{"preferred affinity is ignored", `affinity:
  nodeAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 1
        preference:
          matchExpressions:
            - {key: kubernetes.io/arch, operator: In, values: [arm64]}`, ""},
		{"arm variant label value normalised", `nodeSelector: {kubernetes.io/arch: aarch64}`, "linux/arm64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  template:\n    spec:\n" +
				indent(tt.spec, 6) + "\n      containers: [{name: c, image: nginx}]\n"
			uses, err := FindImages(mustParse(t, src))
			if err != nil {
				t.Fatalf("%v\n%s", err, src)
			}
			if len(uses) != 1 {
				t.Fatalf("uses %v", uses)
			}
			if got := platformList(uses[0].Platforms); got != tt.want {
				t.Errorf("platforms %q, want %q", got, tt.want)
			}
			if tt.want == "" && uses[0].Platforms != nil {
				t.Errorf("platforms %#v, want nil", uses[0].Platforms)
			}
		})
	}
}
