#!/bin/bash
# Builds the TA's image (autograder/Dockerfile) with podman and tags it self-attention-grader.
# As root, from the repository root (docs/containers.md); options go to `podman build`:
#   autograder/build-image.sh
#   autograder/build-image.sh --build-arg BASE_IMAGE=localhost/course-base:bookworm
#
# pip in the build uses this machine's pip settings, whatever form they take here: pip.conf files
# (under /etc, ~/.config/pip, ~/.pip, a virtual environment's) and PIP_* environment variables, such as
# PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS or PIP_TRUSTED_HOST. `pip config list` reads them as
# pip does; the build gets them as one pip.conf, mounted read-only with the local paths it names (a
# local index, local wheels, a CA bundle), and keeps none of them in the image. PYTHON names the
# Python whose pip reads them (default: python3).
#
# runc runs the build where it is installed (podman's default, crun, fails on some hosts' cgroups), with
# limits on open files and processes that every host allows. The image this build replaces is removed,
# so that builds do not pile up images of 1.3 GB.
set -euo pipefail
tag=self-attention-grader
python="${PYTHON:-python3}"
cd "$(dirname "$0")/.."
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

options=(--ulimit nofile=4096:4096 --ulimit nproc=4096:4096)
if command -v runc >/dev/null; then
  options+=(--runtime runc)
fi
if "$python" -m pip --version >/dev/null 2>&1; then
  # The flattened settings, then each local path they name, one a line.
  "$python" - "$scratch/pip.conf" "$scratch/extra-index-url" >"$scratch/paths" <<'PY'
import ast, re, subprocess, sys
from pathlib import Path

listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                        check=True).stdout
# "section.key='value'", in the order pip reads them: a later one overrides an earlier one.
settings = {key: " ".join(ast.literal_eval(value).split())
            for key, value in re.findall(r"^[^.\n]*\.([\w-]+)=(.*)$", listed, flags=re.MULTILINE)}
settings.pop("config-file", None)  # PIP_CONFIG_FILE names a file already read here
Path(sys.argv[1]).write_text("[global]\n" + "".join(f"{key} = {value}\n" for key, value in settings.items()))
Path(sys.argv[2]).write_text(settings.get("extra-index-url", ""))
paths = []
for word in " ".join(settings.values()).split():
    # A local index (file://.../simple) links to files beside it: its parent goes along.
    path = Path(word.removeprefix("file://")).parent if word.startswith("file://") else Path(word)
    if path.is_absolute() and path.exists() and path not in paths:  # each once: podman refuses a second mount
        paths.append(path)
print("".join(f"{path}\n" for path in paths), end="")
PY
  mapfile -t paths <"$scratch/paths"
  # The Dockerfile's build argument for the same setting (docker's way to give it) is an environment
  # variable in the build, which pip reads after its files: it gets the same value.
  options+=(--volume "$scratch/pip.conf:/etc/pip.conf:ro"
           --build-arg "PIP_EXTRA_INDEX_URL=$(cat "$scratch/extra-index-url")")
  for path in "${paths[@]}"; do
    options+=(--volume "$path:$path:ro")
  done
else
  echo "No pip for $python here: the build uses pip's own defaults (PYTHON=... names another Python)." >&2
fi

old="$(podman image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)"
podman build "${options[@]}" "$@" --file autograder/Dockerfile --tag "$tag" .
if [ -n "$old" ] && [ "$old" != "$(podman image inspect --format '{{.Id}}' "$tag")" ]; then
  podman rmi "$old" >/dev/null 2>&1 || true  # still used by a container, or tagged elsewhere: kept
fi
