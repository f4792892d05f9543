#!/usr/bin/env bash
# Create or update the project's virtualenv at .venv (repo root). Run by scripts/demo and
# scripts/test. Re-installs only when pyproject.toml, constraints-cpu.txt or the Python version changed,
# so a second run costs well under a second.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
py="${PYTHON:-python3}"
stamp_src="$("$py" -c 'import sys; print(sys.version)')$(cat "$root/pyproject.toml" "$root/constraints-cpu.txt")"
stamp="$(printf '%s' "$stamp_src" | sha256sum | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ]; then
    echo "[setup] creating virtualenv at $venv" >&2
    "$py" -m venv "$venv"
fi
if [ "$(cat "$venv/.nemo_lead_stamp" 2>/dev/null)" != "$stamp" ]; then
    echo "[setup] installing pinned dependencies (CPU torch 2.13.0, megatron-core 0.16.1) ..." >&2
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
    # torch first and pinned: a bare `torch` requirement would pull a multi-GB CUDA build.
    pip_install -c "$root/constraints-cpu.txt" "torch==2.13.0"
    pip_install -c "$root/constraints-cpu.txt" -e "$root[dev]"
    printf '%s' "$stamp" > "$venv/.nemo_lead_stamp"
    echo "[setup] done" >&2
fi
