#!/usr/bin/env bash
# Runs a command as a named step: says when it starts and how many seconds it
# took, and exits with its code. When $TIMETABLE names a directory (.ci/run
# sets it), it also appends "start end exit-code name" to $TIMETABLE/steps.tsv,
# for the table hack/timetable prints at the end of .ci/run.
#
#   hack/step.sh "make test: go test" go test ./...
set -o nounset -o pipefail
name=$1
shift
echo "$name ..."
start=$(date +%s.%N)
"$@"
rc=$?
end=$(date +%s.%N)
if [ -n "${TIMETABLE:-}" ]; then
    printf '%s\t%s\t%s\t%s\n' "$start" "$end" "$rc" "$name" >>"$TIMETABLE/steps.tsv"
fi
secs=$(awk -v s="$start" -v e="$end" 'BEGIN { printf "%d", e - s + 0.5 }')
if [ "$rc" -eq 0 ]; then
    echo "$name: ${secs}s"
else
    echo "$name: failed (exit $rc) after ${secs}s"
fi
exit "$rc"
