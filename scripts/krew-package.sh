#!/usr/bin/env bash
# Packages configsum as a krew plugin: BINARY becomes OUT/configsum-v<version>-<os>-<arch>.tar.gz
# (the binary as `configsum`, and the README), and plugins/krew/configsum.yaml is rendered to
# OUT/configsum.yaml for the platforms whose archive is in OUT, with their real sha256, as
# krew-release-bot renders it at a release. Install the result offline with
#   krew install --manifest=OUT/configsum.yaml --archive=OUT/configsum-v<version>-linux-amd64.tar.gz
#
#   scripts/krew-package.sh BINARY OUT [OS ARCH]    (default: linux amd64)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
binary=${1:?usage: krew-package.sh BINARY OUT [OS ARCH]}
out=${2:?usage: krew-package.sh BINARY OUT [OS ARCH]}
os=${3:-linux}
arch=${4:-amd64}
tag=v$(sed -n 's/^version = "\(.*\)"/\1/p' "$here/Cargo.toml" | head -n 1)

mkdir -p "$out"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
install -m 0755 "$binary" "$stage/configsum"
# Debug information is for debuggers, not for users' PATH (a debug build's is 200 MB).
if command -v strip >/dev/null; then strip --strip-debug "$stage/configsum"; fi
cp "$here/README.md" "$stage/README.md"
archive="$out/configsum-$tag-$os-$arch.tar.gz"
# Fixed owner, order and times: the same binary gives the same archive, hence the same sha256.
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$stage" -cf - configsum README.md \
  | gzip -n >"$archive"

# The template's lines: {{ .TagName }} is the tag; an addURIAndSha line becomes uri and sha256
# when its archive is in OUT, and drops its platform otherwise.
python3 - "$here/plugins/krew/configsum.yaml" "$out" "$tag" >"$out/configsum.yaml" <<'PY'
import hashlib, os, re, sys
template, out, tag = sys.argv[1:4]
text = open(template).read().replace("{{ .TagName }}", tag)
head, _, platforms = text.partition("  platforms:\n")
kept = []
for block in re.split(r"(?m)^  - ", platforms)[1:]:
    match = re.search(r'\{\{addURIAndSha "([^"]+)" \.TagName \}\}', block)
    if not match:
        sys.exit("krew-package: a platform without addURIAndSha")
    uri = match.group(1)
    path = os.path.join(out, uri.rsplit("/", 1)[1])
    if not os.path.exists(path):
        continue
    sha = hashlib.sha256(open(path, "rb").read()).hexdigest()
    indent = " " * 4
    kept.append("  - " + block.replace(match.group(0), f"uri: {uri}\n{indent}sha256: {sha}"))
if not kept:
    sys.exit("krew-package: no archive for any platform")
lines = [l for l in head.splitlines(keepends=True) if not l.startswith("#")]
sys.stdout.write("".join(lines) + "  platforms:\n" + "".join(kept))
PY
echo "$archive"
