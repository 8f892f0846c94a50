#!/bin/sh
# A worker that outlives its parent: it ignores SIGTERM and SIGHUP (so the signal Linux sends when
# the parent dies does nothing), serves as the Python echo worker until its stdin closes, and then
# lingers on as `sleep`.
trap '' TERM HUP
python3 "$(dirname "$0")/echo.py"
exec sleep 600
