#!/usr/bin/env bash
# e2e (#28): the transport between hosts is authenticated and can be encrypted. A redis-server with
# requirepass and an ACL user; an --role api agentqd serving HTTPS (--tls-cert/--tls-key, a
# self-signed certificate made here with the openssl CLI) and an --role worker agentqd, both
# reaching Redis as the ACL user in database 3 (redis://user:password@host:port/3). A job submitted
# with the agentq CLI over HTTPS completes; the keys are in db 3; plain HTTP on the TLS port gets no
# HTTP answer; an agentqd with a wrong Redis password is not ready (/readyz 503) and never logs it.
# Env (set by ctest): AGENTQ_SOURCE_DIR, AGENTQ_BIN_DIR, AGENTQ_SHARED_DIR. Exit 77 = skipped.
set -euo pipefail
source "${AGENTQ_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/support/multiproc_env.sh"
need_bins agentqd agentq
need_model
need_tools redis-server redis-cli python3 openssl curl

# Redis: an ACL user confined to agentq:* keys, and requirepass for the default user.
start_redis
redis-cli -p "$rport" ACL SETUSER agentq on '>w0rker p@ss' '~agentq:*' '+@all' >/dev/null
redis-cli -p "$rport" CONFIG SET requirepass default-pass >/dev/null
rcli() { redis-cli --no-auth-warning -p "$rport" -a default-pass "$@"; }
[ "$(redis-cli -p "$rport" ping 2>&1 | grep -c NOAUTH)" = 1 ] || fail "redis is not protected"

openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost \
  -addext subjectAltName=IP:127.0.0.1,DNS:localhost -keyout "$tmp/key.pem" -out "$tmp/cert.pem" >/dev/null 2>&1 ||
  { echo "skip: openssl could not make a certificate"; exit 77; }

admin="aq_remote_transport_admin_0123456789"
url="redis://agentq:w0rker%20p%40ss@127.0.0.1:$rport/3"   # password "w0rker p@ss", %-escaped
common=(--data-dir "$tmp/data" --model "$model" --allow-addresses 127.0.0.0/8 --admin-key "$admin" --rate-limit 0)
AGENTQ_REDIS="$url" "$bin/agentqd" --role api --listen 127.0.0.1:0 --port-file "$tmp/api_port" \
  --tls-cert "$tmp/cert.pem" --tls-key "$tmp/key.pem" "${common[@]}" >"$tmp/api.log" 2>&1 &
pids+=($!)
wait_file "$tmp/api_port"
AGENTQ_REDIS="$url" "$bin/agentqd" --role worker "${common[@]}" >"$tmp/worker.log" 2>&1 &
pids+=($!)
port=$(cat "$tmp/api_port")
grep -q "listening on https://" "$tmp/api.log" || fail "the api does not say https"

# HTTPS with verification against the test certificate (curl, and the CLI through SSL_CERT_FILE).
code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$tmp/cert.pem" "https://127.0.0.1:$port/healthz")
[ "$code" = 200 ] || fail "GET /healthz over https: $code"
for _ in $(seq 1 100); do
  code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$tmp/cert.pem" "https://127.0.0.1:$port/readyz")
  [ "$code" = 200 ] && break; sleep 0.1
done
[ "$code" = 200 ] || fail "GET /readyz over https: $code (redis AUTH?)"
if curl -s --max-time 5 -o /dev/null "https://127.0.0.1:$port/healthz"; then fail "an unverified certificate was accepted"; fi
plain=$(curl -s --max-time 5 -o - -w '%{http_code}' "http://127.0.0.1:$port/healthz" || true)
case "$plain" in *200*) fail "plain HTTP on the TLS port was answered: $plain" ;; esac

export AGENTQ_URL="https://127.0.0.1:$port" AGENTQ_API_KEY="$admin" SSL_CERT_FILE="$tmp/cert.pem"
printf '{"model":"stories260K","messages":[{"role":"user","content":"Once upon a time"}],"max_turns":1,"max_tokens_per_turn":16}\n' >"$tmp/job.json"
id=$("$bin/agentq" submit "$tmp/job.json")
set +e
"$bin/agentq" wait "$id" --timeout 60 >/dev/null 2>&1
rc=$?
set -e
case "$rc" in 0 | 12) ;; *) fail "job $id: wait exit $rc" ;; esac
grep -q "job $id claimed" "$tmp/worker.log" || fail "the worker process did not run $id"
# Everything agentq wrote to Redis is in database 3, nothing in 0.
[ "$(rcli -n 3 exists agentq:jobs:normal)" = 1 ] || fail "no agentq:jobs:normal in db 3"
[ "$(rcli -n 0 dbsize)" = 0 ] || fail "keys in db 0: $(rcli -n 0 keys '*' | head)"
echo "https + redis ACL user: $id done (wait exit $rc), streams in db 3"

# A wrong password: the process starts, is not ready, and says why without the password.
AGENTQ_REDIS="redis://agentq:not-the-password@127.0.0.1:$rport/3" "$bin/agentqd" --role api --listen 127.0.0.1:0 \
  --port-file "$tmp/bad_port" --data-dir "$tmp/data_bad" --model "$model" --admin-key "$admin" >"$tmp/bad.log" 2>&1 &
pids+=($!)
wait_file "$tmp/bad_port"
code=$(curl -s -o "$tmp/ready.json" -w '%{http_code}' "http://127.0.0.1:$(cat "$tmp/bad_port")/readyz")
[ "$code" = 503 ] || fail "/readyz with a wrong redis password: $code"
grep -q WRONGPASS "$tmp/bad.log" || fail "the refused AUTH is not logged"
if grep -q "not-the-password" "$tmp/bad.log" "$tmp/ready.json"; then fail "the redis password was logged"; fi
if grep -q "p@ss\|p%40ss" "$tmp/api.log" "$tmp/worker.log"; then fail "the redis password was logged"; fi
echo "wrong redis password: /readyz 503, WRONGPASS logged without the password"
