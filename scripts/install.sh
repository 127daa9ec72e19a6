#!/usr/bin/env bash
# Installs everything the local stack needs, once: the virtual environment, the
# Triton server files and the embedded default model. Safe to re-run: each step
# is skipped when its marker says it is already done.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3.11}"
CACHE_DIR="${GATEWAY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/triton-vllm-gateway}"

log() { printf '\033[1m[install]\033[0m %s\n' "$*"; }

pip_quiet() {
  # pip reports every configured index that lacks a package; keep only what matters.
  "$VENV/bin/python" -m pip "$@" 2>&1 | { grep -v "is ignored: it is neither" || true; }
  return "${PIPESTATUS[0]}"
}

install_venv() {
  local marker="$VENV/.stack-installed"
  local wanted
  wanted="$(cat "$ROOT"/requirements/*.txt "$ROOT/pyproject.toml" | sha256sum | cut -c1-16)"
  if [[ -f "$marker" && "$(cat "$marker")" == "$wanted" ]]; then
    return
  fi
  if [[ -L "$VENV" ]]; then  # a worktree borrowing another checkout's venv: installing would repoint it here
    log "$VENV is a link to another checkout's environment: left as it is"
    return
  fi
  log "installing the virtual environment in $VENV (a few minutes the first time)"
  command -v "$PYTHON" >/dev/null || PYTHON=python3
  [[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
  # 1. vLLM's CPU build, in a resolve of its own (it pulls torch's CPU build).
  pip_quiet install -q --progress-bar off -r "$ROOT/requirements/stack.txt"
  # 2. vLLM drags in torchvision/torchaudio/torchcodec built for another torch;
  #    with the CPU torch they break every transformers import.
  pip_quiet uninstall -q -y torchvision torchaudio torchcodec
  # 3. Pins that no single resolve satisfies together with vLLM (see the file).
  pip_quiet install -q --progress-bar off --no-deps $(grep -E '^(numpy|protobuf)==' "$ROOT/requirements/constraints.txt")
  # 4. The project, the Triton client and the test tools, under those pins.
  pip_quiet install -q --progress-bar off -c "$ROOT/requirements/constraints.txt" -e "$ROOT[stack,test,bench]"
  # 5. Triton's server files only; the wheel's Python API is not used.
  pip_quiet install -q --progress-bar off --no-deps -r "$ROOT/requirements/triton.txt"
  echo "$wanted" > "$marker"
}

install_promtool() {
  # Prometheus' own exposition-format checker, for the metrics tests. Only the binary is
  # unpacked from Debian's package (installing it would also start a Prometheus server).
  local target="$CACHE_DIR/promtool"
  [[ -x "$target/usr/bin/promtool" ]] && return
  command -v apt-get >/dev/null || { log "apt-get not found: the metrics tests will use the Python parser only"; return; }
  log "unpacking promtool from Debian's prometheus package"
  mkdir -p "$target"
  local tmp
  tmp="$(mktemp -d)"
  if ! (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1); then
    apt-get update -qq >/dev/null 2>&1 || true
    (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1) || { log "could not download prometheus"; return; }
  fi
  dpkg-deb -x "$tmp"/prometheus_*.deb "$target"
  rm -rf "$tmp"
}

install_redis() {
  # Debian's redis-server: the tests of counters shared by several gateways start one on a free port.
  command -v redis-server >/dev/null && return
  command -v apt-get >/dev/null || { log "apt-get not found: install redis-server for the shared-limits tests"; return; }
  log "installing Debian's redis-server"
  apt-get install -y -qq redis-server >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null 2>&1 || true; apt-get install -y -qq redis-server >/dev/null 2>&1; } \
    || log "could not install redis-server"
}

install_postgres() {
  # Debian's postgresql: the responses store's tests start a throw-away cluster of their own on a free port
  # (tests/postgres_server.py). Debian's own "main" cluster is not created, and nothing is started at install.
  compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null && return
  command -v apt-get >/dev/null || { log "apt-get not found: install postgresql for the responses store tests"; return; }
  log "installing Debian's postgresql (no cluster created, none started)"
  mkdir -p /etc/postgresql-common
  [ -e /etc/postgresql-common/createcluster.conf ] || echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.conf
  local policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then  # services are not started by the package's scripts
    policy=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy"
  fi
  local apt=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o Dpkg::Options::=--force-confold postgresql)
  "${apt[@]}" >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null 2>&1 || true; "${apt[@]}" >/dev/null 2>&1; } \
    || log "could not install postgresql"
  [ -n "$policy" ] && rm -f "$policy"
  return 0
}

main() {
  install_venv
  install_promtool
  install_redis
  install_postgres
  "$VENV/bin/python" -m localstack.prepare --cache-dir "$CACHE_DIR"
}

main "$@"
