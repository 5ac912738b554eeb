#!/bin/sh
# A base image for autograder/Dockerfile where no image registry can be reached: Debian bookworm
# (minbase) with Python 3.11 from Debian's packages, made with debootstrap from Debian's archive,
# then imported into podman. Its `python` is a virtual environment's (/opt/python, first on PATH),
# since Debian's own Python refuses `pip install` outside one (PEP 668), and the Dockerfile installs
# with `python -m pip` as it does on the official image.
#
# As root, from the repository root (docs/containers.md):
#   autograder/make-base-image.sh                      # tags localhost/course-base:bookworm
#   autograder/build-image.sh --build-arg BASE_IMAGE=localhost/course-base:bookworm
# An image of that name that exists already is kept: `podman rmi` it to make it again.
set -eu
tag="${1:-localhost/course-base:bookworm}"
if podman image exists "$tag"; then
  echo "$tag exists already: kept (podman rmi $tag, then run this again, to make it anew)."
  exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$work/root" >"$work/log" ||
  { tail -20 "$work/log"; exit 1; }
chroot "$work/root" python3 -m venv /opt/python
# What an image never reads: apt's packages and lists (the Dockerfile fetches the lists again), manuals
# and translations.
find "$work/root/var/cache/apt" "$work/root/var/lib/apt/lists" -type f -delete
rm -rf "$work"/root/usr/share/doc/* \
  "$work"/root/usr/share/man/* "$work"/root/usr/share/locale/*
tar -C "$work/root" -c . |
  podman import --change 'ENV PATH=/opt/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' - "$tag"
