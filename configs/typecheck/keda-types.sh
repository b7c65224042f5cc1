#!/usr/bin/env bash
# keda-types.sh: copy KEDA's API types into internal/keda/v1alpha1.
#
#   ./keda-types.sh [VERSION]          copy the files of KEDA VERSION (default
#                                      the one copied now, below)
#   ./keda-types.sh -check [VERSION]   say whether the copies match VERSION
#
# The files are verbatim copies of github.com/kedacore/keda/v2's
# apis/keda/v1alpha1, taken from the Go module proxy (go mod download). Left
# out: groupversion_info.go, scalable_object.go and the webhooks, which need
# controller-runtime; internal/keda/v1alpha1/groupversion_info.go is ours and
# stands in for them. After a new VERSION: go build ./..., go test ./..., and
# change the version here and in that file.
set -euo pipefail
cd "$(dirname "$0")"
check=false
if [ "${1:-}" = -check ]; then check=true; shift; fi
version=${1:-v2.20.2}
dst=internal/keda/v1alpha1
files="condition_types.go gvkr.go gvkr_types.go identifier.go scaledjob_types.go
scaledobject_types.go scaletriggers_types.go triggerauthentication_types.go
withtriggers_types.go zz_generated.deepcopy.go"
left_out="groupversion_info.go scalable_object.go scaledjob_webhook.go
scaledobject_webhook.go triggerauthentication_webhook.go"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Outside this module, so that its go.mod and go.sum stay as they are.
src=$(cd "$tmp" && go mod download -json "github.com/kedacore/keda/v2@$version" |
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
if [ -z "$src" ]; then
	echo "keda-types: go mod download github.com/kedacore/keda/v2@$version gave no directory" >&2
	exit 1
fi
src=$src/apis/keda/v1alpha1

status=0
for f in $(cd "$src" && ls *.go | grep -v _test.go); do
	case " $(echo $files $left_out) " in
	*" $f "*) ;;
	*) echo "keda-types: $version has $f, which is neither copied nor left out: look at it and add it to one list" >&2; status=1 ;;
	esac
done
for f in $files; do
	if [ ! -f "$src/$f" ]; then
		echo "keda-types: $version has no $f" >&2; status=1; continue
	fi
	if $check; then
		cmp -s "$src/$f" "$dst/$f" || { echo "keda-types: $dst/$f differs from KEDA $version's" >&2; status=1; }
	else
		install -m 0644 "$src/$f" "$dst/$f"
	fi
done
if [ $status = 0 ]; then
	if $check; then echo "keda-types: $dst matches KEDA $version"; else echo "keda-types: copied KEDA $version's types into $dst"; fi
fi
exit $status
