#!/bin/sh
# Runs inside the image being built: apply the patch series in order, fuzz 0, to the
# engine's package dir. A patch that does not apply stops the build with lines prefixed
# "lifecycle:" that name the patch and the failing file/hunk, for the host to report.
# GNU patch takes the text; git's binary blocks go to gitbinary.py (patch refuses them).
set -eu
here=$(dirname "$0")
cd "$1"
if ! command -v patch >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq --no-install-recommends patch >/dev/null
fi
scratch=$(mktemp)
failed() {
    echo "lifecycle: PATCH FAILED: $1"
    printf '%s\n' "$2" | sed 's/^/lifecycle:   /'
    exit 1
}
while IFS="$(printf '\t')" read -r file name; do
    patch_file="$here/$file"
    text="$patch_file"
    binary=no
    if grep -q '^GIT binary patch$' "$patch_file"; then
        binary=yes
        text="$scratch"
        python3 "$here/gitbinary.py" text "$patch_file" >"$text"
    fi
    if [ -s "$text" ] && ! out=$(patch -p1 --fuzz=0 --forward --batch --dry-run <"$text" 2>&1); then
        failed "$name" "$out"
    fi
    if [ "$binary" = yes ] && ! out=$(python3 "$here/gitbinary.py" apply "$patch_file" --check 2>&1); then
        failed "$name" "$out"
    fi
    if [ -s "$text" ]; then
        patch -p1 --fuzz=0 --forward --batch --no-backup-if-mismatch --quiet <"$text"
    fi
    if [ "$binary" = yes ]; then
        python3 "$here/gitbinary.py" apply "$patch_file"
    fi
    echo "lifecycle: patch applied: $name"
done <"$here/series.tsv"
rm -f "$scratch"
