#!/bin/sh
# A worker that dies at once, every time.
echo "boom: this worker always crashes" >&2
exit 3
