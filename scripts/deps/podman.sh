#!/usr/bin/env bash
# Installs Podman (with runc) from Debian's packages, the container engine of the `container`
# isolation level's and the computer plugin's tests, and makes it work as root on machines like
# the test VMs: `runc` (crun fails on their hybrid cgroups), `cgroupfs`, a file events log, and no
# default `nofile` ulimit (the VM's hard limit is below Podman's default). Those settings go in a
# drop-in of their own (/etc/containers/containers.conf.d/ahpd-tests.conf), written once.
# Idempotent; nothing is placed in $AHPD_TEST_CACHE (images are built by the tests themselves from
# the host's files: nothing is pulled). Outside CI it never fails the run (the tests say why they
# skipped); under CI (`CI` set) a Podman that cannot be installed or run fails here.
set -uo pipefail
under_ci() { case "${CI:-}" in ""|0|false) return 1 ;; *) return 0 ;; esac; }
give_up() {
  echo "podman: $1; the container tests will be skipped"
  under_ci && { echo "podman: CI is set, so this fails the run" >&2; exit 1; }
  exit 0
}
if ! command -v podman >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    give_up "not installed (needs root and apt-get)"
  fi
  log="$(mktemp)"
  install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends podman runc >>"$log" 2>&1; }
  if ! { install || { apt-get update -qq >>"$log" 2>&1 && install; }; }; then
    tail -n 3 "$log"; rm -f "$log"
    give_up "apt-get could not install podman and runc"
  fi
  rm -f "$log"
  echo "podman: installed $(podman --version)"
else
  echo "podman: $(podman --version) already installed"
fi
if [ "$(id -u)" = 0 ]; then
  dropin=/etc/containers/containers.conf.d/ahpd-tests.conf
  if [ ! -e "$dropin" ]; then
    mkdir -p "$(dirname "$dropin")"
    cat >"$dropin" <<'CONF'
# Written by ahpd's scripts/deps/podman.sh: Podman as root on hybrid cgroups (crun fails there).
[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
    echo "podman: wrote $dropin"
  fi
fi
if ! podman info >/dev/null 2>&1; then
  give_up "podman is installed but 'podman info' fails: $(podman info 2>&1 | tail -n 1)"
fi
exit 0
