#!/bin/sh
# A worker that writes something that is not the worker protocol on stdout.
echo "hello, I am not JSON-RPC"
while read -r _line; do :; done
