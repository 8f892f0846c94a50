#!/bin/sh
# A worker that never answers its handshake: it reads stdin and says nothing.
echo "silent worker: I will not answer" >&2
while read -r _line; do :; done
