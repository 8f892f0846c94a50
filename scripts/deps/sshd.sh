#!/usr/bin/env bash
# Installs openssh-server, best effort, for the test that reaches `ahpd --stdio` through a real
# `ssh` to a private sshd on loopback (tests/src/sshd.rs, tests/tests/stdio_bridge.rs): only as
# root on a machine with apt-get, quietly. Outside CI it never fails the run (without sshd those
# tests say why they skipped); under CI (`CI` set) a missing sshd fails here, as those tests would.
set -uo pipefail
under_ci() { case "${CI:-}" in ""|0|false) return 1 ;; *) return 0 ;; esac; }
if command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ]; then
  echo "sshd: $(command -v sshd || echo /usr/sbin/sshd) already installed"
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "sshd: not installed (needs root and apt-get); the ssh test will be skipped"
  under_ci && { echo "sshd: CI is set, so a missing sshd fails the run" >&2; exit 1; }
  exit 0
fi
log="$(mktemp)"
if DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssh-server openssh-client >"$log" 2>&1 \
  || { apt-get update -qq >>"$log" 2>&1 \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssh-server openssh-client >>"$log" 2>&1; }; then
  echo "sshd: installed openssh-server"
else
  echo "sshd: apt-get could not install openssh-server (the ssh test will be skipped); its last words:"
  tail -n 3 "$log"
  rm -f "$log"
  under_ci && { echo "sshd: CI is set, so a missing sshd fails the run" >&2; exit 1; }
  exit 0
fi
rm -f "$log"
exit 0
