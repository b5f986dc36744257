#!/bin/sh
# Runs inside the image being built: apply the patch series in order, fuzz 0, to the
# engine's package dir. A patch that does not apply stops the build with lines prefixed
# "lifecycle:" that name the patch and the failing file/hunk, for the host to report.
set -eu
here=$(dirname "$0")
cd "$1"
if ! command -v patch >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq --no-install-recommends patch >/dev/null
fi
while IFS="$(printf '\t')" read -r file name; do
    if ! out=$(patch -p1 --fuzz=0 --forward --batch --dry-run <"$here/$file" 2>&1); then
        echo "lifecycle: PATCH FAILED: $name"
        printf '%s\n' "$out" | sed 's/^/lifecycle:   /'
        exit 1
    fi
    patch -p1 --fuzz=0 --forward --batch --no-backup-if-mismatch --quiet <"$here/$file"
    echo "lifecycle: patch applied: $name"
done <"$here/series.tsv"
