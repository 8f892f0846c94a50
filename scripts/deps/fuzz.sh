#!/usr/bin/env bash
# Installs cargo-fuzz (libFuzzer for Rust) from crates.io into $AHPD_TEST_CACHE/cargo-fuzz, for the
# bounded fuzz run in scripts/test and the longer one in scripts/fuzz. cargo-fuzz passes nightly
# `-Z` flags; scripts/fuzz-run sets RUSTC_BOOTSTRAP=1 so the stable toolchain accepts them.
# Idempotent. AHPD_SKIP_FUZZ=1 skips it (the fuzz run then says it was skipped).
set -euo pipefail
VERSION="0.13.2"
CACHE="${AHPD_TEST_CACHE:-$(cd "$(dirname "$0")/../.." && pwd)/.cache}"
ROOT="$CACHE/cargo-fuzz"
if [ -n "${AHPD_SKIP_FUZZ:-}" ]; then
  echo "fuzz: AHPD_SKIP_FUZZ is set; cargo-fuzz not installed"
  exit 0
fi
if [ -x "$ROOT/bin/cargo-fuzz" ] && "$ROOT/bin/cargo-fuzz" --version 2>/dev/null | grep -q " $VERSION"; then
  echo "fuzz: cargo-fuzz $VERSION is already installed in $ROOT"
  exit 0
fi
if cargo install --quiet --locked --root "$ROOT" --version "$VERSION" cargo-fuzz; then
  echo "fuzz: installed cargo-fuzz $VERSION in $ROOT"
else
  # Not fatal: scripts/fuzz-run says the fuzz targets were skipped and why.
  echo "fuzz: could not install cargo-fuzz $VERSION; the fuzz run will be skipped"
fi
