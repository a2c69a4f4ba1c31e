#!/usr/bin/env bash
# Release build of the two Lambda binaries for arm64 (Graviton, provided.al2023) and their zips:
#
#   target/lambda/toolcall-dedup/bootstrap   target/lambda/toolcall-dedup/bootstrap.zip
#   target/lambda/demo-tool/bootstrap        target/lambda/demo-tool/bootstrap.zip
#
# Cross-compiles with cargo-lambda + Zig (no Docker). If cargo-lambda or Zig is missing, installs
# cargo-lambda WITH its ziglang dependency into a venv ($LAMBDA_VENV, default .venv-lambda, gitignored).
# Heavy: about 8-10 min from cold on 2 cores (release profile: thin LTO, the whole AWS SDK). It is NOT
# part of CI (.ci/run); run it before `cargo lambda deploy` or to check cross-compilation.
#
#   scripts/build-lambda.sh                 # both binaries
#   scripts/build-lambda.sh demo-tool       # just one
#
# Then: cargo lambda deploy --binary-name toolcall-dedup ...   (see infra/README.md), or upload the zips.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CARGO_LAMBDA_VERSION=1.9.2
VENV="${LAMBDA_VENV:-$ROOT/.venv-lambda}"
TARGET=aarch64-unknown-linux-gnu
bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=(toolcall-dedup demo-tool)

# Zig as cargo-zigbuild finds it: $ZIG_COMMAND, `zig` on PATH, or `python3 -m ziglang`.
have_zig() {
  [ -n "${ZIG_COMMAND:-}" ] || command -v zig >/dev/null 2>&1 || python3 -c 'import ziglang' 2>/dev/null
}
[ -x "$VENV/bin/cargo-lambda" ] && export PATH="$VENV/bin:$PATH"
if ! command -v cargo-lambda >/dev/null 2>&1 || ! have_zig; then
  echo "build-lambda: installing cargo-lambda $CARGO_LAMBDA_VERSION and ziglang into $VENV" >&2
  [ -x "$VENV/bin/pip" ] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "cargo-lambda==$CARGO_LAMBDA_VERSION" ziglang
  export PATH="$VENV/bin:$PATH"
fi
if command -v rustup >/dev/null 2>&1 && ! rustup target list --installed | grep -qx "$TARGET"; then
  rustup target add "$TARGET"
fi
echo "build-lambda: $(cargo lambda --version), zig $(command -v zig >/dev/null 2>&1 && zig version || python3 -m ziglang version)" >&2

start=$SECONDS
bin_args=()
for b in "${bins[@]}"; do bin_args+=(--bin "$b"); done
cargo lambda build --release --arm64 --locked "${bin_args[@]}"
build_s=$((SECONDS - start))

for b in "${bins[@]}"; do
  dir="target/lambda/$b"
  [ -x "$dir/bootstrap" ] || { echo "build-lambda: $dir/bootstrap missing" >&2; exit 1; }
  file "$dir/bootstrap" 2>/dev/null | grep -q 'ARM aarch64' \
    || { echo "build-lambda: $dir/bootstrap is not an arm64 ELF" >&2; file "$dir/bootstrap" >&2 || true; exit 1; }
  rm -f "$dir/bootstrap.zip"
  # The bootstrap must keep its executable bit inside the zip, as Lambda requires.
  if command -v zip >/dev/null 2>&1; then
    (cd "$dir" && zip -q -X bootstrap.zip bootstrap)
  else
    python3 - "$dir" <<'EOF_PY'
import os, sys, zipfile
d = sys.argv[1]
info = zipfile.ZipInfo("bootstrap", date_time=(1980, 1, 1, 0, 0, 0))
info.external_attr = 0o100755 << 16
info.compress_type = zipfile.ZIP_DEFLATED
with open(os.path.join(d, "bootstrap"), "rb") as src, zipfile.ZipFile(os.path.join(d, "bootstrap.zip"), "w") as z:
    z.writestr(info, src.read())
EOF_PY
  fi
  printf 'build-lambda: %-42s %9d bytes   %s %9d bytes\n' \
    "$dir/bootstrap" "$(stat -c %s "$dir/bootstrap")" "bootstrap.zip" "$(stat -c %s "$dir/bootstrap.zip")"
done
echo "build-lambda: cargo lambda build took ${build_s}s"
