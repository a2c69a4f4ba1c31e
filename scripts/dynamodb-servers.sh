#!/usr/bin/env bash
# Local DynamoDB-compatible servers for the store conformance tests.
#
#   scripts/dynamodb-servers.sh install   # idempotent: pinned moto (pip, venv if needed) + dynalite (npm)
#   eval "$(scripts/dynamodb-servers.sh start)"   # start both on free loopback ports, print export lines
#   scripts/dynamodb-servers.sh env       # print the export lines of the running servers again
#   scripts/dynamodb-servers.sh stop      # stop the servers this script started
#
# moto also serves S3 on the same port (the results bucket of the offload tests).
# moto is served single-threaded (tools/moto_single.py): its threaded server lets two racing
# conditional writes both win. dynalite is atomic but ignores ReturnValuesOnConditionCheckFailure,
# which is what exercises the store's GetItem fallback. Neither deletes TTL-expired items.
#
# Everything lives in $DEDUP_SERVERS_DIR (default: target/dynamodb-servers, ignored by git).
# Only export lines go to stdout; progress and errors go to stderr.
set -euo pipefail

MOTO_VERSION=5.2.1
DYNALITE_VERSION=4.0.0

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${DEDUP_SERVERS_DIR:-$ROOT/target/dynamodb-servers}"
PIDS="$DIR/pids"
ENV_FILE="$DIR/servers.env"

log() { printf 'dynamodb-servers: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

moto_ok() {
  "$1" - "$MOTO_VERSION" >/dev/null 2>&1 <<'PY'
import sys
import moto, werkzeug.serving
import moto.dynamodb, moto.s3
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
sys.exit(0 if moto.__version__ == sys.argv[1] else 1)
PY
}

# Prints the python that has the pinned moto, installing it into a venv if no python here has it.
moto_python() {
  local sys_py="${DEDUP_PYTHON:-python3}" venv="$DIR/venv-moto"
  if command -v "$sys_py" >/dev/null 2>&1 && moto_ok "$sys_py"; then
    command -v "$sys_py"; return
  fi
  if [ -x "$venv/bin/python" ] && moto_ok "$venv/bin/python"; then
    echo "$venv/bin/python"; return
  fi
  return 1
}

dynalite_ok() {
  local pkg="$DIR/dynalite/node_modules/dynalite/package.json"
  [ -f "$pkg" ] && node -e 'process.exit(require(process.argv[1]).version === process.argv[2] ? 0 : 1)' \
    "$pkg" "$DYNALITE_VERSION" 2>/dev/null
}

cmd_install() {
  mkdir -p "$DIR"
  if py="$(moto_python)"; then
    log "moto $MOTO_VERSION present ($py)"
  else
    local sys_py="${DEDUP_PYTHON:-python3}"
    command -v "$sys_py" >/dev/null 2>&1 || die "python3 not found (needed for moto)"
    log "installing moto[server,dynamodb,s3]==$MOTO_VERSION into $DIR/venv-moto"
    "$sys_py" -m venv "$DIR/venv-moto" >&2
    "$DIR/venv-moto/bin/pip" install --quiet --disable-pip-version-check \
      "moto[server,dynamodb,s3]==$MOTO_VERSION" >&2
    moto_python >/dev/null || die "moto $MOTO_VERSION still not importable after pip install"
  fi
  if dynalite_ok; then
    log "dynalite $DYNALITE_VERSION present"
  else
    command -v npm >/dev/null 2>&1 || die "npm not found (needed for dynalite)"
    log "installing dynalite@$DYNALITE_VERSION into $DIR/dynalite"
    mkdir -p "$DIR/dynalite"
    [ -f "$DIR/dynalite/package.json" ] || echo '{"name":"dedup-dynalite","private":true}' >"$DIR/dynalite/package.json"
    (cd "$DIR/dynalite" && npm install --no-audit --no-fund --loglevel=error "dynalite@$DYNALITE_VERSION" >&2)
    dynalite_ok || die "dynalite $DYNALITE_VERSION not installed"
  fi
}

# True if PID is alive and its command line mentions $2 (guards against a recycled PID).
is_ours() {
  local pid="$1" marker="$2"
  [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$marker"
}

running() {
  [ -f "$PIDS" ] || return 1
  local name pid marker
  while read -r name pid marker; do
    is_ours "$pid" "$marker" || return 1
  done <"$PIDS"
  [ -f "$ENV_FILE" ]
}

wait_http() {
  local url="$1" pid="$2" what="$3" i
  for i in $(seq 1 150); do
    kill -0 "$pid" 2>/dev/null || return 1
    # Any HTTP answer means the server is up; DynamoDB-style errors are fine here.
    if curl -s -o /dev/null -m 2 -X POST -H 'X-Amz-Target: DynamoDB_20120810.ListTables' \
      -H 'Content-Type: application/x-amz-json-1.0' -d '{}' "$url"; then
      return 0
    fi
    sleep 0.1
  done
  log "$what did not answer at $url within 15 s"
  return 1
}

wait_file() {
  local file="$1" pid="$2" i
  for i in $(seq 1 150); do
    [ -s "$file" ] && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

cmd_start() {
  if running; then
    log "already running (pids in $PIDS)"
    cat "$ENV_FILE"
    return
  fi
  [ -f "$PIDS" ] && cmd_stop
  command -v curl >/dev/null 2>&1 || die "curl not found (used to wait for the servers)"
  local py
  if ! py="$(moto_python)" || ! dynalite_ok; then
    cmd_install
    py="$(moto_python)"
  fi
  mkdir -p "$DIR"
  rm -f "$DIR/moto.port" "$DIR/moto.log" "$DIR/dynalite.log"
  : >"$PIDS"

  # setsid + closed stdio: the servers must not hold the $(...) pipe of `eval "$(... start)"` open.
  setsid "$py" "$ROOT/tools/moto_single.py" 127.0.0.1 0 "$DIR/moto.port" \
    </dev/null >"$DIR/moto.log" 2>&1 &
  local moto_pid=$!
  echo "moto $moto_pid moto_single.py" >>"$PIDS"

  # dynalite's CLI treats --port 0 as "use 4567", so listen through its API to get a free port.
  setsid node -e '
    const dynalite = require(process.argv[1]);
    const server = dynalite({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 });
    server.listen(0, "127.0.0.1", () => {
      console.log("Dynalite listening at: http://127.0.0.1:" + server.address().port);
    });
    process.on("SIGTERM", () => process.exit(0));
  ' "$DIR/dynalite/node_modules/dynalite" </dev/null >"$DIR/dynalite.log" 2>&1 &
  local dyn_pid=$!
  echo "dynalite $dyn_pid dynalite" >>"$PIDS"

  local moto_port dyn_port
  if ! wait_file "$DIR/moto.port" "$moto_pid"; then
    log "moto failed to start; log:"; cat "$DIR/moto.log" >&2; cmd_stop; exit 1
  fi
  moto_port="$(cat "$DIR/moto.port")"
  local i
  for i in $(seq 1 150); do
    dyn_port="$(sed -n 's#^Dynalite listening at: http://[^:]*:\([0-9]*\).*#\1#p' "$DIR/dynalite.log" 2>/dev/null || true)"
    [ -n "$dyn_port" ] && break
    kill -0 "$dyn_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "${dyn_port:-}" ]; then
    log "dynalite failed to start; log:"; cat "$DIR/dynalite.log" >&2; cmd_stop; exit 1
  fi

  local moto_url="http://127.0.0.1:$moto_port" dyn_url="http://127.0.0.1:$dyn_port"
  wait_http "$moto_url" "$moto_pid" moto || { cat "$DIR/moto.log" >&2; cmd_stop; exit 1; }
  wait_http "$dyn_url" "$dyn_pid" dynalite || { cat "$DIR/dynalite.log" >&2; cmd_stop; exit 1; }

  cat >"$ENV_FILE" <<ENV
export DEDUP_TEST_MOTO_ENDPOINT=$moto_url
export DEDUP_TEST_DYNALITE_ENDPOINT=$dyn_url
export DEDUP_TEST_MOTO_PID=$moto_pid
export DEDUP_TEST_DYNALITE_PID=$dyn_pid
export AWS_ACCESS_KEY_ID=test
export AWS_SECRET_ACCESS_KEY=test
export AWS_REGION=us-east-1
export AWS_DEFAULT_REGION=us-east-1
ENV
  log "moto (pid $moto_pid) at $moto_url, dynalite (pid $dyn_pid) at $dyn_url"
  cat "$ENV_FILE"
}

cmd_stop() {
  [ -f "$PIDS" ] || { log "nothing to stop"; return 0; }
  local name pid marker i
  while read -r name pid marker; do
    if is_ours "$pid" "$marker"; then
      kill -TERM "$pid" 2>/dev/null || true
      for i in $(seq 1 50); do
        is_ours "$pid" "$marker" || break
        sleep 0.1
      done
      if is_ours "$pid" "$marker"; then
        kill -KILL "$pid" 2>/dev/null || true
      fi
      log "stopped $name (pid $pid)"
    fi
  done <"$PIDS"
  rm -f "$PIDS" "$ENV_FILE"
}

cmd_env() {
  running || die "servers are not running; start them with: eval \"\$(scripts/dynamodb-servers.sh start)\""
  cat "$ENV_FILE"
}

case "${1:-}" in
  install) cmd_install ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  env) cmd_env ;;
  *) echo "usage: $0 install|start|env|stop" >&2; exit 2 ;;
esac
