# Sourced by the npm install scripts here (not run by scripts/test: it is not a `*.sh`). One place
# decides how a test dependency comes from npm: into its own folder under $AHPD_TEST_CACHE, retried
# on a registry's passing failure, and on a final failure the tail of npm's log and one sentence.
#
#   npm_into NAME DIR SPEC...   installs SPEC... into DIR (a package.json of its own); NAME begins
#                               every line printed. Returns 1 when npm is missing or every try failed.

npm_into() {
  local name=$1 dir=$2
  shift 2
  if ! command -v npm >/dev/null 2>&1; then
    echo "$name: npm is not installed; install Node.js >= 22 and npm, then run scripts/test again" >&2
    return 1
  fi
  mkdir -p "$dir"
  [ -f "$dir/package.json" ] || echo "{\"name\":\"ahpd-test-$name\",\"private\":true}" > "$dir/package.json"
  local try
  for try in 1 2 3; do
    if (cd "$dir" && npm install --no-audit --no-fund --loglevel=error "$@" >"$dir/npm.log" 2>&1); then
      return 0
    fi
    echo "$name: npm install of $* failed (try $try of 3); the log's last lines:" >&2
    tail -n 15 "$dir/npm.log" | sed "s/^/  /" >&2
    # A registry's 5xx or a reset connection passes in seconds; not a wait for something we start.
    [ "$try" -lt 3 ] && sleep $((try * 10))
  done
  echo "$name: npm install of $* failed three times (the whole log: $dir/npm.log)" >&2
  return 1
}
