#!/usr/bin/env bash
# Installs bubblewrap (`bwrap`), the sandbox of the `sandbox` isolation level on Linux, for the
# confined-session tests (tests/tests/confined.rs): from Debian's packages, as root with apt-get.
# Idempotent; nothing is placed in $AHPD_TEST_CACHE. Outside CI it never fails the run (those
# tests say why they skipped); under CI (`CI` set) a missing bwrap fails here, as those tests would.
set -uo pipefail
under_ci() { case "${CI:-}" in ""|0|false) return 1 ;; *) return 0 ;; esac; }
if command -v bwrap >/dev/null 2>&1; then
  echo "sandbox: $(command -v bwrap) already installed ($(bwrap --version 2>/dev/null))"
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "sandbox: bubblewrap not installed (needs root and apt-get); the sandbox tests will be skipped"
  under_ci && { echo "sandbox: CI is set, so a missing bubblewrap fails the run" >&2; exit 1; }
  exit 0
fi
log="$(mktemp)"
install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bubblewrap >>"$log" 2>&1; }
if install || { apt-get update -qq >>"$log" 2>&1 && install; }; then
  echo "sandbox: installed bubblewrap ($(bwrap --version 2>/dev/null))"
else
  echo "sandbox: apt-get could not install bubblewrap (the sandbox tests will be skipped); its last words:"
  tail -n 3 "$log"
  rm -f "$log"
  under_ci && { echo "sandbox: CI is set, so a missing bubblewrap fails the run" >&2; exit 1; }
  exit 0
fi
rm -f "$log"
exit 0
