#!/usr/bin/env bash
# hack/fetch-traces.sh DIR: makes DIR hold the two files of Alibaba's public
# GPU trace (alibaba/clusterdata, cluster-trace-gpu-v2023, the "openb" trace
# of the FGD paper) that `make replay` reads, checked against their SHA-256.
#
# A file already in DIR with the right checksum is kept. Otherwise it is
# fetched at the pinned commit, trying in turn: curl (or wget) from GitHub's
# raw file server, then git (a shallow, blob-less fetch of that one commit).
# A file whose checksum differs is an error, never used: the figures in
# docs/performance.md are for these exact files.
#
# FETCH_TRACES=0 only checks DIR (make replay TRACES=<dir> sets it: a copy the
# user already has is checked, not overwritten).
set -euo pipefail

dir=${1:?usage: hack/fetch-traces.sh DIR}
repo=alibaba/clusterdata
commit=${TRACES_COMMIT:-50a91c7c74abe3b658188dc78ac1dd302970d40c}
# Where from; overridable to check this script against a local mirror.
raw_base=${TRACES_RAW_BASE:-https://raw.githubusercontent.com}
git_url=${TRACES_GIT_URL:-https://github.com/$repo.git}
path=cluster-trace-gpu-v2023/csv
declare -A sha256=(
  [openb_node_list_gpu_node.csv]=2beca64b4d3dfa342036a34b56a495c6cef9225db836c81f541282cb1df320b5
  [openb_pod_list_default.csv]=1ee7ed79c27a3b0861cda8ddba86a004c6aba904caafa329a76ae93ca63834a8
)
files=(openb_node_list_gpu_node.csv openb_pod_list_default.csv)

sum() { sha256sum "$1" | cut -d' ' -f1; }

# verified FILE: DIR/FILE exists and has the pinned checksum.
verified() { [[ -f $dir/$1 && $(sum "$dir/$1") == "${sha256[$1]}" ]]; }

missing=()
for f in "${files[@]}"; do
  if ! verified "$f"; then missing+=("$f"); fi
done
if (( ${#missing[@]} == 0 )); then
  echo "fetch-traces: $dir holds ${files[*]} (checksums match)"
  exit 0
fi

if [[ ${FETCH_TRACES:-1} == 0 ]]; then
  for f in "${missing[@]}"; do
    if [[ -f $dir/$f ]]; then
      echo "fetch-traces: $dir/$f: sha256 $(sum "$dir/$f"), want ${sha256[$f]} ($repo@${commit:0:12} $path/$f)" >&2
    else
      echo "fetch-traces: $dir/$f: no such file" >&2
    fi
  done
  echo "fetch-traces: TRACES=$dir is not the pinned trace; leave TRACES unset to fetch it into _output/traces" >&2
  exit 1
fi

mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# by_http FILE: one file from the raw file server at the pinned commit.
by_http() {
  local url="$raw_base/$repo/$commit/$path/$1"
  if command -v curl >/dev/null; then
    curl -fsSL --retry 2 --connect-timeout 20 -o "$tmp/$1" "$url"
  elif command -v wget >/dev/null; then
    wget -q -T 20 -O "$tmp/$1" "$url"
  else
    echo "fetch-traces: neither curl nor wget" >&2; return 1
  fi
}

# by_git FILE: the pinned commit fetched shallow and without blobs, then
# only FILE's blob checked out.
by_git() {
  command -v git >/dev/null || return 1
  local g=$tmp/git
  if [[ ! -e $tmp/git.tried ]]; then
    touch "$tmp/git.tried"
    git init -q "$g" &&
      git -C "$g" remote add origin "$git_url" &&
      GIT_TERMINAL_PROMPT=0 timeout 300 git -C "$g" fetch -q --depth 1 --filter=blob:none origin "$commit" ||
      return 1
    touch "$tmp/git.fetched"
  fi
  [[ -e $tmp/git.fetched ]] || { echo "git: the fetch of $commit failed for an earlier file" >&2; return 1; }
  GIT_TERMINAL_PROMPT=0 timeout 300 git -C "$g" checkout -q "$commit" -- "$path/$1" &&
    cp "$g/$path/$1" "$tmp/$1"
}

failed=()
for f in "${missing[@]}"; do
  got=""
  for source in by_http by_git; do
    rm -f "$tmp/$f"
    if "$source" "$f" 2>"$tmp/err" && [[ -f $tmp/$f ]]; then
      if [[ $(sum "$tmp/$f") == "${sha256[$f]}" ]]; then
        mv "$tmp/$f" "$dir/$f"; got=$source; break
      fi
      echo "fetch-traces: $f from $source: sha256 $(sum "$tmp/$f"), want ${sha256[$f]}; not used" >&2
    else
      echo "fetch-traces: $f from $source failed: $(tail -n1 "$tmp/err" 2>/dev/null)" >&2
    fi
  done
  if [[ -n $got ]]; then
    echo "fetch-traces: $dir/$f ($got, checksum matches)"
  else
    failed+=("$f")
  fi
done

if (( ${#failed[@]} > 0 )); then
  cat >&2 <<MSG
fetch-traces: could not fetch ${failed[*]} (no route to GitHub?).
  The files are $path/{${files[0]},${files[1]}}
  of https://github.com/$repo at commit $commit.
  With a copy of them in a directory: make replay TRACES=<directory>
MSG
  exit 1
fi
