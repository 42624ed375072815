#!/bin/bash
# Unpacks the JIT cache packs carried to a device machine into one cache folder: .jitcache-pack/cache.tgz and every
# .jitcache-pack/extra-*.tgz, each a tar (gzip) of one cache folder (`tar czf .jitcache-pack/cache.tgz .jitcache`,
# or a device script's `pack` stage), its top folder stripped. Prints the packs it unpacked; creates DEST and
# touches DEST/.unpacked, packs or not (kernels built afterwards are the ones newer than it). Kernels only load where
# nvcc's version matches (the cache keys them by it). Usage, from the repo root: bash scripts/unpack_jitcache.sh DEST
set -uo pipefail
dest=${1:?usage: unpack_jitcache.sh DEST}
mkdir -p "$dest" || exit 1
for pack in .jitcache-pack/cache.tgz .jitcache-pack/extra-*.tgz; do
  [ -f "$pack" ] || continue
  tar xzf "$pack" -C "$dest" --strip-components=1 && echo "unpacked $pack into $dest" || exit 1
done
touch "$dest/.unpacked"
