#!/usr/bin/env bash
# Builds what the whole-Argo CD tests (e2e/argocd) run, from the Go module proxy only, into
# <repo>/.cache/e2e (E2E_CACHE overrides):
#   bin/kube-apiserver, bin/kubectl         k8s.io/kubernetes, module e2e/build/kube (Argo CD v2's graph)
#   argocd-<version>/argocd (+ role names)  github.com/argoproj/argo-cd/v2|v3, modules
#                                           e2e/build/argocd-v2, e2e/build/argocd-v3
#   argocd-<version>/git-verify-wrapper.sh  from the argo-cd module's hack/ (v3.6 needs it)
#   argocd-<version>/crds/*.yaml            the CRDs from the argo-cd module
#   bin/gitea, gitea-static/{templates,     Gitea (code.gitea.io/gitea, module e2e/build/gitea;
#   options}                                pin/forge/giteatest runs it), built without bindata
#                                           so it reads templates/options from gitea-static
#   bin/argocd-image-resolver(-generate),   this checkout's cmd/... (always rebuilt: go's
#   bin/demo                                cache makes that quick)
# Debian packages (etcd-server, redis-server, git) are .ci/run's business, not this script's.
#
# Usage: build.sh [all|kube|argocd VERSION...|tools VERSION...|gitea|resolver]   (all: every version in
#        e2e/build/versions.txt). Idempotent: a binary whose stamp (module files, version,
#        go version) matches is kept, so a warm run takes seconds. FORCE=1 rebuilds.
# Prints one timing line per step ("== step: Ns").
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${E2E_CACHE:-$ROOT/.cache/e2e}
FORCE=${FORCE:-0}
mkdir -p "$OUT/bin"
export GOFLAGS=${GOFLAGS:--buildvcs=false}

# step NAME CMD...: one step, timed, under a lock of its own in $OUT: .ci/run builds
# everything in the background while the unit tests run and builds the Gitea they
# need in the foreground; a step another run is doing is waited for, then found built.
step() {
	local name=$1 t0=$SECONDS lock
	shift
	lock=$OUT/.lock-${name// /-}
	echo "== $name"
	(
		exec 9>"$lock"
		if ! flock -n 9; then
			echo "waiting for another build.sh run doing this step ($lock)"
			flock 9
		fi
		"$@"
	)
	echo "== $name: $((SECONDS - t0))s"
}

# stamp_of DIR EXTRA...: a hash of the module's go.mod/go.sum, the extra words and go's version.
stamp_of() {
	local d=$1
	shift
	{ cat "$d/go.mod" "$d/go.sum" 2>/dev/null; echo "$@"; go version; } | sha256sum | cut -c1-16
}
fresh() { # fresh BINARY STAMP: the binary exists with this stamp
	[ "$FORCE" != 1 ] && [ -x "$1" ] && [ "$(cat "$1.stamp" 2>/dev/null)" = "$2" ]
}

kube() {
	local d=$HERE/kube ver
	ver=$(sed -n 's/^[[:space:]]*k8s.io\/kubernetes \(v[^ ]*\)$/\1/p' "$d/go.mod")
	[ -n "$ver" ] || { echo "no k8s.io/kubernetes version in $d/go.mod" >&2; return 1; }
	local st
	st=$(stamp_of "$d" "$ver")
	if fresh "$OUT/bin/kube-apiserver" "$st" && fresh "$OUT/bin/kubectl" "$st"; then
		echo "kube-apiserver, kubectl $ver: up to date"
		return
	fi
	# Version stamps as Kubernetes' own build sets them (hack/lib/version.sh); without them
	# the binaries say v0.0.0-master, which clients parse badly.
	local minor x ldf="-s -w"
	minor=$(echo "$ver" | cut -d. -f2)
	for x in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ldf="$ldf -X $x.gitVersion=$ver -X $x.gitMajor=1 -X $x.gitMinor=$minor -X $x.gitTreeState=clean"
	done
	# Argo CD v2's module graph (see genmod.sh), built as Argo CD v2 is (no -trimpath): the
	# k8s.io packages both import compile once.
	(cd "$d" && GOTOOLCHAIN=local GOFLAGS="$GOFLAGS -mod=mod" go build -ldflags="$ldf" -o "$OUT/bin/" \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl)
	echo "$st" >"$OUT/bin/kube-apiserver.stamp"
	echo "$st" >"$OUT/bin/kubectl.stamp"
	"$OUT/bin/kube-apiserver" --version
}

# toolchain_for GOMOD: the GOTOOLCHAIN a module needs (v3.6 says `go 1.27.0`: the go command
# fetches go1.27.3 from the module proxy, for that build only).
toolchain_for() {
	if grep -qE '^go 1\.(2[7-9]|[3-9][0-9])' "$1"; then echo go1.27.3; else echo local; fi
}

argocd() {
	local ver=$1 major d
	major=$(echo "$ver" | sed 's/^v\([0-9]*\).*/\1/')
	d=$HERE/argocd-v$major
	grep -q "^require github.com/argoproj/argo-cd/v$major $ver\$" "$d/go.mod" ||
		{ echo "$d/go.mod does not require argo-cd/v$major $ver (one version per major: edit it and go.sum)" >&2; return 1; }
	local vd=$OUT/argocd-$ver tc st trim=-trimpath
	tc=$(toolchain_for "$d/go.mod")
	# v2 without -trimpath: the in-process e2e suite (e2e/go.mod) requires the same
	# argo-cd v2.14.21 with the same module versions, so both compile each package once.
	[ "$major" = 2 ] && trim=
	st=$(stamp_of "$d" "$ver" "$tc" "$trim")
	mkdir -p "$vd"
	if fresh "$vd/argocd" "$st"; then
		echo "argocd $ver: up to date"
	else
		local p=github.com/argoproj/argo-cd/v$major/common
		(cd "$d" && GOTOOLCHAIN=$tc GOFLAGS="$GOFLAGS -mod=mod" go build $trim \
			-ldflags="-s -w -X $p.version=${ver#v} -X $p.gitTag=$ver -X $p.gitTreeState=clean" \
			-o "$vd/argocd" "github.com/argoproj/argo-cd/v$major/cmd")
		echo "$st" >"$vd/argocd.stamp"
	fi
	# The multi-call binary picks its role from argv[0].
	local n
	for n in argocd-server argocd-repo-server argocd-application-controller argocd-applicationset-controller argocd-cmp-server argocd-git-ask-pass; do
		ln -sfn argocd "$vd/$n"
	done
	# The module's own files: CRDs and hack/git-verify-wrapper.sh (v3.6's repo-server runs it
	# for every manifest request, from PATH). Copied with each build, so that a kept
	# .cache/e2e is all the tests need (no module cache).
	if [ "$(cat "$vd/files.stamp" 2>/dev/null)" != "$st" ]; then
		local src
		src=$(cd "$d" && GOTOOLCHAIN=$tc GOFLAGS="$GOFLAGS -mod=mod" go list -m -f '{{.Dir}}' "github.com/argoproj/argo-cd/v$major")
		rm -rf "$vd/crds" && mkdir -p "$vd/crds"
		cp "$src"/manifests/crds/*-crd.yaml "$vd/crds/"
		chmod -R u+w "$vd/crds"
		if [ -f "$src/hack/git-verify-wrapper.sh" ]; then install -m 0755 "$src/hack/git-verify-wrapper.sh" "$vd/"; fi
		echo "$st" >"$vd/files.stamp"
	fi
	"$vd/argocd" version --client --short
}

# gitea: the forge pin/forge/giteatest runs. The module proxy serves the release as
# code.gitea.io/gitea while its go.mod says gitea.dev (see e2e/build/gitea/go.mod). CGO off:
# SQLite is modernc.org/sqlite (pure Go), built in by default since v1.27.
gitea() {
	local d=$HERE/gitea ver st
	ver=$(sed -n 's/^require gitea.dev \(v[^ ]*\)$/\1/p' "$d/go.mod")
	[ -n "$ver" ] || { echo "no gitea.dev version in $d/go.mod" >&2; return 1; }
	st=$(stamp_of "$d" "$ver")
	if fresh "$OUT/bin/gitea" "$st"; then
		echo "gitea $ver: up to date"
	else
		(cd "$d" && GOTOOLCHAIN=local CGO_ENABLED=0 go build -trimpath \
			-ldflags="-s -w -X main.Version=${ver#v}" -o "$OUT/bin/gitea.tmp" gitea.dev)
		mv "$OUT/bin/gitea.tmp" "$OUT/bin/gitea"
		echo "$st" >"$OUT/bin/gitea.stamp"
	fi
	# Without bindata Gitea reads options/ (required: locales) and templates/ from its
	# STATIC_ROOT_PATH; copied from the module so that a kept .cache/e2e is all tests need.
	local sd=$OUT/gitea-static
	if [ "$FORCE" = 1 ] || [ "$(cat "$sd/.stamp" 2>/dev/null)" != "$st" ]; then
		local src
		src=$(cd "$d" && GOTOOLCHAIN=local go list -m -f '{{.Dir}}' gitea.dev)
		[ -d "$src/options" ] || { echo "no options/ in $src" >&2; return 1; }
		rm -rf "$sd.new" && mkdir -p "$sd.new"
		cp -r "$src/templates" "$src/options" "$sd.new/"
		chmod -R u+w "$sd.new"
		echo "$st" >"$sd.new/.stamp"
		rm -rf "$sd" && mv "$sd.new" "$sd"
	fi
	"$OUT/bin/gitea" --version
}

resolver() {
	# This checkout's binaries, built as the image ships them (static, -trimpath: the
	# Makefile's AS_SHIPPED), so they share the unit tests' compiled packages; go's build
	# cache makes a rerun quick.
	(cd "$ROOT" && GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="$GOFLAGS -trimpath" go build -o "$OUT/bin/" ./cmd/...)
}

# tools VERSION: the helm and kustomize binaries Argo CD VERSION ships (its
# hack/tool-versions.sh: helm3_version or helm4_version, kustomize5_version), built from
# the module proxy into $OUT/tools/VERSION/ and linked into argocd-VERSION/, which is on the
# lab's repo-server PATH: native Helm and Kustomize apps render with them, as in Argo CD's
# image. Each is built with its own go.mod (`go install pkg@version`), except where a
# module of $HERE/tools/NAME-VERSION says otherwise (kustomize v5.8.3: see its go.mod).
tools() {
	local ver=$1 major src tv helm kust
	major=$(echo "$ver" | sed 's/^v\([0-9]*\).*/\1/')
	src=$(cd "$HERE/argocd-v$major" && GOTOOLCHAIN=$(toolchain_for "$HERE/argocd-v$major/go.mod") GOFLAGS="$GOFLAGS -mod=mod" \
		go list -m -f '{{.Dir}}' "github.com/argoproj/argo-cd/v$major")
	tv=$src/hack/tool-versions.sh
	[ -f "$tv" ] || { echo "no $tv" >&2; return 1; }
	# v2.14 names them helm3_version and kustomize5_version, v3.6 HELM_VERSION and
	# KUSTOMIZE_VERSION.
	helm=$(sed -n -E 's/^(helm3_version|HELM_VERSION)=([0-9.]+)$/\2/p' "$tv")
	kust=$(sed -n -E 's/^(kustomize5_version|KUSTOMIZE_VERSION)=([0-9.]+)$/\2/p' "$tv")
	[ -n "$helm" ] && [ -n "$kust" ] || { echo "$tv names no helm or kustomize version" >&2; return 1; }
	local helmpkg=helm.sh/helm/v${helm%%.*}/cmd/helm
	local td=$OUT/tools/$ver
	mkdir -p "$td" "$OUT/argocd-$ver"
	tool "$td" helm "$helmpkg" "v$helm"
	tool "$td" kustomize sigs.k8s.io/kustomize/kustomize/v5 "v$kust"
	ln -sfn "../tools/$ver/helm" "$OUT/argocd-$ver/helm"
	ln -sfn "../tools/$ver/kustomize" "$OUT/argocd-$ver/kustomize"
	echo "argocd $ver ships helm v$helm, kustomize v$kust: $("$td/helm" version --short 2>&1 | head -1), $("$td/kustomize" version 2>&1 | head -1)"
}

# tool DIR NAME PKG VERSION: DIR/NAME built from PKG@VERSION, kept while its stamp holds.
tool() {
	local td=$1 name=$2 pkg=$3 ver=$4 mod=$HERE/tools/$2-$4 st
	st=$(stamp_of "$mod" "$pkg" "$ver")
	if fresh "$td/$name" "$st"; then
		echo "$name $ver: up to date"
		return
	fi
	local ldf="-s -w"
	# The version string each prints, as their release builds set it.
	case $pkg in
	helm.sh/helm/v4/*) ldf="$ldf -X helm.sh/helm/v4/internal/version.version=$ver" ;;
	helm.sh/helm/v3/*)
		# Helm 3's Makefile also stamps its default .Capabilities.KubeVersion from the
		# client-go it is built with (v0.M.x gives v1.M).
		local gomod minor
		gomod=$(GOFLAGS= GOTOOLCHAIN=local go mod download -json "helm.sh/helm/v3@$ver" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
		minor=$(sed -n 's#^[[:space:]]*k8s.io/client-go v0\.\([0-9]*\)\..*#\1#p' "$gomod")
		[ -n "$minor" ] || { echo "no k8s.io/client-go in $gomod" >&2; return 1; }
		ldf="$ldf -X helm.sh/helm/v3/internal/version.version=$ver"
		local x
		for x in pkg/lint/rules pkg/chartutil; do
			ldf="$ldf -X helm.sh/helm/v3/$x.k8sVersionMajor=1 -X helm.sh/helm/v3/$x.k8sVersionMinor=$minor"
		done
		;;
	sigs.k8s.io/kustomize/*) ldf="$ldf -X sigs.k8s.io/kustomize/api/provenance.version=kustomize/$ver" ;;
	esac
	rm -rf "$td/$name.gobin" && mkdir -p "$td/$name.gobin"
	if [ -f "$mod/go.mod" ]; then
		(cd "$mod" && GOTOOLCHAIN=$(toolchain_for "$mod/go.mod") GOFLAGS="$GOFLAGS -mod=mod" \
			go build -trimpath -ldflags="$ldf" -o "$td/$name.gobin/$name" "$pkg")
	else
		(cd "$td" && GOTOOLCHAIN=local GOFLAGS="$GOFLAGS" GOBIN="$td/$name.gobin" \
			go install -trimpath -ldflags="$ldf" "$pkg@$ver")
	fi
	mv "$td/$name.gobin/$name" "$td/$name" && rm -rf "$td/$name.gobin"
	echo "$st" >"$td/$name.stamp"
}

versions() { grep -vE '^\s*(#|$)' "$HERE/versions.txt"; }

T0=$SECONDS
what=${1:-all}
[ $# -gt 0 ] && shift
case $what in
all)
	# Argo CD v2 first: the in-process suite (e2e/) shares its packages, and .ci/run
	# runs that suite while this builds. kube-apiserver is built in v2's module graph
	# (genmod.sh), so it finds most of its packages compiled. This checkout's binaries
	# last: the unit tests compile the same packages meanwhile.
	for v in $(versions | sort -V); do step "argocd $v" argocd "$v"; done
	step kube kube
	for v in $(versions); do step "tools of argocd $v" tools "$v"; done
	step gitea gitea
	step resolver resolver
	;;
kube) step kube kube ;;
argocd) for v in "$@"; do step "argocd $v" argocd "$v"; done ;;
tools) for v in "$@"; do step "tools of argocd $v" tools "$v"; done ;;
gitea) step gitea gitea ;;
resolver) step resolver resolver ;;
*) echo "usage: $0 [all|kube|argocd VERSION...|tools VERSION...|gitea|resolver]" >&2; exit 2 ;;
esac
echo "== total: $((SECONDS - T0))s"
