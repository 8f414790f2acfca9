#!/usr/bin/env bash
# Builds the control-plane peers used by tests/peers into a cache directory:
#   etcd            our own main embedding go.etcd.io/etcd/server/v3 (tools/peers/etcd)
#   kube-apiserver  k8s.io/kubernetes/cmd/kube-apiserver  (tools/peers/kube)
#   kube-scheduler  k8s.io/kubernetes/cmd/kube-scheduler  (tools/peers/kube)
#   kueue           sigs.k8s.io/kueue/cmd/kueue           (tools/peers/kueue)
# and copies Kueue's CRDs and webhook manifests from the module cache next to them.
#
# Usage: tools/peers/build.sh [CACHE_DIR]
#        tools/peers/build.sh --print-dir   (only print the directory, build nothing)
#   CACHE_DIR defaults to $GANGPREEMPT_PEERS_DIR, else
#   $HOME/.cache/gangpreempt/peers/<version-key>. The key changes with the pinned
#   versions and with the content of this script and of the go.mod/go.sum/main files
#   here, so a change builds into a fresh directory (old ones are left to the user). When everything is already there the script only
#   prints the directory (a no-op taking well under a second).
# Prints the cache directory as its last line of stdout.
# The builds are CPU-heavy (kube-apiserver is several minutes on 2 cores); run the
# script under `nice -n 19` on a shared machine. Only the Go module proxy is needed.
set -euo pipefail

K8S_VERSION=v1.37.2
KUEUE_VERSION=v0.17.0
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

etcd_version() {
	awk '{for (i = 1; i < NF; i++) if ($i == "go.etcd.io/etcd/server/v3") { print $(i + 1); exit }}' \
		"$here/etcd/go.mod"
}
ETCD_VERSION=$(etcd_version)

version_key() {
	local digest
	digest=$(cd "$here" && cat build.sh kube/go.mod kube/go.sum kueue/go.mod kueue/go.sum \
		etcd/go.mod etcd/go.sum etcd/main.go | sha256sum | cut -c1-10)
	echo "k8s-${K8S_VERSION}_kueue-${KUEUE_VERSION}_etcd-${ETCD_VERSION}_${digest}"
}

print_only=false
if [[ ${1:-} == --print-dir ]]; then
	print_only=true
	shift
fi
out=${1:-${GANGPREEMPT_PEERS_DIR:-$HOME/.cache/gangpreempt/peers/$(version_key)}}
if $print_only; then
	echo "$out"
	exit 0
fi
stamp="$out/.complete"
if [[ -f "$stamp" ]]; then
	echo "$out"
	exit 0
fi
mkdir -p "$out"

export CGO_ENABLED=0
export GOFLAGS="-trimpath -buildvcs=false"
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}

# release time of a module version, from the proxy's .info (reproducible build dates)
module_time() {
	(cd "$here/$1" && go list -m -json "$2") | sed -n 's/^[[:space:]]*"Time": "\(.*\)",*$/\1/p'
}

log() { echo "build.sh: $*" >&2; }

# build DIR PACKAGE NAME LDFLAGS: go build into $out/NAME via a temporary file.
build() {
	local dir=$1 pkg=$2 name=$3 ldflags=$4 start
	if [[ -x "$out/$name" ]]; then
		log "$name: present"
		return
	fi
	start=$(date +%s)
	(cd "$here/$dir" && go build -ldflags "-s -w $ldflags" -o "$out/.$name.tmp" "$pkg")
	mv "$out/.$name.tmp" "$out/$name"
	log "$name: built in $(($(date +%s) - start))s, $(du -h "$out/$name" | cut -f1)"
}

start=$(date +%s)
for dir in etcd kube kueue; do
	(cd "$here/$dir" && go mod download)
done
log "modules: downloaded/verified in $(($(date +%s) - start))s"

build etcd . etcd ""

kv=k8s.io/component-base/version
cv=k8s.io/client-go/pkg/version
major=${K8S_VERSION#v}
minor=${major#*.}
minor=${minor%%.*}
major=${major%%.*}
kube_ldflags=""
k8s_time=$(module_time kube k8s.io/kubernetes)
for pkg in $kv $cv; do
	kube_ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
	kube_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.gitCommit= -X $pkg.buildDate=$k8s_time"
done
build kube k8s.io/kubernetes/cmd/kube-apiserver kube-apiserver "$kube_ldflags"
build kube k8s.io/kubernetes/cmd/kube-scheduler kube-scheduler "$kube_ldflags"

qv=sigs.k8s.io/kueue/pkg/version
build kueue sigs.k8s.io/kueue/cmd/kueue kueue \
	"-X $qv.GitVersion=$KUEUE_VERSION -X $qv.GitCommit= -X $qv.BuildDate=$(module_time kueue sigs.k8s.io/kueue)"

# Kueue's manifests, straight from the module (read-only files in the module cache).
kueue_dir=$(cd "$here/kueue" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)
rm -rf "$out/kueue-config"
mkdir -p "$out/kueue-config/crd" "$out/kueue-config/webhook"
cp -r "$kueue_dir/config/components/crd/." "$out/kueue-config/crd/"
cp -r "$kueue_dir/config/components/webhook/." "$out/kueue-config/webhook/"
chmod -R u+w "$out/kueue-config"

cat >"$out/versions.json" <<EOF
{"kubernetes": "$K8S_VERSION", "kueue": "$KUEUE_VERSION", "etcd": "$ETCD_VERSION", "go": "$(go env GOVERSION)"}
EOF
touch "$stamp"
echo "$out"
